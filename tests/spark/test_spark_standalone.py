"""Acceptance 5 of issue 19: the jobs on a standalone Spark cluster, one worker SIGKILLed mid-run (slow).

Each test starts a master and two 1-core workers on 127.0.0.1 (the ``spark_cluster`` fixture) and
submits a job with ``spark-submit --master spark://...``. The code reaches the executors only as
the shipped zip (``--py-files``): the workers run in a directory of their own with no PYTHONPATH
and a Python without the editable kbroker install (spark_jobs/standalone.py), and the job prints
where its executors imported ``spark_jobs`` from, which must be the zip.

While a job runs, one worker is SIGKILLed with its executor JVM and Python workers (as if its host
died) at a moment when it is running a task (its executor's log shows a task started and not
finished; for txn_ctp also both output partitions' last stable offsets between start and end): the driver loses the executor, Spark runs the lost task
again on the other worker, and the job finishes. A read_committed consumer must then find every
input record exactly once in the output (nothing lost, nothing twice, nothing of the killed
attempt's aborted transaction).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from kafka_util import create_topic, produce, read_all, values

from tests.helpers.spark_cluster import SubmittedJob, executor_tasks, lost_and_rerun

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
N = 20_000
JOB_TIMEOUT = 900  # seconds; Spark JVMs on two shared cores are slow to start, not to finish
SHIPPED = "kbroker: spark_jobs on the executors of spark://127.0.0.1:"


def _input(bootstrap: str, topic: str = "topic1") -> None:
    create_topic(bootstrap, topic, partitions=2)
    produce(bootstrap, topic, [(i % 2, f"k{i}".encode(), f"record-{i}".encode()) for i in range(N)])


def _assert_exactly_once(bootstrap: str, topic: str = "topic2") -> None:
    out = read_all(bootstrap, topic)
    assert len(out) == N, f"{len(out)} records in {topic}, expected {N}"
    assert sorted(values(out)) == sorted(f"RECORD-{i}".encode() for i in range(N))
    assert all(k == b"k" + v[len("RECORD-"):] for _, _, k, v in out)


def _assert_shipped(job: SubmittedJob) -> None:
    line = next((x for x in job.text().splitlines() if x.startswith(SHIPPED)), None)
    assert line is not None, job.tail()
    assert "kbroker_spark.zip/spark_jobs/__init__.py" in line and str(REPO_ROOT) not in line, line


def _assert_rerun(cluster: Any, killed: int, survivor: int) -> None:
    """The killed worker was running a task, and the other worker ran a later attempt of it."""
    lost, rerun = lost_and_rerun(cluster, killed, survivor)
    print(f"lost with worker{killed} (stage, stage attempt, index, attempt): {sorted(lost)}; "
          f"run again on worker{survivor}: {sorted(rerun)}")
    assert lost, "the killed worker's executor was not running a task"
    assert len(rerun) == len(lost), (lost, rerun)


def _wait_until(cond: Any, job: SubmittedJob, what: str, timeout: float = JOB_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert job.running(), f"the job ended before {what}:\n{job.tail()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{job.tail()}"
        time.sleep(0.05)


def test_job_without_shipped_package_fails_loudly(broker: Any, spark_cluster: Any, tmp_path: Path) -> None:
    """No --py-files: the job stops at once with the reason, not after tasks fail deep in Spark."""
    _input(broker.bootstrap)
    with SubmittedJob(spark_cluster, "spark_jobs.uppercase",
                      ["--bootstrap", broker.bootstrap, "--checkpoint", str(tmp_path / "ck"), "--available-now"],
                      log=tmp_path / "driver.log", ship=False) as job:
        code = job.wait(JOB_TIMEOUT)
    text = job.text()
    assert code != 0, job.tail()
    assert "ShippingError: the kbroker data source is not importable on the executors" in text, job.tail()
    assert "No module named 'spark_jobs'" in text and "--py-files" in text
    assert "Streaming Query" not in text  # stopped before any query started


def test_uppercase_exactly_once_with_a_worker_killed(broker: Any, spark_cluster: Any, tmp_path: Path) -> None:
    _input(broker.bootstrap)
    ck = tmp_path / "ck"

    def done_batches() -> int:
        d = ck / "commits"
        return len([p for p in d.iterdir() if p.name.isdigit()]) if d.is_dir() else 0

    def worker1_in_a_task() -> bool:
        # Its executor logged "Running task" for a task it has not finished: one task of the
        # micro-batch in flight (each task reads its range, writes and commits one transaction).
        started, finished = executor_tasks(spark_cluster, 1)
        return bool(started - finished)

    # 4 micro-batches of 5,000 offsets: each task writes 2,500 records in one transaction.
    args = ["--bootstrap", broker.bootstrap, "--input", "topic1", "--output", "topic2", "--checkpoint", str(ck),
            "--available-now", "--max-offsets-per-trigger", "5000"]
    with SubmittedJob(spark_cluster, "spark_jobs.uppercase", args, log=tmp_path / "driver.log") as job:
        _wait_until(lambda: done_batches() >= 1 and worker1_in_a_task(), job, "a task of batch 1 or later")
        spark_cluster.kill_worker(1)
        code = job.wait(JOB_TIMEOUT)
    assert code == 0, job.tail()
    _assert_shipped(job)
    text = job.text()
    assert "Lost executor" in text, job.tail()
    _assert_rerun(spark_cluster, killed=1, survivor=0)
    assert job.summary()["last_batch_id"] == N // 5000 - 1
    _assert_exactly_once(broker.bootstrap)


def test_txn_ctp_exactly_once_with_a_worker_killed(broker: Any, spark_cluster: Any, tmp_path: Path) -> None:
    _input(broker.bootstrap)
    # Not the group's committed offsets: with a transaction always pending, an OffsetFetch asking
    # for stable offsets waits. The output's last stable offset shows committed progress at once.
    lso = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "w", "isolation.level": "read_committed"})

    def worker0_mid_partition() -> bool:
        started, finished = executor_tasks(spark_cluster, 0)
        if not {t for t in started - finished if t[0] >= 1}:  # stage 0 is the executor check's
            return False
        try:
            ends = [lso.get_watermark_offsets(TopicPartition("topic2", p), timeout=10, cached=False)[1]
                    for p in (0, 1)]
        except KafkaException:
            return False
        # Both tasks (one per worker) have committed transactions and are not done.
        return all(0 < e < N // 2 for e in ends)

    args = ["--bootstrap", broker.bootstrap, "--input", "topic1", "--output", "topic2", "--group", "ctp",
            "--batch", "25"]  # 400 transactions per partition: a wide window to kill in
    try:
        with SubmittedJob(spark_cluster, "spark_jobs.txn_ctp", args, log=tmp_path / "driver.log") as job:
            _wait_until(worker0_mid_partition, job, "both tasks mid-partition")
            spark_cluster.kill_worker(0)
            code = job.wait(JOB_TIMEOUT)
    finally:
        lso.close()
    assert code == 0, job.tail()
    _assert_shipped(job)
    summary = job.summary()
    assert summary["committed_offsets"] == summary["end_offsets"] == {"0": N // 2, "1": N // 2}
    # One task was re-run (attempt >= 1) on the surviving worker and resumed mid-partition.
    retried = [t for t in summary["tasks"] if t["attempt"] >= 1]
    assert len(retried) == 1 and 0 < retried[0]["start_offset"] < N // 2, summary
    assert "Lost executor" in job.text(), job.tail()
    _assert_rerun(spark_cluster, killed=0, survivor=1)
    _assert_exactly_once(broker.bootstrap)
