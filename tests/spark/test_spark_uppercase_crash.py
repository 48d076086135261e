"""Acceptance 2: ``uppercase`` over 50,000 records survives two driver SIGKILLs, exactly once.

The job runs as its own process group (driver Python, Spark JVM, Python workers), as
``python -m spark_jobs.uppercase`` would on a host. Run 1 dies by SIGKILL inside the sink's
driver-side commit of batch 2 (the worst moment: every task has committed its transaction, Spark has
not yet recorded the batch as done, so the restart replays it). Run 2 is SIGKILLed by the test at an
arbitrary moment once a few more batches have completed. Run 3 finishes. A read_committed consumer
of topic2 must then find each input upper-cased exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kafka_util import create_topic, produce, read_all, values

REPO = Path(__file__).resolve().parents[2]
N = 50_000


def _start(bootstrap: str, checkpoint: Path, log: Path, env_extra: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "spark_jobs.uppercase", "--bootstrap", bootstrap, "--input", "topic1",
           "--output", "topic2", "--checkpoint", str(checkpoint), "--available-now",
           "--max-offsets-per-trigger", "2500"]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", **(env_extra or {})}
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _committed_batches(checkpoint: Path) -> set[int]:
    d = checkpoint / "commits"
    return {int(p.name) for p in d.iterdir() if p.name.isdigit()} if d.is_dir() else set()


def _wait(proc: subprocess.Popen[bytes], log: Path, timeout: float = 600) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"uppercase did not finish in {timeout}s:\n{log.read_text()[-4000:]}")


@pytest.mark.slow
def test_uppercase_exactly_once_across_two_driver_kills(broker: Any, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, "topic1", partitions=2)
    produce(broker.bootstrap, "topic1", [(i % 2, f"k{i}".encode(), f"record-{i}".encode()) for i in range(N)])
    ck, log = tmp_path / "ck", tmp_path / "uppercase.log"

    # Run 1: killed in the driver-side commit of batch 2, after the tasks' transactions committed.
    code = _wait(_start(broker.bootstrap, ck, log, {"KBROKERTEST_SPARK_CRASH_AT_BATCH": "2"}), log)
    assert code == -signal.SIGKILL, log.read_text()[-4000:]
    assert _committed_batches(ck) == {0, 1}
    assert (ck / "offsets" / "2").exists()  # batch 2 was planned and written: the restart replays it
    assert len(read_all(broker.bootstrap, "topic2")) == 3 * 2500

    # Run 2: killed from outside once two more batches are done (mid-stream, wherever it is).
    proc = _start(broker.bootstrap, ck, log)
    while len(_committed_batches(ck)) < 5 and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, "run 2 ended before it could be killed:\n" + log.read_text()[-4000:]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()

    # Run 3: to the end.
    assert _wait(_start(broker.bootstrap, ck, log), log) == 0, log.read_text()[-4000:]
    assert max(_committed_batches(ck)) == N // 2500 - 1

    out = read_all(broker.bootstrap, "topic2")
    assert len(out) == N
    assert sorted(values(out)) == sorted(f"RECORD-{i}".encode() for i in range(N))
    assert all(k == b"k" + v[len("RECORD-"):] for _, _, k, v in out)
