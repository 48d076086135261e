"""The seeded fuzzing slice run by every `make test`: a few thousand mutated requests against a real broker.

Cases come from a fixed seed (tests/fuzz/harness.py), across every API and version the broker
advertises. The run must leave the broker up and answering every liveness probe (their latency, bound
1 s, is printed, not asserted: no timed assertions in tests), accept no
malformed record batch, log no traceback except the known open crashers of the regression corpus
(tests/corpus/fuzz_crashers.txt, replayed by test_fuzz_corpus.py), and leave data that a librdkafka
consumer reads back end to end and that `kbroker dump-log --deep-verify` finds decodable.
"""

from __future__ import annotations

from pathlib import Path

from tests.fuzz.harness import Report, campaign

# Tracebacks of crashers already in the corpus with status "open" (signature fragments); a new
# signature fails the slice. Remove an entry when its fix lands.
KNOWN_OPEN: list[tuple[str, ...]] = [
    # (none open: strings over 32767 bytes are refused at parse since the corpus entries were fixed)
]


def _unknown_problems(report: Report) -> list[str]:
    known = [sig for sig in report.crashers if any(all(part in sig for part in k) for k in KNOWN_OPEN)]
    # Liveness: every probe must be answered; its 1 s bound is reported (summary, CLI) but not asserted
    # here, as tests make no timed assertions on a shared machine.
    return [p for p in report.problems(timed=False) if not any(p.startswith(f"crasher {sig}") for sig in known)]


def test_fuzz_slice(tmp_path: Path) -> None:
    report = campaign(4000, 17, tmp_path / "data", workers=4, pipeline=16, time_limit=50)
    print(report.summary())
    assert report.cases > 0
    assert report.broker_alive
    assert report.integrity.get("deep_verify_exit") == 0, report.integrity
    assert report.integrity.get("sigterm_exit") == 0, report.integrity
    assert not _unknown_problems(report), "\n".join(_unknown_problems(report))
