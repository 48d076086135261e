"""The 2pc sink mode (``exactlyOnce.mode=2pc``, spark_jobs/sink_2pc.py): the recovery decision,
prepared task transactions the driver commits, the gate, recovery after a driver crash in the
middle of a commit and before one, and a streaming query whose task fails mid-batch. The task
tests run twice: through the raw writer (spark_jobs/raw_writer.py, with two_phase) and with
rawWriter=false (each row through the 2pc producer's batches)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kafka_util import create_topic, produce, read_all, values
from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType

from spark_jobs import raw_writer, sink, sink_2pc
from spark_jobs.twopc_producer import PreparedTxnState, SinkProducer

SINK_SCHEMA = StructType([StructField("key", BinaryType()), StructField("value", StringType())])
TWO_PC = {"transaction.two.phase.commit.enable": "true"}
P = "kbroker-spark.q1.2pc."


def test_plan_recovery_follows_decisions_then_the_commit_log() -> None:
    open_tids = [P + "gate", P + "3.0", P + "3.1", P + "4.0", P + "5.0", P + "5.1", "other.7.0", P + "6.2"]
    decided = {4: {P + "4.0": "10:2", P + "4.1": "11:3"}, 6: {P + "6.0": "12:1"}}
    plan = sink_2pc.plan_recovery(P, open_tids, committed={0, 1, 2, 3, 6}, decided=decided)
    # 3: in Spark's commit log (no decision record): commit what is kept. 4: decided, Spark's log
    # lags (crash between the sink's commit and commits/4): commit with the recorded states.
    assert plan.commit == {P + "3.0": None, P + "3.1": None, P + "4.0": PreparedTxnState(10, 2)}
    # 5: neither (crash before the decision): abort, Spark replays it. 6.2: an attempt Spark did
    # not take the result of. The gate and other queries' ids are not touched.
    assert plan.abort == [P + "5.0", P + "5.1", P + "6.2"]
    assert plan.skip == {4}  # Spark replays 4: its tasks must not write it again
    assert plan.forget == [6]
    assert sink_2pc.parse_tid(P, P + "12.3") == (12, 3) and sink_2pc.parse_tid(P, P + "gate") is None


def test_decision_records_merge(tmp_path: Path) -> None:
    sink_2pc.record_decision(tmp_path, 3, {"a": "1:0"})
    assert sink_2pc.record_decision(tmp_path, 3, {}) == {"a": "1:0"}  # a replay adds nothing, loses nothing
    sink_2pc.record_decision(tmp_path, 4, {"b": "2:0"})
    assert sink_2pc.read_decisions(tmp_path) == {3: {"a": "1:0"}, 4: {"b": "2:0"}}
    sink_2pc.forget_decisions(tmp_path, [3])
    assert sink_2pc.read_decisions(tmp_path) == {4: {"b": "2:0"}}


def _checkpoint(tmp_path: Path) -> Path:
    ck = tmp_path / "ck"
    (ck / "commits").mkdir(parents=True)
    (ck / "metadata").write_text('{"id":"q1"}\n')
    return ck


WRITERS = pytest.mark.parametrize("raw", [True, False], ids=["raw", "rows"])


def _writer(bootstrap: str, ck: Path, raw: bool = True, **options: str) -> sink.KBrokerStreamWriter:
    return sink.KBrokerStreamWriter({"kafka.bootstrap.servers": bootstrap, "topic": "out", "checkpointLocation": str(ck),
                                     "exactlyOnce.mode": "2pc", "kbroker.sink.batchIdHeader": "batch",
                                     "rawWriter": str(raw).lower(), **options}, SINK_SCHEMA)


@pytest.fixture
def raw_prepares(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The transactional ids the raw writer prepared in this process."""
    seen: list[str] = []
    real = raw_writer.RawTransaction.prepare

    def prepare(self: raw_writer.RawTransaction) -> PreparedTxnState:
        seen.append(self.transactional_id)
        return real(self)
    monkeypatch.setattr(raw_writer.RawTransaction, "prepare", prepare)
    return seen


def _rows(vals: list[str]) -> Any:
    yield pa.RecordBatch.from_pydict({"key": [v.encode() for v in vals], "value": vals},
                                     schema=pa.schema([("key", pa.binary()), ("value", pa.string())]))


def _task(w: sink.KBrokerStreamWriter, batch: int, partition: int, vals: list[str]) -> sink.TaskReport:
    return sink_2pc.write_task(w, _rows(vals), batch_id=batch, partition=partition, attempt=0)


def _open(bootstrap: str) -> list[str]:
    async def run() -> list[str]:
        async with SinkProducer(bootstrap, "probe") as p:
            return await p.list_open(P)
    return asyncio.run(run())


def _committed(bootstrap: str) -> list[bytes]:
    return sorted(values(read_all(bootstrap, "out")))


@WRITERS
def test_driver_commits_prepared_tasks_and_recovers_after_crashes(broker_factory: Any, tmp_path: Path, raw: bool,
                                                                  raw_prepares: list[str]) -> None:
    broker = broker_factory(TWO_PC)
    create_topic(broker.bootstrap, "out", partitions=2)
    ck = _checkpoint(tmp_path)
    w = _writer(broker.bootstrap, ck, raw)
    assert w.twopc is not None and w.twopc.prefix == P

    # Batch 0: both tasks prepare; nothing is visible until the driver's commit.
    r = [_task(w, 0, 0, ["a", "b"]), _task(w, 0, 1, ["c"])]
    assert all(x.prepared for x in r) and _committed(broker.bootstrap) == []
    assert _open(broker.bootstrap) == [P + "0.0", P + "0.1", P + "gate"]
    assert raw_prepares == ([P + "0.0", P + "0.1"] if raw else [])
    w.commit(r, 0)
    (ck / "commits" / "0").write_text("v1\n{}\n")  # what Spark does after commit() returns
    assert _committed(broker.bootstrap) == [b"a", b"b", b"c"]
    assert all(h == [("batch", b"0")] for *_, h in _headers(broker.bootstrap))

    # Batch 1: the driver dies in the middle of its commit: decision recorded, one of two
    # transactions committed. The gate keeps the committed half invisible.
    r = [_task(w, 1, 0, ["d"]), _task(w, 1, 1, ["e", "f"])]
    txns = sink_2pc.record_decision(ck, 1, {x.transactional_id: x.prepared for x in r})
    asyncio.run(sink_2pc._complete_all(w.twopc, {P + "1.0": txns[P + "1.0"]}, gate=False))
    assert _committed(broker.bootstrap) == [b"a", b"b", b"c"]

    # Restart: recovery rolls batch 1 forward (decided, though Spark's log lacks it) and Spark's
    # replay of batch 1 writes nothing.
    w2 = _writer(broker.bootstrap, ck, raw)
    assert w2.twopc is not None and w2.twopc.skip == {1}
    assert _committed(broker.bootstrap) == [b"a", b"b", b"c", b"d", b"e", b"f"]
    replay = [_task(w2, 1, 0, ["d"]), _task(w2, 1, 1, ["e", "f"])]
    assert all(x.skipped for x in replay)
    w2.commit(replay, 1)
    (ck / "commits" / "1").write_text("v1\n{}\n")
    assert _committed(broker.bootstrap) == [b"a", b"b", b"c", b"d", b"e", b"f"]

    # Batch 2: the driver dies after the tasks prepared, before deciding: recovery aborts them.
    _task(w2, 2, 0, ["g"])
    _task(w2, 2, 1, ["h"])
    w3 = _writer(broker.bootstrap, ck, raw)
    assert w3.twopc is not None and not w3.twopc.skip
    assert _open(broker.bootstrap) == [P + "gate"]  # nothing stays prepared
    assert _committed(broker.bootstrap) == [b"a", b"b", b"c", b"d", b"e", b"f"]
    assert not (ck / sink_2pc.DECISIONS_DIR / "0.json").exists()  # Spark's log has batch 0


@WRITERS
def test_headers_column_comes_before_the_batch_header(broker_factory: Any, tmp_path: Path, raw: bool,
                                                      raw_prepares: list[str]) -> None:
    """A headers column in the 2pc sink: each row's own headers, then the batch-id header."""
    broker = broker_factory(TWO_PC)
    create_topic(broker.bootstrap, "out", partitions=2)
    schema = StructType([*SINK_SCHEMA.fields, StructField(
        "headers", ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])))])
    w = sink.KBrokerStreamWriter({"kafka.bootstrap.servers": broker.bootstrap, "topic": "out",
                                  "checkpointLocation": str(_checkpoint(tmp_path)), "exactlyOnce.mode": "2pc",
                                  "kbroker.sink.batchIdHeader": "batch", "rawWriter": str(raw).lower()}, schema)
    own = [[{"key": "trace", "value": b"t%d" % i}] if i % 2 else None for i in range(6)]
    batch = pa.RecordBatch.from_pydict(
        {"key": [b"k%d" % i for i in range(6)], "value": [f"v{i}" for i in range(6)], "headers": own},
        schema=pa.schema([("key", pa.binary()), ("value", pa.string()),
                          ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))]))
    report = sink_2pc.write_task(w, iter([batch]), batch_id=0, partition=0, attempt=0)
    assert raw_prepares == ([P + "0.0"] if raw else [])
    w.commit([report], 0)
    got = dict(_headers(broker.bootstrap))
    assert got == {f"v{i}".encode(): [("trace", b"t%d" % i)] * (i % 2) + [("batch", b"0")] for i in range(6)}


@WRITERS
def test_abort_rolls_back_undecided_batch(broker_factory: Any, tmp_path: Path, raw: bool) -> None:
    broker = broker_factory(TWO_PC)
    create_topic(broker.bootstrap, "out", partitions=2)
    w = _writer(broker.bootstrap, _checkpoint(tmp_path), raw)
    r = [_task(w, 0, 0, ["a"]), None]  # task 1 failed (no message) with its transaction open
    _task(w, 0, 1, ["b"])
    w.abort(r, 0)
    assert _open(broker.bootstrap) == [P + "gate"]
    assert _committed(broker.bootstrap) == []


@WRITERS
def test_2pc_without_the_broker_config_says_so(broker: Any, tmp_path: Path, raw: bool) -> None:
    create_topic(broker.bootstrap, "out", partitions=1)
    w = _writer(broker.bootstrap, _checkpoint(tmp_path), raw)
    with pytest.raises(RuntimeError, match="transaction.two.phase.commit.enable"):
        _task(w, 0, 0, ["a"])


def _headers(bootstrap: str) -> list[tuple[bytes, list[tuple[str, bytes]]]]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "h", "isolation.level": "read_committed",
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition("out", 0, 0), TopicPartition("out", 1, 0)])
        out, eof = [], 0
        while eof < 2:
            for m in c.consume(100, 5.0):
                if m.error() is not None:
                    eof += 1
                    continue
                out.append((m.value(), m.headers()))
        return out
    finally:
        c.close()


@WRITERS
def test_stream_2pc_task_failure_exactly_once(spark: Any, broker_factory: Any, tmp_path: Path, raw: bool) -> None:
    """A streaming query in 2pc mode whose sink task of batch 1 fails after 300 rows: Spark retries
    the task, the retry fences the failed attempt (its open transaction is aborted), no duplicates."""
    from spark_jobs.uppercase import transform

    broker = broker_factory(TWO_PC)
    create_topic(broker.bootstrap, "in", partitions=2)
    create_topic(broker.bootstrap, "out", partitions=2)
    n = 6000
    produce(broker.bootstrap, "in", [(i % 2, f"k{i}".encode(), f"msg-{i}".encode()) for i in range(n)])
    df = (spark.readStream.format("kbroker").option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribe", "in").option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "2000")
          .load())
    q = (transform(df).writeStream.format("kbroker").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("topic", "out").option("checkpointLocation", str(tmp_path / "ck"))
         .option("exactlyOnce.mode", "2pc").option("kbroker.sink.batchIdHeader", "batch")
         .option("rawWriter", str(raw).lower())
         .option("kbroker.fault.failTask", "1:0:300").trigger(availableNow=True).start())
    q.awaitTermination()
    assert q.exception() is None
    got = values(read_all(broker.bootstrap, "out"))
    assert sorted(got) == sorted(f"MSG-{i}".encode() for i in range(n))
    assert len(read_all(broker.bootstrap, "out", "read_uncommitted")) >= n + 300  # the aborted attempt
    assert not [t for t in _open_any(broker.bootstrap) if not t.endswith(".gate")]


def _open_any(bootstrap: str) -> list[str]:
    async def run() -> list[str]:
        async with SinkProducer(bootstrap, "probe") as p:
            return await p.list_open("kbroker-spark.")
    return asyncio.run(run())


def test_commit_fails_when_a_prepared_transaction_was_lost(broker_factory: Any, tmp_path: Path) -> None:
    """A task's prepared transaction aborted behind the driver's back (force-terminate, a stray
    recovery): the commit must fail the batch, not report it committed without those rows."""
    from spark_jobs.twopc_producer import TwoPhaseError

    broker = broker_factory(TWO_PC)
    create_topic(broker.bootstrap, "out", partitions=2)
    w = _writer(broker.bootstrap, _checkpoint(tmp_path))
    assert w.twopc is not None
    r = [_task(w, 0, 0, ["a"]), _task(w, 0, 1, ["b"])]
    asyncio.run(sink_2pc._abort(w.twopc, P + "0.1"))
    with pytest.raises(TwoPhaseError, match="no longer open"):
        w.commit(r, 0)
