"""Byte-level mutators over encoded request frames (size prefix + header + body).

Each mutator takes a valid frame and returns a mutated one plus a short name; the size prefix is
kept consistent unless the mutator is about the size itself (``wrong_length``). Mutations start
after the header's correlation id, so the harness can still match answers to cases, except the
``header`` mutators, which the harness sends last in a pipeline (or alone).
"""

from __future__ import annotations

import random
import struct

# Offsets inside a frame: size(4) api_key(2) api_version(2) correlation_id(4) client_id_len(2) ...
BODY_MIN = 12

_INTERESTING32 = [0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0x00010000, 0x0FFFFFFF, 0, 1, 0x7FFFFFFE]
_INTERESTING16 = [0x7FFF, 0x8000, 0xFFFF, 0xFFFE, 0, 1]
_BAD_VARINTS = [b"\xff\xff\xff\xff\xff\xff", b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",
                b"\xff", b"\x80", b"\xfe\xff\xff\xff\x07", b"\xff\xff\xff\x7f"]
_BAD_UTF8 = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xe2\x82"]
_KNOWN_STRINGS = [b"fuzz-a", b"fuzz-b", b"fuzz-group", b"fuzz-txn", b"kbroker-fuzz", b"consumer", b"range",
                  b"retention.ms", b"fuzz"]


def _reframe(frame: bytes | bytearray) -> bytes:
    data = bytearray(frame)
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


def _pos(rng: random.Random, frame: bytes, start: int = BODY_MIN) -> int:
    return rng.randrange(start, len(frame)) if len(frame) > start else len(frame)


def bitflip(frame: bytes, rng: random.Random) -> bytes:
    data = bytearray(frame)
    for _ in range(rng.choice([1, 1, 2, 4, 8])):
        if len(data) > BODY_MIN:
            data[_pos(rng, frame)] ^= 1 << rng.randrange(8)
    return bytes(data)


def byteset(frame: bytes, rng: random.Random) -> bytes:
    data = bytearray(frame)
    if len(data) > BODY_MIN:
        data[_pos(rng, frame)] = rng.choice([0x00, 0xFF, 0x7F, 0x80, 0x01, rng.getrandbits(8)])
    return bytes(data)


def truncate(frame: bytes, rng: random.Random) -> bytes:
    cut = rng.randrange(BODY_MIN, len(frame)) if len(frame) > BODY_MIN else len(frame)
    return _reframe(frame[:cut])


def huge_count(frame: bytes, rng: random.Random) -> bytes:
    """Overwrite an int32/int16 at a random offset with an interesting value (often an array or string length)."""
    data = bytearray(frame)
    if len(data) < BODY_MIN + 4:
        return bytes(data)
    pos = rng.randrange(BODY_MIN, len(data) - 3)
    if rng.random() < 0.7:
        struct.pack_into(">I", data, pos, rng.choice(_INTERESTING32))
    else:
        struct.pack_into(">H", data, pos, rng.choice(_INTERESTING16))
    return bytes(data)


def bad_varint(frame: bytes, rng: random.Random) -> bytes:
    """Replace or insert an over-long / huge unsigned varint (compact lengths, tag counts)."""
    pos = _pos(rng, frame)
    v = rng.choice(_BAD_VARINTS)
    if rng.random() < 0.5:
        return _reframe(frame[:pos] + v + frame[pos + 1:])
    return _reframe(frame[:pos] + v + frame[pos:])


def bad_utf8(frame: bytes, rng: random.Random) -> bytes:
    """Put invalid UTF-8 inside a string the seed carries (topic, group, client software name...)."""
    hits = [(s, i) for s in _KNOWN_STRINGS if (i := frame.find(s, BODY_MIN)) >= 0]
    if not hits:
        return byteset(frame, rng)
    s, i = rng.choice(hits)
    bad = rng.choice(_BAD_UTF8)
    j = i + rng.randrange(len(s) - len(bad) + 1) if len(s) >= len(bad) else i
    return bytes(frame[:j] + bad + frame[j + len(bad):])


def tagged_fields(frame: bytes, rng: random.Random) -> bytes:
    """Replace the body's final (empty) tagged-field section with random tags; flexible versions only."""
    n = rng.choice([1, 2, 3, 200])
    out = bytearray(_uvarint(n))
    tag = 0
    for _ in range(min(n, 4)):
        tag = rng.choice([tag, tag + 1, rng.randrange(0, 10), 0x7FFFFFF])
        size = rng.choice([0, 1, 4, 100])
        payload = bytes(rng.getrandbits(8) for _ in range(min(size, 16)))
        claimed = size if rng.random() < 0.8 else rng.choice([0xFFFFFFF, size + 50])
        out += _uvarint(tag) + _uvarint(claimed) + payload
    return _reframe(frame[:-1] + bytes(out))


def header_tagged(frame: bytes, rng: random.Random) -> bytes:
    """Random tagged fields in request header v2 (right after the client id)."""
    (cid_len,) = struct.unpack_from(">h", frame, 12)
    pos = 14 + max(cid_len, 0)
    junk = _uvarint(1) + _uvarint(rng.randrange(0, 5)) + _uvarint(3) + b"abc"
    if rng.random() < 0.3:
        junk = rng.choice(_BAD_VARINTS)
    return _reframe(frame[:pos] + junk + frame[pos + 1:])


def splice(frame: bytes, rng: random.Random, other: bytes) -> bytes:
    a = _pos(rng, frame)
    b = _pos(rng, other)
    return _reframe(frame[:a] + other[b:])


def insert_junk(frame: bytes, rng: random.Random) -> bytes:
    pos = _pos(rng, frame)
    junk = bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 2, 4, 16])))
    return _reframe(frame[:pos] + junk + frame[pos:])


def delete_bytes(frame: bytes, rng: random.Random) -> bytes:
    pos = _pos(rng, frame)
    return _reframe(frame[:pos] + frame[pos + rng.choice([1, 2, 4, 8]):])


# --- header mutators (the harness does not rely on the correlation id of these) ------------------

def header_version(frame: bytes, rng: random.Random, lo: int, hi: int) -> bytes:
    """The same body under another version of the same api (a body of the wrong layout)."""
    data = bytearray(frame)
    v = rng.choice([v for v in range(lo, hi + 1)] + [hi + 1, -1, 0x7FFF])
    struct.pack_into(">h", data, 6, v)
    return bytes(data)


def header_client_id(frame: bytes, rng: random.Random) -> bytes:
    data = bytearray(frame)
    struct.pack_into(">h", data, 12, rng.choice([-2, 0x7FFF, 200, -32768]))
    return bytes(data)


def wrong_length(frame: bytes, rng: random.Random) -> bytes:
    """A size prefix that lies: too short (the rest parses as the next frame) or too long (then EOF)."""
    data = bytearray(frame)
    size = len(frame) - 4
    struct.pack_into(">i", data, 0, rng.choice([size - 1, size - 3, max(size // 2, 0), 0, -1, 3, size + 1,
                                                 size + 100, 0x7FFFFFFF]))
    return bytes(data)


def _uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


BODY_MUTATORS = {
    "bitflip": bitflip, "byteset": byteset, "truncate": truncate, "huge_count": huge_count,
    "bad_varint": bad_varint, "bad_utf8": bad_utf8, "insert_junk": insert_junk, "delete_bytes": delete_bytes,
}
