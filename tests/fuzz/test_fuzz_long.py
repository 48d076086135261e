"""The long fuzzing run of `make test-all` (marked slow): at least 1,000,000 mutated requests.

Same checks as the slice (tests/fuzz/test_fuzz_slice.py) over a million cases from another seed,
pipelined over 16 connections; bounded at 90 minutes (measured rate on a shared 2-core machine:
see the harness summary printed by the test). The broker logs at ERROR so that a million WARN
lines for closed connections do not dominate the run; tracebacks are logged at ERROR and still
found.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fuzz.harness import campaign
from tests.fuzz.test_fuzz_slice import _unknown_problems

# The environment knob only exists to smoke-test this file quickly; the default is the real run.
CASES = int(os.environ.get("KBROKERTEST_FUZZ_LONG_CASES", "1000000"))


@pytest.mark.slow
@pytest.mark.timeout(6000)
def test_fuzz_long(tmp_path: Path) -> None:
    report = campaign(CASES, 1_000_003, tmp_path / "data", workers=16, pipeline=32, time_limit=5400,
                      overrides={"kbroker.log.level": "ERROR"})
    print(report.summary())
    assert report.cases >= CASES, f"only {report.cases} cases within the time limit"
    assert report.broker_alive
    assert report.integrity.get("deep_verify_exit") == 0, report.integrity
    assert report.integrity.get("sigterm_exit") == 0, report.integrity
    assert not _unknown_problems(report), "\n".join(_unknown_problems(report))
