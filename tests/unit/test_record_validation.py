"""storage.record_validation: record-level checks of v2 batches (Kafka's LogValidator)."""

from __future__ import annotations

import gzip
import struct

import crc32c
import pytest
import zstandard

from storage import batch as B
from storage import record_validation as RV

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _zz(n: int) -> bytes:
    """Zigzag varint, as Kafka's ByteUtils.writeVarint/writeVarlong."""
    u = (n << 1) ^ (n >> 63)
    out = bytearray()
    while u & ~0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def record(offset_delta: int, key: bytes | None, value: bytes | None,
           headers: list[tuple[bytes, bytes | None]] = (), ts_delta: int = 0) -> bytes:
    body = bytearray(b"\x00") + _zz(ts_delta) + _zz(offset_delta)
    for field in (key, value):
        body += _zz(-1) if field is None else _zz(len(field)) + field
    body += _zz(len(headers))
    for hk, hv in headers:
        body += _zz(len(hk)) + hk
        body += _zz(-1) if hv is None else _zz(len(hv)) + hv
    return _zz(len(body)) + bytes(body)


def wrap(records: bytes, count: int, *, last_offset_delta: int | None = None, attributes: int = 0) -> bytes:
    """A v2 batch around an already encoded (maybe compressed) records section, with a valid CRC."""
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    after_crc = struct.pack(">hiqqqhii", attributes, lod, 1000, 1000, -1, -1, -1, count) + records
    length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiib", 0, length, -1, 2) + struct.pack(">I", crc32c.crc32c(after_crc)) + after_crc


def check(batch: bytes, **kw) -> None:
    RV.validate_records(batch, B.parse_header(batch), **kw)


@pytest.mark.parametrize("codec", list(CODECS))
def test_good_batches_of_every_codec_pass(codec):
    recs = [(b"k%d" % i, b"v" * (i * 37 % 300), [("h", b"x"), ("n", None)]) for i in range(150)]
    recs += [(None, None, [])]
    data = B.build_batch(recs, compression=CODECS[codec])
    check(data)
    # the same records as seen by a consumer's decoder
    assert len(B.decode_records(data)) == len(recs)


def test_other_framings_of_codecs_pass():
    """Raw snappy (no xerial framing), several zstd frames and several gzip members in one payload:
    consumers decode all of them (Java's streams read across frames and members)."""
    import snappy

    recs = b"".join(record(i, b"k", b"v%d" % i) for i in range(40))
    half = len(record(0, b"k", b"v0")) * 10
    check(wrap(snappy.compress(recs), 40, attributes=2))
    z = zstandard.ZstdCompressor()
    check(wrap(z.compress(recs[:half]) + z.compress(recs[half:]), 40, attributes=4))
    check(wrap(gzip.compress(recs[:half]) + gzip.compress(recs[half:]), 40, attributes=1))


def test_hand_encoded_records_with_large_varints_pass():
    recs = b"".join(record(i, b"k" * 200, b"v" * 20000, [(b"hk", b"hv" * 100)], ts_delta=-(1 << 40))
                    for i in range(130))
    check(wrap(recs, 130))


@pytest.mark.parametrize("ts_delta", [0, 63, 64, 8191, 8192, 1 << 20, 1 << 21, -(1 << 40)])
def test_timestamp_deltas_of_every_varint_width_pass_and_a_cut_one_fails(ts_delta):
    """1-, 2-, 3-byte timestamp deltas take an inline path, longer ones the general varint reader."""
    recs = b"".join(record(i, None, b"v" * 100, ts_delta=ts_delta) for i in range(3))
    check(wrap(recs, 3))
    cut = record(0, None, b"v", ts_delta=ts_delta)
    body = cut[1:2 + len(_zz(ts_delta)) - 1]  # attributes and a timestamp cut short, declared as the record
    with pytest.raises(RV.InvalidRecordError):
        check(wrap(_zz(len(body)) + body, 1))


def test_corrupt_gzip_payload_with_recomputed_crc_is_corrupt_message():
    data = bytearray(B.build_batch([(b"k", b"value-%d" % i) for i in range(50)], compression=1))
    data[B.HEADER_SIZE + 20] ^= 0xFF  # inside the deflate stream
    struct.pack_into(">I", data, B.CRC_OFFSET, crc32c.crc32c(bytes(data[B.ATTRIBUTES_OFFSET:])))
    B.validate(data, B.parse_header(data))  # the CRC is fine
    with pytest.raises(RV.CorruptRecordsError):
        check(bytes(data))


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_is_corrupt_message(codec):
    recs = record(0, b"k", b"v")
    with pytest.raises(RV.CorruptRecordsError, match=f"Unknown compression type id: {codec}"):
        check(wrap(recs, 1, attributes=codec))


def test_wrong_first_record_length_varint_is_invalid_record():
    good = record(0, b"k", b"value") + record(1, b"k", b"value")
    bad = bytearray(good)
    bad[0] = _zz(len(good))[0] if len(good) < 64 else 0x7E  # claims more bytes than the record has
    with pytest.raises(RV.InvalidRecordError, match="Invalid record size"):
        check(wrap(bytes(bad), 2))
    bad[0] = _zz(3)[0]  # claims fewer
    with pytest.raises(RV.InvalidRecordError):
        check(wrap(bytes(bad), 2))


def test_record_count_mismatch_is_invalid_record():
    recs = record(0, b"k", b"v") + record(1, b"k", b"v")
    with pytest.raises(RV.InvalidRecordError, match="records still remaining"):
        check(wrap(recs, 1))
    with pytest.raises(RV.InvalidRecordError, match="premature EOF"):
        check(wrap(recs, 3))


def test_offset_delta_mismatch_is_invalid_record():
    recs = record(0, b"k", b"v") + record(2, b"k", b"v")
    with pytest.raises(RV.InvalidRecordError, match="offset delta 2"):
        check(wrap(recs, 2))


def test_bad_header_fields_are_invalid_record():
    body = b"\x00" + _zz(0) + _zz(0) + _zz(-1) + _zz(-1) + _zz(-5)  # negative header count
    with pytest.raises(RV.InvalidRecordError, match="invalid number of record headers"):
        check(wrap(_zz(len(body)) + body, 1))
    body = b"\x00" + _zz(0) + _zz(0) + _zz(-1) + _zz(-1) + _zz(1) + _zz(-1) + _zz(-1)  # null header key
    with pytest.raises(RV.InvalidRecordError, match="negative header key size"):
        check(wrap(_zz(len(body)) + body, 1))
    body = b"\x00" + _zz(0) + _zz(0) + _zz(-7) + _zz(-1) + _zz(0)  # key length -7
    with pytest.raises(RV.InvalidRecordError):
        check(wrap(_zz(len(body)) + body, 1))


def test_truncated_compressed_payloads_are_corrupt():
    for codec in (1, 3, 4):
        data = B.build_batch([(b"k", b"value-%d" % i * 10) for i in range(100)], compression=codec)
        payload = data[B.HEADER_SIZE:-5]
        with pytest.raises(RV.CorruptRecordsError):
            check(wrap(payload, 100, attributes=codec))


@pytest.mark.parametrize("content_size", [True, False])
def test_zstd_bomb_is_rejected_at_the_cap(content_size):
    cap = 1 << 20
    big = record(0, None, b"\x00" * (8 << 20))
    frame = zstandard.ZstdCompressor(write_content_size=content_size).compress(big)
    assert len(frame) < 2000
    with pytest.raises(RV.CorruptRecordsError, match="exceed"):
        check(wrap(frame, 1, attributes=4), max_decompressed=cap)
    check(wrap(frame, 1, attributes=4), max_decompressed=16 << 20)  # under the cap it is a fine batch


def test_gzip_bomb_is_rejected_at_the_cap():
    payload = gzip.compress(record(0, None, b"\x00" * (4 << 20)))
    with pytest.raises(RV.CorruptRecordsError, match="exceed"):
        check(wrap(payload, 1, attributes=1), max_decompressed=1 << 20)


def test_decompressed_cap_scales_with_max_message_bytes():
    assert RV.decompressed_cap(1_048_588) == RV.MIN_DECOMPRESSED_CAP
    assert RV.decompressed_cap(10 << 20) == 320 << 20


@pytest.mark.parametrize("codec", [0, 4])
def test_compacted_topic_refuses_keyless_records_with_record_errors(codec):
    data = B.build_batch([(b"a", b"1"), (None, b"2"), (b"c", b"3"), (None, None)], compression=codec)
    check(data)  # fine for a non-compacted topic
    with pytest.raises(RV.InvalidRecordError) as ei:
        check(data, compacted_tp="t-0")
    msg = "Compacted topic cannot accept message without key in topic partition t-0."
    assert ei.value.record_errors == [(1, msg), (3, msg)]
    check(B.build_batch([(b"a", b"1"), (b"b", None)], compression=codec), compacted_tp="t-0")  # tombstones ok


# --- inline_budget: what validation on the event loop may take before handing over ---------------

def _records(n: int, value: bytes = b"v") -> bytes:
    return b"".join(record(i, None, value) for i in range(n))


@pytest.mark.parametrize("codec", ["lz4", "zstd", "snappy"])
def test_an_ordinary_compressed_batch_is_validated_within_the_inline_budget(codec):
    data = B.build_batch([(b"k%d" % i, b"x" * 1000, []) for i in range(1000)], compression=CODECS[codec])
    assert B.parse_header(data).attributes & B.COMPRESSION_MASK == CODECS[codec]
    check(data, inline_budget=8 << 20)  # no ValidationTooHeavy: the caller keeps it on the loop


def test_gzip_is_never_validated_inline():
    data = wrap(gzip.compress(_records(10)), 10, attributes=1)
    with pytest.raises(RV.ValidationTooHeavy):
        check(data, inline_budget=8 << 20)
    check(data)  # and is valid


def test_more_records_than_the_inline_limit_are_handed_over_before_any_work():
    n = RV.INLINE_MAX_RECORDS + 1
    batch = wrap(zstandard.ZstdCompressor().compress(_records(n)), n, attributes=4)
    with pytest.raises(RV.ValidationTooHeavy):
        check(batch, inline_budget=8 << 20)
    check(batch)


def test_output_past_the_inline_budget_is_handed_over():
    big = b"y" * (1 << 20)
    batch = wrap(zstandard.ZstdCompressor().compress(_records(3, big)), 3, attributes=4)
    with pytest.raises(RV.ValidationTooHeavy):
        check(batch, inline_budget=2 << 20)
    check(batch, inline_budget=4 << 20)
    check(batch)


def test_invalid_records_are_handed_over_for_the_exact_error():
    """Inline, an invalid batch is not diagnosed (that may mean decompressing up to the cap into one
    buffer): the full validation gives the error it always gave."""
    batch = wrap(zstandard.ZstdCompressor().compress(_records(5)), 4, attributes=4)  # 5 records, 4 declared
    with pytest.raises(RV.ValidationTooHeavy):
        check(batch, inline_budget=8 << 20)
    with pytest.raises(RV.InvalidRecordError):
        check(batch)


def test_a_corrupt_payload_is_handed_over_for_the_exact_error():
    payload = bytearray(zstandard.ZstdCompressor().compress(_records(50)))
    payload[len(payload) // 2] ^= 0xFF
    batch = wrap(bytes(payload), 50, attributes=4)
    with pytest.raises(RV.ValidationTooHeavy):
        check(batch, inline_budget=8 << 20)
    with pytest.raises((RV.CorruptRecordsError, RV.InvalidRecordError)):
        check(batch)


@pytest.mark.parametrize("records", [
    [(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x07")],  # a commit marker's key and value
    [(None, b"v")], [(b"k", None)], [(None, None)], [(b"", b"")],
    [(b"k" * 300, b"v" * 70_000, [("h", b"x")]), (b"second", b"record")],  # multi-byte lengths, headers
])
@pytest.mark.parametrize("compression", [0, 1, 2, 3, 4])
def test_first_record_key_value_matches_decode_records(records, compression) -> None:
    batch = B.build_batch(records, compression=compression, control=len(records[0][0] or b"") == 4)
    first = B.decode_records(batch)[0]
    assert RV.first_record_key_value(B.parse_header(batch), batch) == (first.key, first.value)
    assert RV.first_record_key_value(B.parse_header(batch), memoryview(bytearray(batch))) == (first.key, first.value)


def test_first_record_key_value_refuses_cut_or_empty_batches() -> None:
    batch = B.build_control_batch(B.CONTROL_TYPE_COMMIT, coordinator_epoch=7, producer_id=5, producer_epoch=1)
    assert RV.first_record_key_value(B.parse_header(batch), batch) == (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x07")
    for cut in range(len(batch) - 1, 0, -1):
        if cut >= B.HEADER_SIZE + 1 + 1 + 1 + 1 + 1 + 4:  # the key is still whole
            continue
        with pytest.raises(ValueError):
            RV.first_record_key_value(B.parse_header(batch), batch[:cut])
    empty = bytearray(batch)
    struct.pack_into(">i", empty, B.RECORDS_COUNT_OFFSET, 0)
    with pytest.raises(ValueError):
        RV.first_record_key_value(B.parse_header(empty), empty)
