"""The Spark raw reader's decoding (spark_jobs.raw_reader, spark_jobs._record_columns) on batches
built here: every record field against kafka-python's decoder, every codec, offset bounds, the
read_committed rules (aborted transactions, markers, control batches), and where a read resumes
after it stops part way."""

from __future__ import annotations

import random

import pytest

pa = pytest.importorskip("pyarrow")
raw_reader = pytest.importorskip("spark_jobs.raw_reader")
if raw_reader.Columns is None:
    pytest.skip("spark_jobs._record_columns is not built", allow_module_level=True)

from spark_jobs.kafka_io import ARROW_SCHEMA  # noqa: E402
from storage import batch as B  # noqa: E402

CODECS = [0, 1, 2, 3, 4]  # none, gzip, snappy, lz4, zstd


def _records(rng: random.Random, n: int) -> list[tuple[bytes | None, bytes | None, list]]:
    out = []
    for i in range(n):
        key = None if i % 7 == 0 else b"" if i % 11 == 0 else b"k%d" % i
        value = None if i % 13 == 0 else rng.randbytes(rng.choice((0, 1, 100, 3000)))
        headers = [("h", b"x" * (i % 3))] if i % 5 == 0 else []
        out.append((key, value, headers))
    return out


def _reader(start: int = 0, end: int = 1 << 40, batch_rows: int = 8192):
    return raw_reader.RawRangeReader({}, "t", 0, start, end, ARROW_SCHEMA, batch_rows)


def _read(records: bytes, reader, aborted=()) -> pa.Table:
    batches = list(reader._decode(memoryview(records), list(aborted), set(), raw_reader.Columns()))
    return pa.Table.from_batches(batches, schema=ARROW_SCHEMA)


def _expected(log: bytes, lo: int, hi: int, skip_offsets: set[int] = frozenset()) -> list[tuple]:
    out = []
    for h in B.iter_headers(log):
        if h.is_control:
            continue
        for r in B.decode_records(log[h.position:h.position + h.size]):
            if lo <= r.offset < hi and r.offset not in skip_offsets:
                ts_type = h.timestamp_type
                ts = h.max_timestamp if ts_type == 1 else r.timestamp
                out.append((r.key, r.value, r.offset, ts * 1000, ts_type))
    return out


def _rows(table: pa.Table) -> list[tuple]:
    d = table.to_pydict()
    stamps = table.column("timestamp").cast(pa.int64()).to_pylist()
    assert set(d["topic"]) <= {"t"} and set(d["partition"]) <= {0}
    return list(zip(d["key"], d["value"], d["offset"], stamps, d["timestampType"], strict=True))


@pytest.mark.parametrize("codec", CODECS)
def test_every_field_matches_the_reference_decoder(codec):
    rng = random.Random(codec)
    log = b""
    offset = 0
    for size in (1, 17, 250):
        log += B.build_batch(_records(rng, size), base_offset=offset, compression=codec,
                             timestamp_ms=1_700_000_000_000 + offset)
        offset += size
    table = _read(log, _reader())
    assert _rows(table) == _expected(log, 0, offset)
    assert table.column("key").null_count > 0 and table.column("value").null_count > 0


def test_log_append_time_batches_take_the_batch_timestamp():
    data = bytearray(B.build_batch([(b"a", b"1"), (b"b", b"2")], timestamp_ms=1_000))
    h = B.parse_header(data)
    B.set_max_timestamp_log_append_time(data, h, 5_000)
    table = _read(bytes(data), _reader())
    assert table.column("timestamp").cast(pa.int64()).to_pylist() == [5_000_000, 5_000_000]
    assert table.column("timestampType").to_pylist() == [1, 1]


def test_only_offsets_of_the_range_and_batches_of_batch_rows():
    log = B.build_batch([(None, b"v%d" % i) for i in range(100)], base_offset=0)
    log += B.build_batch([(None, b"w%d" % i) for i in range(100)], base_offset=100)
    reader = _reader(start=30, end=150, batch_rows=50)
    batches = list(reader._decode(memoryview(log), [], set(), raw_reader.Columns()))
    # a batch is handed out once batch_rows are held, at a fetched batch's end
    assert [b.num_rows for b in batches] == [70, 50]
    assert pa.Table.from_batches(batches).column("offset").to_pylist() == list(range(30, 150))
    assert reader.next_offset == 200  # read past the end: the range is done


def test_read_committed_rules():
    pid_a, pid_b, pid_c = 5000, 2000, 3000  # producer ids not in first-offset order
    parts = [
        B.build_batch([(None, b"plain0")], base_offset=0),
        B.build_batch([(None, b"a-aborted")], base_offset=1, producer_id=pid_a, producer_epoch=0, transactional=True),
        B.build_batch([(None, b"b-committed")], base_offset=2, producer_id=pid_b, producer_epoch=0, transactional=True),
        B.build_control_batch(B.CONTROL_TYPE_ABORT, producer_id=pid_a, producer_epoch=0, coordinator_epoch=0,
                              base_offset=3),
        B.build_control_batch(1, producer_id=pid_b, producer_epoch=0, coordinator_epoch=0, base_offset=4),
        # after its ABORT marker the producer's next transaction is read again
        B.build_batch([(None, b"a-committed")], base_offset=5, producer_id=pid_a, producer_epoch=0, transactional=True),
        B.build_batch([(None, b"c-aborted-1"), (None, b"c-aborted-2")], base_offset=6, producer_id=pid_c,
                      producer_epoch=0, transactional=True, compression=3),
        B.build_batch([(None, b"idempotent")], base_offset=8, producer_id=pid_c, producer_epoch=0),
        B.build_control_batch(B.CONTROL_TYPE_ABORT, producer_id=pid_c, producer_epoch=0, coordinator_epoch=0,
                              base_offset=9),
        B.build_batch([(None, b"plain10")], base_offset=10),
    ]
    log = b"".join(parts)
    aborted = [(pid_c, 6), (pid_a, 1)]  # the answer's order is not the first offsets'
    reader = _reader()
    table = _read(log, reader, aborted)
    assert table.column("value").to_pylist() == [b"plain0", b"b-committed", b"a-committed", b"idempotent", b"plain10"]
    assert table.column("offset").to_pylist() == [0, 2, 5, 8, 10]
    assert reader.next_offset == 11
    # a read starting inside the aborted transaction skips it too
    reader = _reader(start=6)
    assert _read(log, reader, aborted).column("offset").to_pylist() == [8, 10]


def test_a_stop_part_way_resumes_after_the_rows_handed_out():
    log = B.build_batch([(None, b"v%d" % i) for i in range(10)], base_offset=0)
    log += B.build_batch([(None, b"w%d" % i) for i in range(10)], base_offset=10)
    bad = bytearray(B.build_batch([(None, b"x%d" % i) for i in range(10)], base_offset=20))
    bad[B.HEADER_SIZE] = 0x7F  # first record's length: past the batch's end
    reader = _reader(batch_rows=5)
    got = []
    with pytest.raises(raw_reader.Fallback):
        for b in reader._decode(memoryview(log + bytes(bad)), [], set(), raw_reader.Columns()):
            got.extend(b.column("offset").to_pylist())
    assert got == list(range(20))
    assert reader.next_offset == 20  # librdkafka goes on from the undecodable batch

    # rows held back (fewer than batch_rows) when the stop comes are not counted as read
    reader = _reader(batch_rows=1000)
    got = []
    with pytest.raises(raw_reader.Fallback):
        for b in reader._decode(memoryview(log + bytes(bad)), [], set(), raw_reader.Columns()):
            got.extend(b.column("offset").to_pylist())
    assert got == [] and reader.next_offset == 0


def test_usable():
    assert raw_reader.usable({"bootstrap.servers": "h:1"}, False)
    assert not raw_reader.usable({"bootstrap.servers": "h:1"}, True)  # headers: librdkafka
    assert not raw_reader.usable({"security.protocol": "SSL"}, False)
    assert not raw_reader.usable({"security.protocol": "SASL_PLAINTEXT"}, False)
    assert raw_reader.usable({"security.protocol": "PLAINTEXT"}, False, True)
    assert not raw_reader.usable({}, False, False)


def test_decompress_every_framing():
    import gzip

    import cramjam
    import lz4.frame
    import zstandard

    a, b = b"first frame " * 50, b"second frame " * 70
    z = zstandard.ZstdCompressor()
    cases = {
        1: gzip.compress(a + b),
        2: bytes(cramjam.snappy.compress_raw(a + b)),  # raw snappy (librdkafka)
        3: lz4.frame.compress(a + b),
        4: z.compress(a) + z.compress(b),  # two zstd frames
    }
    for codec, payload in cases.items():
        assert raw_reader._decompress(codec, memoryview(payload)) == a + b, codec
    with pytest.raises(raw_reader.Fallback):
        raw_reader._decompress(3, memoryview(b"not lz4"))
    with pytest.raises(raw_reader.Fallback):
        raw_reader._decompress(5, memoryview(b""))


def test_an_older_message_format_hands_over():
    data = bytearray(B.build_batch([(None, b"v")]))
    data[16] = 1  # magic
    with pytest.raises(raw_reader.Fallback, match="message format 1"):
        list(_reader()._decode(memoryview(bytes(data)), [], set(), raw_reader.Columns()))
