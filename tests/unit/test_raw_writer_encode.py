"""The Spark raw writer's compiled encoder (spark_jobs/_record_columns.c, encode_records) and batch
header: records and partitions checked against kafka-python's decoder and murmur2, chunk sizes,
Arrow slices and nulls, the same headers on every row, and bad input refused."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from kafka.partitioner.default import murmur2
from kafka.record.default_records import DefaultRecordBatch

from spark_jobs import raw_writer

pytestmark = pytest.mark.skipif(raw_writer.encode_records is None, reason="spark_jobs._record_columns is not built")


class _Producer:
    producer_id, epoch = 4242, 7
    _sequences: dict[tuple[str, int], int] = {}


def _header(partition: int, count: int, records: bytes) -> bytes:
    """The batch RawTransaction sends for this chunk (its _chunk, with a stand-in producer)."""
    txn = raw_writer.RawTransaction.__new__(raw_writer.RawTransaction)
    txn._producer = _Producer()  # type: ignore[assignment]
    txn._codec, txn._compress = 0, None
    return txn._chunk("t", partition, count, records).batch


def _encode(values: pa.Array, keys: pa.Array | None, partitions: int, null_partition: int,
            max_bytes: int = 1 << 20, *headers: bytes) -> list[tuple[int, int, bytes]]:
    key_bufs = raw_writer._binary_buffers(keys) if keys is not None else (None, None, None, 0)
    return raw_writer.encode_records(*raw_writer._binary_buffers(values), *key_bufs, len(values), partitions,
                                     null_partition, max_bytes, *headers)


def test_records_and_partitions_match_kafka_python() -> None:
    rng = random.Random(7)
    n = 3000
    keys = [None if i % 5 == 0 else bytes(rng.randrange(256) for _ in range(i % 13)) for i in range(n + 20)]
    vals = [None if i % 7 == 0 else b"v%d" % i * (i % 9) for i in range(n + 20)]
    key_col, val_col = pa.array(keys, pa.binary()).slice(20), pa.array(vals, pa.binary()).slice(20)
    got: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
    _Producer._sequences = {}
    for partition, count, records in _encode(val_col, key_col, 7, 3, max_bytes=2000):
        batch = DefaultRecordBatch(_header(partition, count, records))
        assert batch.validate_crc()
        assert (batch.producer_id, batch.producer_epoch, batch.is_transactional) == (4242, 7, True)
        rows = list(batch)
        assert [r.offset for r in rows] == list(range(count))
        got.setdefault(partition, []).extend((r.key, r.value) for r in rows)
    expected: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
    for k, v in zip(keys[20:], vals[20:], strict=True):
        part = 3 if k is None else (murmur2(k) & 0x7FFFFFFF) % 7
        expected.setdefault(part, []).append((k, v))
    assert got == expected
    # Each partition's sequence numbers run on across its chunks.
    assert sum(_Producer._sequences.values()) == n


def test_chunks_stay_under_max_bytes_except_single_large_records() -> None:
    vals = pa.array([b"x" * 50] * 100 + [b"y" * 5000] + [b"z" * 50] * 100, pa.binary())
    chunks = _encode(vals, None, 1, 0, max_bytes=1000)
    assert sum(c for _, c, _ in chunks) == 201
    for _, count, records in chunks:
        assert len(records) <= 1000 or count == 1
    assert any(count == 1 and len(records) > 5000 for _, count, records in chunks)


def test_string_columns_and_keyless_rows() -> None:
    vals = pa.array(["é", None, "", "abc"], pa.string())
    [(partition, count, records)] = _encode(vals, None, 4, 2)
    assert (partition, count) == (2, 4)
    rows = list(DefaultRecordBatch(_header(partition, count, records)))
    assert [(r.key, r.value) for r in rows] == [(None, "é".encode()), (None, None), (None, b""), (None, b"abc")]


def test_every_row_carries_the_given_headers() -> None:
    """The 2pc sink's batch-id header (and a null-valued one) on every record, chunks still bounded."""
    headers = [("batch", b"17"), ("kbroker.none", None), ("é", b"")]
    vals = pa.array([None if i % 9 == 0 else b"v%d" % i * (i % 5) for i in range(500)], pa.binary())
    keys = pa.array([None if i % 4 == 0 else b"k%d" % i for i in range(500)], pa.binary())
    chunks = _encode(vals, keys, 3, 1, 600, raw_writer.headers_section(headers))
    seen = 0
    for partition, count, records in chunks:
        assert len(records) <= 600 or count == 1
        rows = list(DefaultRecordBatch(_header(partition, count, records)))
        assert [r.offset for r in rows] == list(range(count))
        assert all(r.headers == [("batch", b"17"), ("kbroker.none", None), ("é", b"")] for r in rows)
        seen += count
    assert seen == 500
    # Without the argument, or with the empty section, no headers.
    for extra in ((), (raw_writer.headers_section([]),)):
        [(partition, count, records)] = _encode(pa.array([b"a"], pa.binary()), None, 1, 0, 1000, *extra)
        assert [r.headers for r in DefaultRecordBatch(_header(partition, count, records))] == [[]]


def test_bad_arguments_are_refused() -> None:
    vals = pa.array([b"a", b"b"], pa.binary())
    with pytest.raises(ValueError):
        _encode(vals, None, 2, 2)  # null partition outside the topic
    with pytest.raises(ValueError):
        _encode(vals, None, 0, 0)
    validity, offsets, data, first = raw_writer._binary_buffers(vals)
    with pytest.raises(ValueError):  # more rows than the buffers hold
        raw_writer.encode_records(validity, offsets, data, first, None, None, None, 0, 5, 1, 0, 1000)
    with pytest.raises(ValueError):  # no value column
        raw_writer.encode_records(None, None, None, 0, None, None, None, 0, 2, 1, 0, 1000)
    with pytest.raises(ValueError):  # a headers section needs at least its count
        raw_writer.encode_records(validity, offsets, data, first, None, None, None, 0, 2, 1, 0, 1000, b"")


_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _encode_with_rows(values: pa.Array, headers_col: pa.Array, fixed: bytes = b"\0",
                      max_bytes: int = 1 << 20) -> list[list[tuple[str, bytes | None]]]:
    """Each record's headers, in row order (one partition, no keys)."""
    chunks = raw_writer.encode_records(*raw_writer._binary_buffers(values), None, None, None, 0, len(values), 1, 0,
                                       max_bytes, fixed, raw_writer._row_headers(headers_col))
    out = []
    for partition, count, records in chunks:
        assert len(records) <= max_bytes or count == 1
        out.extend(r.headers for r in DefaultRecordBatch(_header(partition, count, records)))
    return out


def test_each_row_carries_its_own_headers_then_the_fixed_ones() -> None:
    """A headers column (Spark's array<struct<key, value>>): null lists, empty lists, null values,
    unicode keys, slices of both the column and its entries, and the 2pc sink's fixed header after."""
    rng = random.Random(3)
    rows: list[list[dict[str, object]] | None] = []
    for i in range(400):
        if i % 11 == 0:
            rows.append(None)
        else:
            rows.append([{"key": f"h{j}-é" if j % 2 else f"k{i}", "value": None if (i + j) % 5 == 0 else
                          bytes(rng.randrange(256) for _ in range(j * 3))} for j in range(i % 4)])
    column = pa.array([[{"key": "lead", "value": b"x"}]] + rows, _HEADERS).slice(1)  # a sliced list
    values = pa.array([b"v%d" % i for i in range(401)], pa.binary()).slice(1)
    expected = [[(h["key"], h["value"]) for h in (r or [])] for r in rows]
    assert _encode_with_rows(values, column, max_bytes=700) == expected
    fixed = [("batch", b"9"), ("none", None)]
    assert _encode_with_rows(values, column, raw_writer.headers_section(fixed), 700) == [e + fixed for e in expected]
    # Binary keys, and every row without headers: the fixed ones alone (None: nothing to walk).
    binary = pa.array([[{"key": b"bk", "value": b"1"}], []], pa.list_(pa.struct([("key", pa.binary()),
                                                                                  ("value", pa.binary())])))
    assert _encode_with_rows(pa.array([b"a", b"b"], pa.binary()), binary) == [[("bk", b"1")], []]
    assert raw_writer._row_headers(pa.array([None, None], _HEADERS)) is None


def test_null_header_keys_and_entries_are_refused() -> None:
    values = pa.array([b"a", b"b"], pa.binary())
    with pytest.raises(ValueError, match="null key"):
        _encode_with_rows(values, pa.array([[{"key": "ok", "value": b"1"}], [{"key": None, "value": b"2"}]],
                                           _HEADERS))
    with pytest.raises(ValueError, match="null entry"):
        _encode_with_rows(values, pa.array([[None], []], _HEADERS))
    # A null entry that no row refers to (outside the column's slice) is not looked at.
    column = pa.array([[None], [{"key": "k", "value": b"v"}], []], _HEADERS).slice(1)
    assert _encode_with_rows(values, column) == [[("k", b"v")], []]
    with pytest.raises(TypeError):  # row_headers must be the buffers tuple
        raw_writer.encode_records(*raw_writer._binary_buffers(values), None, None, None, 0, 2, 1, 0, 1000, b"\0",
                                  (1, 2))
