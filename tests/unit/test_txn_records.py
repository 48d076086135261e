"""coordinator/txn_records.py: ``__transaction_state`` key/value codecs against Kafka's layouts.

The expected bytes are written out field by field from Kafka's TransactionLogKey.json (v0) and
TransactionLogValue.json (v0 fixed-width, v1 flexible with tagged fields PreviousProducerId (0),
NextProducerId (1), ClientTransactionVersion (2)), not produced by the code under test.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.txn_records import TxnLogValue, decode_key, decode_value, encode_key, encode_value


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack(">h", len(b)) + b


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _cs(text: str) -> bytes:  # compact string
    b = text.encode()
    return _uvarint(len(b) + 1) + b


# --- key ----------------------------------------------------------------------------------------------


def test_key_bytes_are_kafkas_v0_layout():
    assert encode_key("my-txn") == b"\x00\x00" + b"\x00\x06my-txn"
    assert decode_key(b"\x00\x00\x00\x06my-txn") == "my-txn"


def test_key_unicode_and_round_trip():
    for tid in ("", "a", "tx-é-€-𝄞", "x" * 300):
        assert decode_key(encode_key(tid)) == tid
    assert encode_key("é") == b"\x00\x00\x00\x02\xc3\xa9"  # length in bytes, UTF-8


def test_key_unknown_version_rejected():
    with pytest.raises(ValueError):
        decode_key(b"\x00\x01\x00\x01a")


# --- value v0 -------------------------------------------------------------------------------------------


def _v0(pid: int, epoch: int, timeout: int, status: int, partitions: list[tuple[str, list[int]]] | None,
        last_update: int, start: int) -> bytes:
    out = struct.pack(">hqhib", 0, pid, epoch, timeout, status)
    if partitions is None:
        out += struct.pack(">i", -1)
    else:
        out += struct.pack(">i", len(partitions))
        for topic, ps in partitions:
            out += _s(topic) + struct.pack(">i", len(ps)) + b"".join(struct.pack(">i", p) for p in ps)
    return out + struct.pack(">qq", last_update, start)


def test_value_v0_bytes_for_an_ongoing_transaction():
    v = TxnLogValue(producer_id=4000, producer_epoch=3, timeout_ms=60000, status=1,
                    partitions={"b": [2, 0], "a": [1]}, last_update_ms=1_700_000_000_123, start_ms=1_700_000_000_000)
    # Topics and partition ids in sorted order (Kafka's order is a hash map's; any order decodes the same).
    assert encode_value(v) == _v0(4000, 3, 60000, 1, [("a", [1]), ("b", [0, 2])], 1_700_000_000_123,
                                  1_700_000_000_000)


def test_value_v0_bytes_for_a_completed_transaction_have_an_empty_partition_array():
    v = TxnLogValue(producer_id=7, producer_epoch=0, timeout_ms=1000, status=4, partitions={},
                    last_update_ms=5, start_ms=2)
    assert encode_value(v) == _v0(7, 0, 1000, 4, [], 5, 2)


def test_value_v0_bytes_for_empty_state_have_null_partitions():
    v = TxnLogValue(producer_id=7, producer_epoch=0, timeout_ms=1000, status=0, partitions={},
                    last_update_ms=5, start_ms=-1)
    assert encode_value(v) == _v0(7, 0, 1000, 0, None, 5, -1)


def test_value_v0_decode_null_partitions():
    v = decode_value(_v0(9, 1, 2000, 0, None, 11, -1))
    assert (v.producer_id, v.producer_epoch, v.timeout_ms, v.status, v.partitions, v.last_update_ms, v.start_ms) == (
        9, 1, 2000, 0, {}, 11, -1)


@given(
    pid=st.integers(0, (1 << 63) - 1),
    epoch=st.integers(0, 32767),
    timeout=st.integers(1, (1 << 31) - 1),
    status=st.integers(0, 7),
    partitions=st.dictionaries(st.text(min_size=1, max_size=20), st.lists(st.integers(0, 10_000), min_size=1,
                                                                           max_size=5, unique=True), max_size=4),
    last_update=st.integers(-1, 1 << 50),
    start=st.integers(-1, 1 << 50),
)
def test_value_round_trip(pid, epoch, timeout, status, partitions, last_update, start):
    v = TxnLogValue(pid, epoch, timeout, status, partitions, last_update, start)
    d = decode_value(encode_value(v))
    assert (d.producer_id, d.producer_epoch, d.timeout_ms, d.status, d.last_update_ms, d.start_ms) == (
        pid, epoch, timeout, status, last_update, start)
    assert {t: sorted(ps) for t, ps in d.partitions.items()} == {t: sorted(ps) for t, ps in partitions.items()}


# --- value v1 (flexible) ----------------------------------------------------------------------------------


def _v1(pid: int, epoch: int, timeout: int, status: int, partitions: list[tuple[str, list[int]]] | None,
        last_update: int, start: int, *, partition_tags: bytes = b"\x00", tags: bytes = b"\x00") -> bytes:
    out = struct.pack(">hqhib", 1, pid, epoch, timeout, status)
    if partitions is None:
        out += _uvarint(0)
    else:
        out += _uvarint(len(partitions) + 1)
        for topic, ps in partitions:
            out += _cs(topic) + _uvarint(len(ps) + 1) + b"".join(struct.pack(">i", p) for p in ps) + partition_tags
    return out + struct.pack(">qq", last_update, start) + tags


def test_value_v1_flexible_decode():
    data = _v1(123, 4, 30000, 2, [("orders", [0, 5]), ("__consumer_offsets", [17])], 99, 98)
    v = decode_value(data)
    assert (v.producer_id, v.producer_epoch, v.timeout_ms, v.status, v.last_update_ms, v.start_ms) == (
        123, 4, 30000, 2, 99, 98)
    assert v.partitions == {"orders": [0, 5], "__consumer_offsets": [17]}


def test_value_v1_with_tagged_fields_and_null_partitions():
    # Top-level tags: PreviousProducerId (0) = 122, NextProducerId (1) = 124, ClientTransactionVersion (2) = 2.
    tags = (_uvarint(3) + _uvarint(0) + _uvarint(8) + struct.pack(">q", 122) + _uvarint(1) + _uvarint(8)
            + struct.pack(">q", 124) + _uvarint(2) + _uvarint(2) + struct.pack(">h", 2))
    v = decode_value(_v1(123, 0, 1000, 0, None, 7, -1, tags=tags))
    assert (v.producer_id, v.status, v.partitions, v.last_update_ms, v.start_ms) == (123, 0, {}, 7, -1)
    # An unknown tagged field inside a partition entry is skipped.
    ptags = _uvarint(1) + _uvarint(9) + _uvarint(3) + b"abc"
    v = decode_value(_v1(1, 1, 1000, 1, [("t", [3]), ("u", [])], 7, 6, partition_tags=ptags, tags=tags))
    assert v.partitions == {"t": [3], "u": []}
    assert (v.last_update_ms, v.start_ms) == (7, 6)


def test_value_v1_long_topic_name_uses_multi_byte_varints():
    topic = "t" * 200  # compact length 201 needs two varint bytes
    v = decode_value(_v1(1, 1, 1000, 1, [(topic, list(range(130)))], 1, 1))
    assert v.partitions == {topic: list(range(130))}


def test_value_unknown_version_rejected():
    with pytest.raises(ValueError):
        decode_value(struct.pack(">hqhib", 2, 1, 1, 1, 1) + struct.pack(">i", 0) + struct.pack(">qq", 1, 1))
