"""v2 record-batch header codec: layout, validation, offset patching, sequence wrap."""

from __future__ import annotations

import struct

import crc32c
import pytest

from storage import batch as B


def test_header_layout_matches_kafka():
    data = B.build_batch([(b"k", b"v"), (None, b"w")], base_offset=7, timestamp_ms=1000, producer_id=42,
                         producer_epoch=3, base_sequence=9, partition_leader_epoch=5)
    (base, length, ple, magic, crc, attrs, lod, base_ts, max_ts, pid, epoch, seq, count) = struct.unpack_from(
        ">qiibIhiqqqhii", data)
    assert (base, ple, magic, lod, base_ts, max_ts, pid, epoch, seq, count) == (7, 5, 2, 1, 1000, 1000, 42, 3, 9, 2)
    assert length == len(data) - 12
    assert crc == crc32c.crc32c(data[21:])
    h = B.parse_header(data)
    assert h.size == len(data) and h.last_offset == 8 and h.next_offset == 9 and h.last_sequence == 10


def test_patching_offsets_keeps_crc_valid():
    data = bytearray(B.build_batch([(b"k", b"v")] * 3))
    h = B.parse_header(data)
    B.set_base_offset(data, h, 1000)
    B.set_partition_leader_epoch(data, h, 9)
    (h2,) = list(B.iter_headers(data))
    assert h2.base_offset == 1000 and h2.partition_leader_epoch == 9


def test_log_append_time_rewrites_crc():
    data = bytearray(B.build_batch([(b"k", b"v")], timestamp_ms=5))
    h = B.parse_header(data)
    B.set_max_timestamp_log_append_time(data, h, 12345)
    (h2,) = list(B.iter_headers(data))
    assert h2.timestamp_type == 1 and h2.max_timestamp == 12345


def test_crc_mismatch_detected():
    data = bytearray(B.build_batch([(b"k", b"value")]))
    data[-2] ^= 1
    with pytest.raises(B.CorruptBatchError):
        list(B.iter_headers(data))


def test_truncated_batch_detected_or_skipped():
    data = B.build_batch([(b"k", b"value")]) * 2
    torn = data[: len(data) - 5]
    with pytest.raises(B.InvalidBatchError):
        list(B.iter_headers(torn))
    assert len(list(B.iter_headers(torn, check=False))) == 1


def test_old_magic_rejected():
    data = bytearray(B.build_batch([(b"k", b"v")]))
    data[B.MAGIC_OFFSET] = 1
    with pytest.raises(B.UnsupportedMagicError):
        list(B.iter_headers(data))


def test_control_batch_round_trip():
    data = B.build_control_batch(B.CONTROL_TYPE_ABORT, producer_id=5, producer_epoch=2, coordinator_epoch=7)
    (h,) = list(B.iter_headers(data))
    assert h.is_control and h.is_transactional and h.producer_id == 5
    (rec,) = B.decode_records(data)
    assert B.parse_control_key(rec.key) == (0, B.CONTROL_TYPE_ABORT)
    assert struct.unpack(">hi", rec.value) == (0, 7)


@pytest.mark.parametrize(("seq", "inc", "expected"), [(0, 4, 4), (2**31 - 1, 1, 0), (2**31 - 3, 5, 2)])
def test_sequence_wraps_at_int32_max(seq, inc, expected):
    assert B.increment_sequence(seq, inc) == expected
