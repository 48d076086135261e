"""The exactly-once kbroker sink: transactions per task, replay skipping, fencing, task retries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaException
from kafka_util import create_topic, produce, read_all, transactional_producer, values
from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType

from spark_jobs import raw_writer as raw_writer_module
from spark_jobs import sink
from spark_jobs.twopc_producer import TwoPhaseError

SINK_SCHEMA = StructType([StructField("key", BinaryType()), StructField("value", StringType())])


def _writer(bootstrap: str, topic: str, **options: str) -> sink.KBrokerStreamWriter:
    return sink.KBrokerStreamWriter({"kafka.bootstrap.servers": bootstrap, "topic": topic, **options}, SINK_SCHEMA)


def _batches(vals: list[str]) -> Any:
    yield pa.RecordBatch.from_pydict({"key": [None] * len(vals), "value": vals},
                                     schema=pa.schema([("key", pa.binary()), ("value", pa.string())]))


def test_task_transaction_records_marker_and_skips_replays(broker: Any) -> None:
    create_topic(broker.bootstrap, "out", partitions=1)
    create_topic(broker.bootstrap, "commits", partitions=1, config={"cleanup.policy": "compact"})
    w = _writer(broker.bootstrap, "out")
    log = ("commits", 0)

    def write(batch_id: int, vals: list[str]) -> sink.TaskReport:
        return w.write_transaction(_batches(vals), transactional_id="q.0", batch_id=batch_id, partition=0,
                                   attempt=0, commit_log=log)

    assert write(0, ["a", "b"]).records == 2
    assert write(0, ["a", "b"]).skipped  # replay of batch 0
    assert write(1, ["c"]).records == 1
    assert write(0, ["a", "b"]).skipped and write(1, ["c"]).skipped
    assert values(read_all(broker.bootstrap, "out")) == [b"a", b"b", b"c"]
    assert sink.last_committed_batch(w.conf, "commits", 0, "q.0") == 1
    assert sink.last_committed_batch(w.conf, "commits", 0, "other") is None


def test_marker_lookup_widens_past_many_aborted_attempts(broker: Any) -> None:
    create_topic(broker.bootstrap, "commits", partitions=1, config={"cleanup.policy": "compact"})
    w = _writer(broker.bootstrap, "out")
    w.write_transaction(_batches(["x"]), transactional_id="q.0", batch_id=7, partition=0, attempt=0,
                        commit_log=("commits", 0))
    # 30 aborted attempts after the committed marker: the committed one is 60+ offsets from the end.
    p = transactional_producer(broker.bootstrap, "q.0")
    for i in range(30):
        p.begin_transaction()
        p.produce("commits", json.dumps({"batchId": 100 + i}).encode(), b"q.0", partition=0)
        p.flush()
        p.abort_transaction()
    assert sink.last_committed_batch(w.conf, "commits", 0, "q.0") == 7


@pytest.mark.parametrize("raw_writer", ["true", "false"])
def test_retry_fences_the_failed_attempt(broker: Any, raw_writer: str) -> None:
    """An attempt that failed mid-batch keeps its transaction open; the retry fences and aborts it
    (the raw writer's and librdkafka's attempts alike)."""
    create_topic(broker.bootstrap, "out", partitions=1)
    create_topic(broker.bootstrap, "commits", partitions=1, config={"cleanup.policy": "compact"})
    w = _writer(broker.bootstrap, "out", **{"kbroker.fault.failTask": "3:0:2", "rawWriter": raw_writer})
    with pytest.raises(RuntimeError, match="injected"):
        w.write_transaction(_batches(["a", "b", "c"]), transactional_id="q.0", batch_id=3, partition=0,
                            attempt=0, commit_log=("commits", 0))
    zombie = sink._ZOMBIES[-1][1]
    assert isinstance(zombie, raw_writer_module.RawTransaction) == (raw_writer == "true")
    retry = w.write_transaction(_batches(["a", "b", "c"]), transactional_id="q.0", batch_id=3, partition=0,
                                attempt=1, commit_log=("commits", 0))
    assert retry.records == 3 and not retry.skipped
    if isinstance(zombie, raw_writer_module.RawTransaction):
        with pytest.raises(TwoPhaseError):
            zombie.commit()
        zombie.close()
    else:
        with pytest.raises(KafkaException):
            zombie.commit_transaction(30)
    del zombie
    assert values(read_all(broker.bootstrap, "out")) == [b"a", b"b", b"c"]
    assert len(read_all(broker.bootstrap, "out", "read_uncommitted")) == 5  # the zombie's 2 are aborted


_HEADER = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
_ARROW_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@pytest.mark.parametrize("raw", [True, False], ids=["raw-writer", "librdkafka"])
def test_headers_column_reaches_every_record(broker: Any, raw: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A headers column (Spark's array<struct<key, value>>) is written with each row, through the raw
    writer as through librdkafka: several, none, a null list, null values, unicode keys."""
    create_topic(broker.bootstrap, "hdr", partitions=2)
    create_topic(broker.bootstrap, "commits", partitions=1, config={"cleanup.policy": "compact"})
    schema = StructType([*SINK_SCHEMA.fields, StructField("headers", ArrayType(_HEADER))])
    w = sink.KBrokerStreamWriter({"kafka.bootstrap.servers": broker.bootstrap, "topic": "hdr",
                                  "rawWriter": str(raw).lower()}, schema)
    raw_rows = []
    real_write = raw_writer_module.RawTransaction.write

    def counted(self: Any, batch: pa.RecordBatch, topic: str) -> int:
        raw_rows.append(batch.num_rows)
        return real_write(self, batch, topic)

    monkeypatch.setattr(raw_writer_module.RawTransaction, "write", counted)
    n = 300
    headers = [None if i % 7 == 0 else [{"key": f"h{j}-é", "value": None if (i + j) % 4 == 0 else b"%d.%d" % (i, j)}
                                        for j in range(i % 3)] for i in range(n)]
    batch = pa.RecordBatch.from_pydict(
        {"key": [b"k%d" % (i % 10) if i % 2 else None for i in range(n)], "value": [f"v{i}" for i in range(n)],
         "headers": headers},
        schema=pa.schema([("key", pa.binary()), ("value", pa.string()), ("headers", _ARROW_HEADERS)]))
    report = w.write_transaction(iter([batch]), transactional_id="h.0", batch_id=0, partition=0, attempt=0,
                                 commit_log=("commits", 0))
    assert report.records == n
    assert sum(raw_rows) == (n if raw else 0)
    got = {value: hdrs for _p, _o, _k, value, hdrs in read_all(broker.bootstrap, "hdr", headers=True)}
    assert got == {f"v{i}".encode(): [(h["key"], h["value"]) for h in (headers[i] or [])] for i in range(n)}


def test_batch_write_exactly_once(spark: Any, broker: Any) -> None:
    create_topic(broker.bootstrap, "bw", partitions=2)
    df = spark.createDataFrame([(f"k{i}", f"v{i}", i % 2) for i in range(1000)], "key string, value string, partition int")
    (df.repartition(3).write.format("kbroker").option("kafka.bootstrap.servers", broker.bootstrap)
     .option("topic", "bw").mode("append").save())
    recs = read_all(broker.bootstrap, "bw")
    assert sorted(values(recs)) == sorted(f"v{i}".encode() for i in range(1000))
    assert all(int(v[1:]) % 2 == p for p, _, _, v in recs)
    assert all(k == b"k" + v[1:] for _, _, k, v in recs)


def test_sink_rejects_bad_schema(spark: Any, broker: Any) -> None:
    df = spark.createDataFrame([(1, "x")], "n int, value string")
    with pytest.raises(Exception, match="accepts key, value"):
        df.write.format("kbroker").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", "t").mode("append").save()


def _uppercase_stream(spark: Any, bootstrap: str, checkpoint: Path, src: str, dst: str, **sink_opts: str) -> Any:
    from spark_jobs.uppercase import transform

    df = (spark.readStream.format("kbroker").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", src).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "2000").load())
    w = (transform(df).writeStream.format("kbroker").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", dst).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True))
    for k, v in sink_opts.items():
        w = w.option(k, v)
    q = w.start()
    q.awaitTermination()
    return q


def _expect_uppercased_once(bootstrap: str, n: int, dst: str) -> None:
    got = values(read_all(bootstrap, dst))
    assert len(got) == n
    assert sorted(got) == sorted(f"MSG-{i}".encode() for i in range(n))


def test_stream_task_failure_is_retried_exactly_once(spark: Any, broker: Any, tmp_path: Path) -> None:
    """Acceptance 3: a sink task of batch 1 fails after 300 rows; Spark retries it; no duplicates."""
    create_topic(broker.bootstrap, "in", partitions=2)
    n = 6000
    produce(broker.bootstrap, "in", [(i % 2, None, f"msg-{i}".encode()) for i in range(n)])
    q = _uppercase_stream(spark, broker.bootstrap, tmp_path / "ck", "in", "out",
                          **{"kbroker.fault.failTask": "1:0:300"})
    assert q.exception() is None
    _expect_uppercased_once(broker.bootstrap, n, "out")
    # The failed attempt's rows did reach the broker (and were aborted when the retry fenced it).
    assert len(read_all(broker.bootstrap, "out", "read_uncommitted")) >= n + 300


def test_replayed_batch_after_driver_loss_is_not_written_twice(spark: Any, broker: Any, tmp_path: Path) -> None:
    """The driver-crash window in-process: sink committed, Spark's commit log did not record the batch."""
    create_topic(broker.bootstrap, "in", partitions=2)
    n = 5000
    produce(broker.bootstrap, "in", [(i % 2, None, f"msg-{i}".encode()) for i in range(n)])
    ck = tmp_path / "ck"
    _uppercase_stream(spark, broker.bootstrap, ck, "in", "out")
    _expect_uppercased_once(broker.bootstrap, n, "out")
    # Forget that the last batch finished, as if the driver died between the sink's commit and
    # Spark writing commits/<id>: the restarted query replays that batch with the same offsets.
    commits = sorted((ck / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    last = commits[-1]
    last.unlink()
    (ck / "commits" / f".{last.name}.crc").unlink(missing_ok=True)
    more = 1000
    produce(broker.bootstrap, "in", [(i % 2, None, f"msg-{i}".encode()) for i in range(n, n + more)])
    _uppercase_stream(spark, broker.bootstrap, ck, "in", "out")
    _expect_uppercased_once(broker.bootstrap, n + more, "out")


def test_raw_writer_skips_the_marker_lookup_only_while_no_one_else_used_the_id(
        broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The raw writer remembers the batch it committed last per transactional id and trusts it when
    its next InitProducerId returns exactly the next epoch; any other producer of the id in between
    (another executor's attempt) moves the epoch further, and the commit log is read again."""
    create_topic(broker.bootstrap, "out", partitions=1)
    create_topic(broker.bootstrap, "commits", partitions=1, config={"cleanup.policy": "compact"})
    w = _writer(broker.bootstrap, "out", rawWriter="true")
    sink._COMMITTED.pop("q.0", None)
    lookups = []
    real_lookup = sink.last_committed_batch

    def counted(*args: Any) -> int | None:
        lookups.append(args)
        return real_lookup(*args)

    monkeypatch.setattr(sink, "last_committed_batch", counted)

    def write(batch_id: int, vals: list[str]) -> sink.TaskReport:
        return w.write_transaction(_batches(vals), transactional_id="q.0", batch_id=batch_id, partition=0,
                                   attempt=0, commit_log=("commits", 0))

    assert write(0, ["a"]).records == 1 and len(lookups) == 1
    assert write(1, ["b"]).records == 1 and len(lookups) == 1  # remembered: no read of the commit log
    assert write(1, ["b"]).skipped and len(lookups) == 1  # a replay, skipped on what was remembered
    # Batch 2 written by another process's producer of the same id (a task attempt elsewhere).
    other = transactional_producer(broker.bootstrap, "q.0")
    other.begin_transaction()
    other.produce("out", b"c", partition=0)
    other.produce("commits", json.dumps({"batchId": 2}).encode(), b"q.0", partition=0)
    other.commit_transaction(30)
    del other
    assert write(2, ["c"]).skipped and len(lookups) == 2  # the epoch moved by two: read, found, skipped
    assert write(3, ["d"]).records == 1
    assert values(read_all(broker.bootstrap, "out")) == [b"a", b"b", b"c", b"d"]
