"""The Spark source's raw range reader against a real broker: for every range it must give exactly
what the librdkafka path gives (rawReader=false), for plain, compressed and transactional data with
aborted transactions, and hand over to librdkafka where the broker answers anything else."""

from __future__ import annotations

import logging
import time
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka_util import create_topic, delete_records, produce, transactional_producer

from spark_jobs import kafka_io, raw_reader

pytestmark = pytest.mark.skipif(raw_reader.Columns is None, reason="spark_jobs._record_columns is not built")


def _read(bootstrap: str, topic: str, start: int, end: int, raw: bool, **kw: Any) -> pa.Table:
    conf = {"bootstrap.servers": bootstrap}
    batches = list(kafka_io.read_range(conf, topic, 0, start, end, raw=raw, timeout_s=20, **kw))
    return pa.Table.from_batches(batches, schema=kafka_io.ARROW_SCHEMA)


def _fill(bootstrap: str, topic: str) -> int:
    """Plain, keyless, tombstone and compressed records, committed and aborted transactions: returns the log end."""
    produce(bootstrap, topic, ((0, None if i % 9 == 0 else b"k%d" % i, b"v" * (i % 300)) for i in range(3000)))
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        produce(bootstrap, topic, ((0, b"c", b"%s-%d" % (codec.encode(), i)) for i in range(500)))
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20})
        for i in range(700):
            p.produce(topic, b"%s-value-%d" % (codec.encode(), i) * 5, None if i % 4 else b"k", partition=0)
        assert p.flush(30) == 0
    tp = transactional_producer(bootstrap, f"{topic}-txn")
    for n in range(12):
        tp.begin_transaction()
        for i in range(150):
            tp.produce(topic, b"txn%d-%d" % (n, i), partition=0)
        if n % 3 == 1:
            tp.abort_transaction(30)
        else:
            tp.commit_transaction(30)
        produce(bootstrap, topic, ((0, None, b"between-%d" % n) for _ in range(5)))
    tp.flush(10)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "raw-test"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30, cached=False)[1]
    finally:
        c.close()


def test_raw_reader_gives_what_librdkafka_gives(broker: Any, caplog: pytest.LogCaptureFixture) -> None:
    create_topic(broker.bootstrap, "raw-eq", partitions=1)
    end = _fill(broker.bootstrap, "raw-eq")
    assert end > 8_000
    caplog.set_level(logging.INFO, logger="spark_jobs.kafka_io")
    for start, stop in ((0, end), (1, 2), (2999, 3001), (5000, 9000), (end - 700, end), (end - 1, end)):
        raw = _read(broker.bootstrap, "raw-eq", start, stop, True)
        ref = _read(broker.bootstrap, "raw-eq", start, stop, False)
        assert raw.num_rows == ref.num_rows, (start, stop)
        assert raw.equals(ref), (start, stop)
    assert "raw read" not in caplog.text  # every range above was read by the raw reader alone
    values = _read(broker.bootstrap, "raw-eq", 0, end, True).column("value").to_pylist()
    assert not any(v.startswith(b"txn1-") or v.startswith(b"txn4-") for v in values if v)  # aborted
    assert sum(1 for v in values if v and v.startswith(b"txn0-")) == 150


def test_deleted_offsets_are_handed_to_librdkafka(broker: Any, caplog: pytest.LogCaptureFixture) -> None:
    create_topic(broker.bootstrap, "raw-gone", partitions=1)
    produce(broker.bootstrap, "raw-gone", ((0, None, b"v%d" % i) for i in range(1000)))
    assert delete_records(broker.bootstrap, "raw-gone", {0: 400}) == {0: 400}
    caplog.set_level(logging.INFO, logger="spark_jobs.kafka_io")
    # the raw fetch at 100 is out of range: librdkafka reads the range, with its data-loss rules
    got = _read(broker.bootstrap, "raw-gone", 100, 1000, True, fail_on_data_loss=False)
    assert got.column("offset").to_pylist() == list(range(400, 1000))
    assert "raw read of raw-gone-0 stopped at offset 100" in caplog.text
    with pytest.raises(kafka_io.DataLossError):
        _read(broker.bootstrap, "raw-gone", 100, 1000, True, fail_on_data_loss=True)


def test_read_uncommitted_sees_aborted_records(broker: Any) -> None:
    create_topic(broker.bootstrap, "raw-ru", partitions=1)
    tp = transactional_producer(broker.bootstrap, "raw-ru-txn")
    for n, commit in enumerate((True, False, True)):
        tp.begin_transaction()
        tp.produce("raw-ru", b"t%d" % n, partition=0)
        assert tp.flush(30) == 0  # on the broker before the end (an abort drops what is unsent)
        tp.commit_transaction(30) if commit else tp.abort_transaction(30)
    del tp
    conf = {"bootstrap.servers": broker.bootstrap, "isolation.level": "read_uncommitted"}
    c = Consumer({**conf, "group.id": "raw-ru"})
    try:  # t0, COMMIT, t1, ABORT, t2, COMMIT: the last marker is written after the commit's answer
        deadline = time.monotonic() + 30
        while c.get_watermark_offsets(TopicPartition("raw-ru", 0), timeout=10, cached=False)[1] < 6:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        c.close()
    for raw in (True, False):
        got = pa.Table.from_batches(list(kafka_io.read_range(conf, "raw-ru", 0, 0, 6, raw=raw, timeout_s=20)))
        assert got.column("value").to_pylist() == [b"t0", b"t1", b"t2"], raw
        assert got.column("offset").to_pylist() == [0, 2, 4], raw
