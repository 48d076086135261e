"""Record batches for the fuzzer: valid v2 batches and the malformed kinds Produce must refuse.

Written from the v2 format (KIP-98) independently of kbroker's storage code, so a bug there is not
mirrored here. `valid_batch` makes a batch any consumer decodes (uncompressed or gzip/snappy/lz4/
zstd); `bad_batch(kind)` makes one that Kafka's LogValidator rejects. Every bad kind except
``bad_crc`` and ``lying_length`` carries a correct CRC, since the CRC alone is what kbroker
checked before record validation existed. The bombs stay within message.max.bytes (1 MiB) on the
wire but expand far past kbroker's decompression cap (64 MiB).
"""

from __future__ import annotations

import gzip
import random
import struct
from functools import cache

import crc32c

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_HDR = struct.Struct(">qiibIhiqqqhii")  # base offset .. record count (61 bytes)
CRC_OFFSET = 17
ATTR_OFFSET = 21


def _varint(v: int) -> bytes:
    v = (v << 1) ^ (v >> 63)  # zigzag
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def record(offset_delta: int, key: bytes | None, value: bytes | None, ts_delta: int = 0,
           headers: list[tuple[bytes, bytes | None]] = ()) -> bytes:  # type: ignore[assignment]
    body = bytearray(b"\x00")  # attributes
    body += _varint(ts_delta) + _varint(offset_delta)
    for part in (key, value):
        if part is None:
            body += _varint(-1)
        else:
            body += _varint(len(part)) + part
    body += _varint(len(headers))
    for hk, hv in headers:
        body += _varint(len(hk)) + hk
        body += _varint(-1) if hv is None else _varint(len(hv)) + hv
    return _varint(len(body)) + bytes(body)


def compress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        return gzip.compress(data, compresslevel=1)
    if codec == 2:
        import snappy

        return snappy.compress(data)
    if codec == 3:
        import lz4.frame

        return lz4.frame.compress(data)
    if codec == 4:
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    raise ValueError(codec)


def assemble(records_section: bytes, count: int, *, attributes: int = 0, last_offset_delta: int | None = None,
             magic: int = 2, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
             timestamp: int = 1_700_000_000_000) -> bytes:
    """A batch around an already encoded (possibly compressed) records section, with a correct CRC."""
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    length = 49 + len(records_section)  # bytes after the length field
    hdr = bytearray(_HDR.pack(0, length, -1, magic, 0, attributes, lod, timestamp, timestamp, producer_id,
                              producer_epoch, base_sequence, count))
    data = hdr + records_section
    struct.pack_into(">I", data, CRC_OFFSET, crc32c.crc32c(bytes(data[ATTR_OFFSET:])))
    return bytes(data)


def _records(rng: random.Random, n: int) -> bytes:
    return b"".join(record(i, rng.choice([None, b"k%d" % i]), b"v" * rng.randrange(0, 64),
                           headers=[(b"h", b"x")] if rng.random() < 0.2 else []) for i in range(n))


def valid_batch(rng: random.Random, codec: int | None = None) -> bytes:
    codec = rng.choice([0, 0, 0, 1, 2, 3, 4]) if codec is None else codec
    n = rng.randrange(1, 6)
    return assemble(compress(codec, _records(rng, n)), n, attributes=codec)


@cache
def _bomb(codec: int) -> bytes:
    """One record whose value is 100 MiB of zeros, compressed (well under 1 MiB on the wire for each codec)."""
    size = 100 << 20
    body_len = 4 + len(_varint(size)) + size + 1
    # attributes, timestamp delta 0, offset delta 0, null key, then the value length
    head = _varint(body_len) + b"\x00\x00\x00\x01" + _varint(size)
    zero = bytes(1 << 20)
    if codec == 1:
        import zlib

        co = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: gzip container
        out = [co.compress(head)]
        out += [co.compress(zero) for _ in range(size >> 20)]
        out.append(co.compress(b"\x00") + co.flush())
    elif codec == 4:
        import zstandard

        zo = zstandard.ZstdCompressor(level=3).compressobj()
        out = [zo.compress(head)]
        out += [zo.compress(zero) for _ in range(size >> 20)]
        out.append(zo.compress(b"\x00") + zo.flush())
    elif codec == 3:
        import lz4.frame

        lo = lz4.frame.LZ4FrameCompressor()
        out = [lo.begin(), lo.compress(head)]
        out += [lo.compress(zero) for _ in range(size >> 20)]
        out += [lo.compress(b"\x00"), lo.flush()]
    else:
        raise ValueError(codec)
    return b"".join(out)


BAD_KINDS = ("bad_crc", "lying_length_long", "lying_length_short", "wrong_magic", "count_high", "count_low",
             "count_negative", "offset_delta", "last_offset_delta", "record_length", "unknown_codec",
             "gzip_flipped", "zstd_flipped", "lz4_flipped", "snappy_flipped", "truncated_compressed",
             "gzip_bomb", "zstd_bomb", "lz4_bomb", "trailing_garbage", "key_length", "header_count")


def bad_batch(kind: str, rng: random.Random) -> bytes:
    """A batch of the malformed ``kind``; Produce must answer an error and store nothing of it."""
    n = rng.randrange(2, 6)
    recs = _records(rng, n)
    if kind == "bad_crc":
        data = bytearray(assemble(recs, n))
        data[rng.randrange(61, len(data))] ^= 1 << rng.randrange(8)
        return bytes(data)
    if kind in ("lying_length_long", "lying_length_short"):
        data = bytearray(assemble(recs, n))
        (length,) = struct.unpack_from(">i", data, 8)
        struct.pack_into(">i", data, 8, length + rng.choice([1, 7, 1000]) if kind.endswith("long") else
                         length - rng.choice([1, 5, 30]))
        return bytes(data)
    if kind == "wrong_magic":
        return assemble(recs, n, magic=rng.choice([0, 1, 3, 127, -1]))
    if kind == "count_high":
        return assemble(recs, n + rng.choice([1, 100, 1 << 30]), last_offset_delta=n - 1)
    if kind == "count_low":
        return assemble(recs, n - 1, last_offset_delta=n - 1)
    if kind == "count_negative":
        return assemble(recs, -1, last_offset_delta=n - 1)
    if kind == "offset_delta":
        section = b"".join(record(i * 2, None, b"v") for i in range(n))
        return assemble(section, n)
    if kind == "last_offset_delta":
        return assemble(recs, n, last_offset_delta=n + 5)
    if kind == "record_length":
        first = record(0, None, b"value")
        wrong = _varint(len(first) + 3) + first[1:]
        return assemble(wrong + b"".join(record(i, None, b"v") for i in range(1, n)), n)
    if kind == "key_length":
        body = b"\x00" + _varint(0) + _varint(0) + _varint(1000) + b"k" + _varint(-1) + _varint(0)
        return assemble(_varint(len(body)) + body, 1)
    if kind == "header_count":
        body = b"\x00" + _varint(0) + _varint(0) + _varint(-1) + _varint(-1) + _varint(1 << 20)
        return assemble(_varint(len(body)) + body, 1)
    if kind == "unknown_codec":
        return assemble(recs, n, attributes=rng.choice([5, 6, 7]))
    if kind.endswith("_flipped"):
        codec = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[kind.split("_")[0]]
        comp = bytearray(compress(codec, recs))
        # skip the format headers so the flip lands in the compressed data or its checksum
        pos = rng.randrange(min(12, len(comp) - 1), len(comp))
        comp[pos] ^= 1 << rng.randrange(8)
        return assemble(bytes(comp), n, attributes=codec)
    if kind == "truncated_compressed":
        codec = rng.choice([1, 2, 3, 4])
        comp = compress(codec, recs)
        return assemble(comp[: rng.randrange(1, len(comp))], n, attributes=codec)
    if kind.endswith("_bomb"):
        codec = {"gzip": 1, "zstd": 4, "lz4": 3}[kind.split("_")[0]]
        return assemble(_bomb(codec), 1, attributes=codec)
    if kind == "trailing_garbage":
        return assemble(recs + b"\x00\x01\x02", n)
    raise ValueError(kind)


def random_bad_batch(rng: random.Random) -> tuple[str, bytes]:
    kind = rng.choice(BAD_KINDS)
    return kind, bad_batch(kind, rng)


# A flipped bit in compressed data can, rarely, still decompress to valid records (e.g. a flip in a
# zstd/lz4 frame field that is not checked): those kinds may be accepted and are checked on disk
# by deep-verify instead of by the Produce answer.
MAY_BE_ACCEPTED = frozenset({"gzip_flipped", "zstd_flipped", "lz4_flipped", "snappy_flipped"})
