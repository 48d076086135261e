"""What the Spark path's performance work relies on: client settings, the marker lookup, the Arrow paths.

Speed itself is measured by benchmarks/spark_bench.py; these tests pin the behaviour each
optimisation depends on so that a later edit cannot silently undo it.
"""

from __future__ import annotations

import json
from typing import Any

from kafka_util import create_topic, transactional_producer
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from spark_jobs import kafka_io, sink, sink_parts

SINK_SCHEMA = StructType([StructField("key", BinaryType()), StructField("value", StringType())])


def _writer(bootstrap: str, topic: str = "out", **options: str) -> sink.KBrokerStreamWriter:
    return sink.KBrokerStreamWriter({"kafka.bootstrap.servers": bootstrap, "topic": topic, **options}, SINK_SCHEMA)


def test_task_clients_connect_eagerly() -> None:
    # Sparse connections cost ~50 ms per short-lived client (the reconnect timer before the first
    # connection to a broker learnt from metadata); every task creates such clients.
    w = _writer("127.0.0.1:1")
    for conf in (kafka_io.range_consumer_config({"bootstrap.servers": "127.0.0.1:1"}),
                 w.producer_config("t.0"), w.producer_config(None)):
        assert conf["enable.sparse.connections"] is False
    # The user's kafka.* options still win.
    w = _writer("127.0.0.1:1", **{"kafka.enable.sparse.connections": "true"})
    assert w.producer_config("t.0")["enable.sparse.connections"] == "true"
    conf = kafka_io.range_consumer_config({"bootstrap.servers": "x", "enable.sparse.connections": "true"})
    assert conf["enable.sparse.connections"] == "true"


def test_range_reader_prefetches_its_whole_range_and_not_much_more() -> None:
    # librdkafka pauses fetching for fetch.queue.backoff.ms (1 s default) once queued.min.messages
    # records wait locally: the threshold is the range's size, so a long range never pauses, and
    # a short one does not prefetch the rest of the partition.
    conf = kafka_io.range_consumer_config({"bootstrap.servers": "127.0.0.1:1"}, range_records=400_000)
    assert conf["queued.min.messages"] == 400_000
    assert conf["fetch.queue.backoff.ms"] <= 10
    assert conf["max.partition.fetch.bytes"] <= 4 * 1024 * 1024
    assert kafka_io.range_consumer_config({"bootstrap.servers": "x"}, range_records=5)["queued.min.messages"] == 1000


def test_marker_lookup_returns_when_the_tail_ends_in_control_records(broker: Any) -> None:
    # Every committed marker is followed by a commit control record that read_committed never
    # delivers: the lookup must finish on end-of-partition, for one or many markers, committed or not.
    create_topic(broker.bootstrap, "commits", partitions=1, config={"cleanup.policy": "compact"})
    p = transactional_producer(broker.bootstrap, "q.0")
    for batch_id in range(3):
        p.begin_transaction()
        p.produce("commits", json.dumps({"batchId": batch_id}).encode(), b"q.0", partition=0)
        p.commit_transaction(30)
    p.begin_transaction()
    p.produce("commits", json.dumps({"batchId": 9}).encode(), b"q.0", partition=0)
    p.flush()
    p.abort_transaction(30)
    conf = {"bootstrap.servers": broker.bootstrap}
    assert sink.last_committed_batch(conf, "commits", 0, "q.0") == 2
    assert sink.last_committed_batch(conf, "commits", 0, "q.1") is None


# -- Arrow conversions ----------------------------------------------------------------------------

def _reference_batch(msgs: list[Any], topic: str, partition: int) -> dict[str, list[Any]]:
    """The per-row conversion the column-wise kafka_io._to_batch replaced, as plain Python values."""
    ts_type = {0: -1, 1: 0, 2: 1}
    out: dict[str, list[Any]] = {k: [] for k in ("key", "value", "topic", "partition", "offset", "timestamp",
                                                 "timestampType", "headers")}
    for m in msgs:
        kind, ts = m.timestamp()
        out["key"].append(m.key())
        out["value"].append(m.value())
        out["topic"].append(topic)
        out["partition"].append(partition)
        out["offset"].append(m.offset())
        out["timestamp"].append(ts * 1000 if kind else None)
        out["timestampType"].append(ts_type.get(kind, -1))
        out["headers"].append([{"key": k, "value": v} for k, v in (m.headers() or ())])
    return out


def _consume(bootstrap: str, topic: str, n: int) -> list[Any]:
    from confluent_kafka import TopicPartition

    c = kafka_io.range_consumer({"bootstrap.servers": bootstrap})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[Any] = []
        for _ in range(600):
            got += [m for m in c.consume(n, 0.1) if m.error() is None]
            if len(got) >= n:
                return got
        raise AssertionError(f"read {len(got)} of {n} records of {topic}")
    finally:
        c.close()


def test_arrow_source_batches_match_the_per_row_conversion(broker: Any) -> None:
    create_topic(broker.bootstrap, "conv-create", partitions=1)
    create_topic(broker.bootstrap, "conv-append", partitions=1,
                 config={"message.timestamp.type": "LogAppendTime"})
    rows = [(None, b"v0", None), (b"", b"", [("h", b"1")]), (b"k2", None, [("a", b""), ("b", None)]),
            (b"k3", b"x" * 300, None)]
    for topic in ("conv-create", "conv-append"):
        p = transactional_producer(broker.bootstrap, f"conv-{topic}")
        p.begin_transaction()
        for i, (key, value, headers) in enumerate(rows):
            p.produce(topic, value, key, partition=0, timestamp=1_700_000_000_000 + i, headers=headers)
        p.commit_transaction(30)
    create = _consume(broker.bootstrap, "conv-create", len(rows))
    append = _consume(broker.bootstrap, "conv-append", len(rows))
    assert {m.timestamp()[0] for m in create} != {m.timestamp()[0] for m in append}
    # One timestamp type per batch (the column-wise path), and a mixed batch (the per-row path).
    for msgs in (create, append, create + append):
        for headers in (False, True):
            schema = kafka_io.ARROW_SCHEMA_WITH_HEADERS if headers else kafka_io.ARROW_SCHEMA
            batch = kafka_io._to_batch(msgs, schema, "conv", 3, headers)
            assert batch.schema == schema
            want = _reference_batch(msgs, "conv", 3)
            got = batch.to_pydict()
            got["timestamp"] = [None if t is None else int(t.timestamp() * 1_000_000) for t in got["timestamp"]]
            for name in schema.names:
                assert got[name] == want[name], name


def test_sink_value_and_key_columns_convert_like_str_encode() -> None:
    import pyarrow as pa

    text = ["a", None, "", "ünï", "x" * 100]
    for typ in (pa.string(), pa.large_string()):
        assert sink_parts._bytes_column(pa.array(text, typ)) == [t.encode() if t is not None else None for t in text]
    raw = [b"a", None, b"", b"\xff\x00"]
    for typ in (pa.binary(), pa.large_binary()):
        assert sink_parts._bytes_column(pa.array(raw, typ)) == raw


def test_sink_fast_path_writes_what_the_per_row_path_writes(broker: Any) -> None:
    import pyarrow as pa
    from kafka_util import read_all

    create_topic(broker.bootstrap, "fast", partitions=3)
    create_topic(broker.bootstrap, "slow", partitions=3)
    n = 300
    keys = [None if i % 7 == 0 else b"key-%d" % (i % 11) for i in range(n)]
    vals = [None if i % 13 == 0 else f"välue-{i}" for i in range(n)]

    def batches(with_partition_column: bool) -> Any:
        cols = {"key": pa.array(keys, pa.binary()), "value": pa.array(vals, pa.string())}
        if with_partition_column:  # all null: partitioned by key as well, but through the per-row loop
            cols["partition"] = pa.array([None] * n, pa.int32())
        batch = pa.RecordBatch.from_pydict(cols)
        yield batch.slice(0, 100)
        yield batch.slice(100)

    # A tiny local queue makes the fast path hit BufferError and resume at the row that did not fit.
    for topic, per_row in (("fast", False), ("slow", True)):
        w = _writer(broker.bootstrap, topic=topic, **{"kafka.queue.buffering.max.messages": "7"})
        report = w.write_transaction(batches(per_row), transactional_id=f"t-{topic}", batch_id=0, partition=0,
                                     attempt=0, commit_log=None)
        assert report.records == n
    fast, slow = read_all(broker.bootstrap, "fast"), read_all(broker.bootstrap, "slow")
    assert len(fast) == len(slow) == n

    def keyed(records: list[Any]) -> dict[int, list[Any]]:  # in order, per partition (keyless ones go anywhere)
        out: dict[int, list[Any]] = {}
        for part, _offset, key, value in records:
            if key is not None:
                out.setdefault(part, []).append((key, value))
        return out

    assert keyed(fast) == keyed(slow)
    assert sorted(r[3] or b"" for r in fast if r[2] is None) == sorted(r[3] or b"" for r in slow if r[2] is None)
    assert sorted(r[3] or b"" for r in fast) == sorted(v.encode() if v else b"" for v in vals)


def test_range_reader_builds_batches_without_garbage_collections(broker: Any) -> None:
    # Each consume() makes thousands of GC-tracked Message objects; collections triggered while
    # they lived traversed them (and the worker's heap) again and again, half of the source's CPU.
    # The reader pauses the collector while it builds a batch, and only then.
    import gc

    from kafka_util import produce

    create_topic(broker.bootstrap, "gc-range", partitions=1)
    n = 20_000
    produce(broker.bootstrap, "gc-range", ((0, b"k%d" % i, b"v" * 100) for i in range(n)))
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    conf = {"bootstrap.servers": broker.bootstrap}
    gc.callbacks.append(count)
    try:
        rows = 0
        enabled_in_loop = []
        for batch in kafka_io.read_range(conf, "gc-range", 0, 0, n, batch_rows=4096, raw=False):
            rows += batch.num_rows
            enabled_in_loop.append(gc.isenabled())
    finally:
        gc.callbacks.remove(count)
    assert rows == n
    assert len(collections) <= 2, collections  # without the pause: one per ~700 messages
    assert all(enabled_in_loop) and gc.isenabled()  # the caller's code runs with the collector on
    gc.disable()  # and a caller that turned it off keeps it off
    try:
        assert sum(b.num_rows for b in kafka_io.read_range(conf, "gc-range", 0, 0, 100, raw=False)) == 100
        assert not gc.isenabled()
    finally:
        gc.enable()

