"""The Spark sink's raw writer (spark_jobs/raw_writer.py) against a real broker: what it writes must
be what librdkafka's murmur2 partitioner and a plain produce() would give (keys, nulls, empty and
large values, sliced Arrow arrays, string and binary columns), only when committed; a second
producer of the same transactional id fences it; and a broker restart in the middle of a
transaction loses nothing and duplicates nothing."""

from __future__ import annotations

import struct
import threading
import zlib
from typing import Any

import pyarrow as pa
import pytest
from kafka.partitioner.default import murmur2
from kafka_util import create_topic, read_all

from spark_jobs import raw_writer
from spark_jobs.twopc_producer import TwoPhaseError
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.skipif(raw_writer.encode_records is None, reason="spark_jobs._record_columns is not built")

PARTITIONS = 5


def _batches() -> list[pa.RecordBatch]:
    """Keyed and keyless rows, null and empty keys and values, values large enough to split chunks,
    a string-typed column and arrays sliced from larger ones."""
    out = []
    for b in range(6):
        n = 700 + 113 * b
        keys = [None if i % 6 == 0 else b"" if i % 17 == 0 else b"key-%d-%d" % (b, i % 50) for i in range(n)]
        vals = [None if i % 23 == 0 else b"" if i % 29 == 0 else b"v%d-%d-" % (b, i) * (i % 40) for i in range(n)]
        if b == 2:
            vals = [b"x" * 300_000 if i % 100 == 0 else v for i, v in enumerate(vals)]  # > 1 MiB per partition
        key_col = pa.array(keys, pa.binary())
        val_col = pa.array(vals, pa.binary())
        if b == 3:  # Spark hands strings as Arrow strings
            val_col = pa.array([None if v is None else v.decode() for v in vals], pa.string())
        if b == 4:  # a slice: non-zero Arrow array offsets
            key_col = pa.array([b"pad"] * 7 + keys, pa.binary()).slice(7, n)
            val_col = pa.array([b"pad"] * 7 + vals, pa.binary()).slice(7, n)
        out.append(pa.record_batch([key_col, val_col], names=["key", "value"]))
    keyless = pa.array([b"keyless-%d" % i for i in range(300)], pa.binary())
    out += [pa.record_batch([keyless], names=["value"]), pa.record_batch([keyless.slice(10, 50)], names=["value"])]
    return out


def _rows(batch: pa.RecordBatch) -> list[tuple[bytes | None, bytes | None]]:
    keys = batch.column(batch.schema.names.index("key")).to_pylist() if "key" in batch.schema.names else None
    vals = [v.encode() if isinstance(v, str) else v for v in batch.column(batch.schema.names.index("value")).to_pylist()]
    return [(None if keys is None else keys[i], vals[i]) for i in range(batch.num_rows)]


def _write_and_check(broker: Any, topic: str, **conf: str) -> None:
    """All of _batches() in one committed transaction of the raw writer; read back as librdkafka's
    partitioner would have placed them."""
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    batches = _batches()
    txn = raw_writer.RawTransaction({"bootstrap.servers": broker.bootstrap, **conf}, f"{topic}-task")
    try:
        txn.init()
        txn.begin()
        assert sum(txn.write(b, topic) for b in batches) == sum(b.num_rows for b in batches)
        txn.commit()
    finally:
        txn.close()
    got: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
    for part, _offset, key, value in sorted(read_all(broker.bootstrap, topic)):
        got.setdefault(part, []).append((key, value))
    # Keyed rows where Java's (and librdkafka's murmur2) partitioner puts them, in row order; the
    # keyless rows of one Arrow batch together in one partition, the next batch's in the next one.
    first_keyless = zlib.crc32(f"{topic}-task".encode()) % PARTITIONS
    expected: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
    for n, batch in enumerate(batches):
        for key, value in _rows(batch):
            part = (first_keyless + n) % PARTITIONS if key is None else (murmur2(key) & 0x7FFFFFFF) % PARTITIONS
            expected.setdefault(part, []).append((key, value))
    assert got == expected


def test_raw_writer_partitions_and_encodes_like_librdkafka(broker: Any) -> None:
    _write_and_check(broker, "raw-w")


def _stored_codecs(broker: Any, topic: str) -> set[int]:
    """The compression bits of every data batch (not markers) in the topic's segment files."""
    codecs = set()
    for part in range(PARTITIONS):
        for seg in sorted((broker.data_dir / f"{topic}-{part}").glob("*.log")):
            data, pos = seg.read_bytes(), 0
            while pos + 61 <= len(data):
                (length,) = struct.unpack_from(">i", data, pos + 8)
                (attributes,) = struct.unpack_from(">h", data, pos + 21)
                if not attributes & 0x20:  # a control batch (marker) is never compressed
                    codecs.add(attributes & 0x07)
                pos += 12 + length
    return codecs


@pytest.mark.parametrize("codec,bits,level", [("gzip", 1, None), ("snappy", 2, None), ("lz4", 3, None),
                                              ("zstd", 4, None), ("zstd", 4, "7")])
def test_compressed_batches_read_back_as_written(broker: Any, codec: str, bits: int, level: str | None) -> None:
    """compression.type (and compression.level): every data batch is stored with the codec, and a
    consumer reads back exactly what the uncompressed writer gives."""
    topic = f"raw-{codec}-{level or 'default'}"
    _write_and_check(broker, topic, **{"compression.type": codec, **({"compression.level": level} if level else {})})
    assert _stored_codecs(broker, topic) == {bits}


def test_aborted_and_fenced_transactions_stay_invisible(broker: Any) -> None:
    create_topic(broker.bootstrap, "raw-f", partitions=2)
    conf = {"bootstrap.servers": broker.bootstrap}
    batch = pa.record_batch([pa.array([b"a%d" % i for i in range(100)], pa.binary())], names=["value"])
    first = raw_writer.RawTransaction(conf, "raw-f-task")
    second = raw_writer.RawTransaction(conf, "raw-f-task")
    try:
        first.init()
        first.begin()
        first.write(batch, "raw-f")
        first.abort()
        first.begin()
        first.write(batch, "raw-f")
        first.flush()  # these rows reach the broker before the fencing
        first.begin()
        second.init()  # fences the first and aborts its open transaction
        with pytest.raises(TwoPhaseError):
            first.write(batch, "raw-f")  # answered with a fencing error: the flush raises it
            first.flush()
        with pytest.raises(TwoPhaseError):
            first.commit()
        second.begin()
        second.write(batch, "raw-f")
        second.marker("raw-f", 1, b"raw-f-task", b"marker")
        second.commit()
        # The fenced writer initialised again writes a clean transaction (its old error is gone).
        first.init()
        first.begin()
        first.write(pa.record_batch([pa.array([b"again"], pa.binary())], names=["value"]), "raw-f")
        first.commit()
    finally:
        first.close()
        second.close()
    committed = read_all(broker.bootstrap, "raw-f")
    assert sorted(r[3] for r in committed) == sorted([b"a%d" % i for i in range(100)] + [b"marker", b"again"])
    assert [(r[0], r[2]) for r in committed if r[3] == b"marker"] == [(1, b"raw-f-task")]
    # The aborted and fenced rows are in the log, only never shown to read_committed.
    assert len(read_all(broker.bootstrap, "raw-f", "read_uncommitted")) == 302  # the fenced write refused


def test_broker_restart_inside_a_transaction_loses_and_duplicates_nothing(broker: Any) -> None:
    create_topic(broker.bootstrap, "raw-r", partitions=3)
    conf = {"bootstrap.servers": broker.bootstrap}
    keys = pa.array([b"k%d" % (i % 40) for i in range(2000)], pa.binary())

    def batch(n: int) -> pa.RecordBatch:
        return pa.record_batch([keys, pa.array([b"b%d-%d" % (n, i) for i in range(2000)], pa.binary())],
                               names=["key", "value"])

    txn = raw_writer.RawTransaction(conf, "raw-r-task")
    try:
        txn.init()
        txn.begin()
        txn.write(batch(0), "raw-r")
        txn.write(batch(1), "raw-r")
        broker.restart(kill=False)
        txn.write(batch(2), "raw-r")  # sent over lost connections: sent again after reconnecting
        txn.write(batch(3), "raw-r")
        txn.commit()
    finally:
        txn.close()
    values = sorted(r[3] for r in read_all(broker.bootstrap, "raw-r"))
    assert values == sorted(b"b%d-%d" % (n, i) for n in range(4) for i in range(2000))


def test_usable() -> None:
    plain = {"bootstrap.servers": "127.0.0.1:1"}
    assert raw_writer.usable(plain, ["key", "value"])
    assert raw_writer.usable(plain, ["value"])
    assert not raw_writer.usable(plain, ["value"], wanted=False)
    assert raw_writer.usable(plain, ["key", "value", "headers"])
    assert not raw_writer.usable(plain, ["value", "topic"])
    assert not raw_writer.usable(plain, ["value", "partition"])
    assert raw_writer.usable({**plain, "compression.type": "none"}, ["value"])
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        assert raw_writer.usable({**plain, "compression.type": codec}, ["value"])
    assert raw_writer.usable({**plain, "compression.codec": "lz4"}, ["value"])
    assert not raw_writer.usable({**plain, "compression.type": "brotli"}, ["value"])  # no such codec in Kafka
    assert not raw_writer.usable({**plain, "security.protocol": "SASL_SSL"}, ["value"])


def test_writing_outside_a_transaction_is_refused(broker: Any) -> None:
    """Rows written after a flush without a new begin() would never be sent: refused instead; and
    prepare() is for 2pc transactions only."""
    create_topic(broker.bootstrap, "raw-o", partitions=1)
    txn = raw_writer.RawTransaction({"bootstrap.servers": broker.bootstrap}, "raw-o-task")
    batch = pa.record_batch([pa.array([b"o"], pa.binary())], names=["value"])
    try:
        txn.init()
        with pytest.raises(RuntimeError, match="begin"):
            txn.write(batch, "raw-o")
        txn.begin()
        txn.write(batch, "raw-o")
        txn.flush()
        with pytest.raises(RuntimeError, match="begin"):
            txn.write(batch, "raw-o")
        txn.begin()
        with pytest.raises(RuntimeError, match="two_phase"):
            txn.prepare()  # a task transaction commits; only a 2pc one (InitProducerId with enable2Pc) prepares
        txn.commit()
    finally:
        txn.close()
    assert [r[3] for r in read_all(broker.bootstrap, "raw-o")] == [b"o"]


def test_an_empty_task_closes_its_raw_writer(broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task with no rows still fences its id (the set-up starts before the input); it must close
    the raw writer it started, or every empty task would leave a loop thread in the Python worker."""
    import pyspark
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    from spark_jobs import sink

    props = {sink.BATCH_ID_PROPERTY: "0", sink.QUERY_ID_PROPERTY: "q-empty"}

    class Context:  # the three things the sink asks of Spark's TaskContext
        def partitionId(self) -> int:  # noqa: N802 - Spark's names
            return 0

        def attemptNumber(self) -> int:  # noqa: N802
            return 0

        def getLocalProperty(self, key: str) -> str:  # noqa: N802
            return props[key]

    monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda: Context()))
    schema = StructType([StructField("key", BinaryType()), StructField("value", StringType())])
    w = sink.KBrokerStreamWriter({"kafka.bootstrap.servers": broker.bootstrap, "topic": "raw-e"}, schema)

    def loops() -> int:
        return sum(t.name == "kbroker-raw-writer" and t.is_alive() for t in threading.enumerate())

    before = loops()
    for _ in range(3):
        report = w.write(iter([]))
        assert report.records == 0
    assert loops() == before


def test_writes_wait_while_too_much_is_unanswered(broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task faster than the broker must not buffer its whole input: write() waits while more than
    MAX_BUFFERED bytes are encoded but not yet answered."""
    create_topic(broker.bootstrap, "raw-b", partitions=1)
    limit = 100_000
    monkeypatch.setattr(raw_writer, "MAX_BUFFERED", limit)
    batch = pa.record_batch([pa.array([b"%0999d" % i for i in range(1000)], pa.binary())], names=["value"])
    txn = raw_writer.RawTransaction({"bootstrap.servers": broker.bootstrap}, "raw-b-task")
    most = 0
    try:
        txn.init()
        txn.begin()
        for _ in range(60):
            txn.write(batch, "raw-b")
            most = max(most, txn._buffered)
        txn.commit()
    finally:
        txn.close()
    assert 1_000_000 < most < limit + 1_200_000  # at most one batch past the limit
    assert len(read_all(broker.bootstrap, "raw-b")) == 60_000


def test_chunks_of_one_partition_go_in_separate_requests(broker: Any) -> None:
    """An Arrow batch over MAX_CHUNK_BYTES for one partition becomes several batches of it, each
    under the broker's default message.max.bytes; a Produce request may carry only one batch per
    partition (Kafka keeps the last of duplicates), so they go in consecutive requests, in order."""
    create_topic(broker.bootstrap, "raw-c", partitions=2)
    rows = 10_000
    txn = raw_writer.RawTransaction({"bootstrap.servers": broker.bootstrap}, "raw-c-task")
    try:
        txn.init()
        txn.begin()
        # 100 B values: the size whose full chunks, with their batch header, went over the broker's
        # default message.max.bytes when a chunk held 1 MiB of records.
        for n in range(10):  # ~1.1 MB of keyless rows per Arrow batch, all to one partition
            values = pa.array([b"%d-%098d" % (n, i) for i in range(rows)], pa.binary())
            txn.write(pa.record_batch([values], names=["value"]), "raw-c")
        txn.commit()
    finally:
        txn.close()
    got = read_all(broker.bootstrap, "raw-c")
    assert len(got) == 10 * rows
    for part in (0, 1):
        vals = [r[3] for r in sorted(got) if r[0] == part]
        assert vals == sorted(vals, key=lambda v: (int(v.split(b"-")[0]), v))  # in write order


def test_a_commit_waits_for_a_broker_that_is_down_when_it_resends(broker: Any) -> None:
    """Chunks lost while the broker is down are sent again at the commit; a broker still down then
    (connection refused on the metadata request) is retried until it is back, not a failed task."""
    create_topic(broker.bootstrap, "raw-d", partitions=1)
    txn = raw_writer.RawTransaction({"bootstrap.servers": broker.bootstrap}, "raw-d-task")

    def batch(n: int) -> pa.RecordBatch:
        return pa.record_batch([pa.array([b"d%d-%d" % (n, i) for i in range(500)], pa.binary())], names=["value"])

    outcome: list[BaseException | None] = []
    try:
        txn.init()
        txn.begin()
        txn.write(batch(0), "raw-d")
        txn.flush()
        txn.begin()
        broker.stop()
        txn.write(batch(1), "raw-d")  # its connection is refused: lost, for the commit to resend

        def commit() -> None:
            try:
                txn.commit()
            except BaseException as e:  # checked below
                outcome.append(e)
            else:
                outcome.append(None)

        committer = threading.Thread(target=commit)
        committer.start()
        # The commit's resend has taken the lost chunks (the broker still down) before it comes back.
        wait_for(lambda: not txn._failed or outcome, "the commit resending", 60)
        assert not outcome, f"the commit ended while the broker was down: {outcome}"
        broker.start()
        committer.join(90)
        assert outcome == [None]
    finally:
        txn.close()
    assert sorted(r[3] for r in read_all(broker.bootstrap, "raw-d")) == \
        sorted(b"d%d-%d" % (n, i) for n in range(2) for i in range(500))
