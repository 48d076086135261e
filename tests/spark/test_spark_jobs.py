"""The jobs in spark_jobs/ run in-process on the shared SparkSession: txn_ctp (Acceptance 4) and aggregate."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kafka_util import create_topic, produce, read_all, values

from spark_jobs import aggregate, txn_ctp


def test_txn_ctp_with_killed_task_is_exactly_once(spark: Any, broker: Any) -> None:
    """Acceptance 4: 50,000 records, the first attempt of task 1 SIGKILLed mid-transaction."""
    n = 50_000
    create_topic(broker.bootstrap, "topic1", partitions=2)
    produce(broker.bootstrap, "topic1", [(i % 2, f"k{i}".encode(), f"msg-{i}".encode()) for i in range(n)])
    summary = txn_ctp.main(["--bootstrap", broker.bootstrap, "--input", "topic1", "--output", "topic2",
                            "--group", "ctp", "--batch", "2000", "--kill-task", "1:3"])
    out = read_all(broker.bootstrap, "topic2")
    assert len(out) == n
    assert sorted(values(out)) == sorted(f"MSG-{i}".encode() for i in range(n))
    assert all(k == b"k" + v[4:] for _, _, k, v in out)  # key kept, value upper-cased
    # The group's committed offsets are the input's end offsets.
    assert summary["committed_offsets"] == summary["end_offsets"] == {"0": n // 2, "1": n // 2}
    # The killed attempt really ran: partition 1 finished in a retry that resumed mid-partition.
    task1 = next(t for t in summary["tasks"] if t["partition"] == 1)
    assert task1["attempt"] >= 1 and task1["start_offset"] == 3 * 2000
    # Its half transaction reached the broker and was aborted by the retry's fencing.
    assert len(read_all(broker.bootstrap, "topic2", "read_uncommitted")) > n


def test_aggregate_running_totals_to_compacted_topic(spark: Any, broker: Any, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, "payments", partitions=2)
    base = 1_700_000_000_000 - 1_700_000_000_000 % 60_000  # a minute boundary, in ms
    expected: dict[tuple[str, int], tuple[int, int]] = {}
    recs = []
    for i in range(600):
        acct, minute, amount = f"acct-{i % 3}", i % 2, i
        recs.append((i % 2, acct.encode(), str(amount).encode(), base + minute * 60_000 + i))
        total, count = expected.get((acct, minute), (0, 0))
        expected[(acct, minute)] = (total + amount, count + 1)
    _produce_with_timestamps(broker.bootstrap, "payments", recs)
    aggregate.main(["--bootstrap", broker.bootstrap, "--input", "payments", "--output", "totals",
                    "--checkpoint", str(tmp_path / "ck"), "--available-now", "--max-offsets-per-trigger", "250"])
    latest: dict[str, dict[str, Any]] = {}
    for _, _, key, value in read_all(broker.bootstrap, "totals"):
        latest[key.decode()] = json.loads(value)
    assert len(latest) == 6
    for (acct, minute), (total, count) in expected.items():
        start = datetime.fromtimestamp((base + minute * 60_000) / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        got = latest[f"{acct}|{start}"]
        assert (got["key"], got["window_start"], got["total"], got["count"]) == (acct, start, total, count)


def _produce_with_timestamps(bootstrap: str, topic: str, recs: list[tuple[int, bytes, bytes, int]]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10})
    for part, key, value, ts in recs:
        p.produce(topic, value, key, partition=part, timestamp=ts)
    assert p.flush(30) == 0
