"""Issue 19 acceptance 3: the 2pc sink mode under two driver SIGKILLs and task failures, exactly
once, and a read_committed reader polling during the whole job never sees part of a micro-batch.

``uppercase`` (tests/spark/twopc_uppercase_job.py) over 20,000 records in batches of 2,000 runs
as its own process group. Run 1 has its sink task of batch 1 fail after 300 rows (Spark retries
it) and dies by SIGKILL inside the driver's commit of batch 2, after recording the decision and
committing one of its two transactions: readers must still see exactly batches 0 and 1. Run 2 is
SIGKILLed from outside once a few more batches are done. Run 3 has the Python worker of a task of
batch 8 SIGKILLed mid-batch and finishes. A poller consumes the output with read_committed all
along; each time it reaches the end of a partition, every batch id it has seen there must have all
of its rows there (counted by the ``batch`` header).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from kafka_util import create_topic, produce, read_all, values

from spark_jobs.twopc_producer import SinkProducer

REPO = Path(__file__).resolve().parents[2]
JOB = Path(__file__).with_name("twopc_uppercase_job.py")
N, PER_BATCH = 20_000, 2_000


def _start(bootstrap: str, checkpoint: Path, log: Path, *extra: str,
           env_extra: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, str(JOB), "--bootstrap", bootstrap, "--input", "topic1", "--output", "topic2",
           "--checkpoint", str(checkpoint), "--available-now", "--max-offsets-per-trigger", str(PER_BATCH), *extra]
    # The driver commits a batch's transactions one by one, 0.5 s apart: without the gate the poller
    # would see the first task's rows alone.
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(REPO),
           "KBROKERTEST_SPARK_2PC_COMMIT_DELAY_MS": "500", **(env_extra or {})}
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _committed_batches(checkpoint: Path) -> set[int]:
    d = checkpoint / "commits"
    return {int(p.name) for p in d.iterdir() if p.name.isdigit()} if d.is_dir() else set()


def _wait(proc: subprocess.Popen[bytes], log: Path, timeout: float = 900) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"the job did not finish in {timeout}s:\n{log.read_text()[-4000:]}")


class Poller(threading.Thread):
    """read_committed consumer of topic2; at each end-of-partition, a snapshot of the rows per
    batch id seen in that partition so far."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.stop = threading.Event()
        self.seen: dict[int, Counter[int]] = {0: Counter(), 1: Counter()}
        self.snapshots: list[tuple[int, dict[int, int]]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "poller", "isolation.level": "read_committed",
                      "enable.partition.eof": True, "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "fetch.wait.max.ms": 50})
        try:
            c.assign([TopicPartition("topic2", 0, 0), TopicPartition("topic2", 1, 0)])
            deadline = time.monotonic() + 3600
            while not self.stop.is_set() and time.monotonic() < deadline:
                for m in c.consume(1000, 0.2):
                    if m.error() is not None:
                        if m.error().code() == KafkaError._PARTITION_EOF:
                            self.snapshots.append((m.partition(), dict(self.seen[m.partition()])))
                        continue
                    self.seen[m.partition()][int(dict(m.headers())["batch"])] += 1
        except BaseException as e:  # reported by the test
            self.error = e
        finally:
            c.close()

    def total(self) -> int:
        return sum(sum(c.values()) for c in self.seen.values())


def _open_2pc(bootstrap: str) -> list[str]:
    async def run() -> list[str]:
        async with SinkProducer(bootstrap, "probe") as p:
            return await p.list_open("kbroker-spark.")
    return [t for t in asyncio.run(run()) if not t.endswith(".gate")]


@pytest.mark.slow
def test_2pc_exactly_once_and_batch_atomic_across_driver_kills(broker_factory: Any, tmp_path: Path) -> None:
    broker = broker_factory({"transaction.two.phase.commit.enable": "true"})
    create_topic(broker.bootstrap, "topic1", partitions=2)
    create_topic(broker.bootstrap, "topic2", partitions=2)
    produce(broker.bootstrap, "topic1", [(i % 2, f"k{i}".encode(), f"record-{i}".encode()) for i in range(N)])
    ck, log = tmp_path / "ck", tmp_path / "job.log"
    poller = Poller(broker.bootstrap)
    poller.start()
    try:
        # Run 1: a task of batch 1 fails once; the driver dies in the middle of committing batch 2.
        proc = _start(broker.bootstrap, ck, log, "--fail-task", "1:0:300",
                      env_extra={"KBROKERTEST_SPARK_CRASH_AT_BATCH": "2"})
        assert _wait(proc, log) == -signal.SIGKILL, log.read_text()[-4000:]
        assert _committed_batches(ck) == {0, 1}
        assert (ck / "kbroker_2pc" / "2.json").exists()  # decided, half committed, not in Spark's log
        assert len(read_all(broker.bootstrap, "topic2")) == 2 * PER_BATCH  # the gate hides batch 2's half

        # Run 2: killed from outside once more batches are done (wherever it is).
        proc = _start(broker.bootstrap, ck, log)
        deadline = time.monotonic() + 900
        while len(_committed_batches(ck)) < 5 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, "run 2 ended before it could be killed:\n" + log.read_text()[-4000:]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

        # Run 3: the Python worker of a task of batch 8 is SIGKILLed mid-batch; runs to the end.
        assert _wait(_start(broker.bootstrap, ck, log, "--fail-task", "8:1:500:kill"), log) == 0, \
            log.read_text()[-4000:]
        assert max(_committed_batches(ck)) == N // PER_BATCH - 1

        out = read_all(broker.bootstrap, "topic2")
        assert len(out) == N
        assert sorted(values(out)) == sorted(f"RECORD-{i}".encode() for i in range(N))
        assert all(k == b"k" + v[len("RECORD-"):] for _, _, k, v in out)
        assert _open_2pc(broker.bootstrap) == []  # nothing stays prepared

        deadline = time.monotonic() + 120
        while poller.total() < N and time.monotonic() < deadline and poller.is_alive():
            time.sleep(0.2)
    finally:
        poller.stop.set()
        poller.join(30)
    assert poller.error is None, poller.error
    assert poller.total() == N
    final = {p: dict(c) for p, c in poller.seen.items()}
    assert sorted(set(final[0]) | set(final[1])) == list(range(N // PER_BATCH))
    partial = [(p, b, n, final[p][b]) for p, snap in poller.snapshots for b, n in snap.items() if n != final[p][b]]
    assert not partial, f"partial micro-batches observed (partition, batch, seen, total): {partial[:10]}"
    # The poller did look in between: it saw the output at several different stages.
    assert len({tuple(sorted(s.items())) for _, s in poller.snapshots}) >= 4
