"""Reference copy of the pure-Python record walk as it was before the compiled walk (commit 78908fd).

tests/unit/test_record_walk_equivalence.py checks storage.record_validation (compiled walk, and the
pure-Python fallback) against this copy: same verdicts, same error messages. Do not optimise it.
"""

from __future__ import annotations

from storage import batch as B
from storage import record_validation as RV
from storage.record_validation import InvalidRecordError


def walk_records(data: bytes | bytearray | memoryview, pos: int, end: int, count: int,
                 need_keys: bool) -> list[int]:
    """Walk ``count`` records in ``data[pos:end]``; InvalidRecordError on any framing error.

    Returns the batch indexes of records without a key when ``need_keys`` (else []).
    Signed varints are zigzag; a 1-byte varint (the common case) is decoded inline.
    """
    keyless: list[int] = []
    # Every field read advances pos by at least one byte and pos never moves back, so a read that
    # starts at or past the record's end leaves pos > stop, which the per-record check below
    # catches: no bound check per field (a read past the buffer raises IndexError).
    try:
        for i in range(count):
            if pos >= end:
                raise InvalidRecordError("Incorrect declared batch size, premature EOF reached")
            b = data[pos]  # length
            if b < 0x80:
                size = (b >> 1) ^ -(b & 1)
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                r = (b & 0x7F) | (c << 7)
                size = (r >> 1) ^ -(r & 1)
                pos += 2
            else:
                size, pos = _varint(data, pos, end)
            body = pos
            stop = pos + size
            if size < 0 or stop > end:
                raise InvalidRecordError(f"Invalid record size: expected {size} bytes in record payload, but "
                                         f"instead the buffer has only {end - pos} remaining bytes.")
            # attributes (1 byte, unused in v2), then the timestamp delta (varlong): only its extent
            # matters. Deltas of a batch built over a linger of milliseconds take 2-3 bytes: inline.
            if data[pos + 1] < 0x80:
                pos += 2
            elif data[pos + 2] < 0x80:
                pos += 3
            elif data[pos + 3] < 0x80:
                pos += 4
            else:
                _, pos = _varint(data, pos + 1, stop, 10)
            b = data[pos]  # offset delta: must be the record's index
            if b < 0x80:
                delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                r = (b & 0x7F) | (c << 7)
                delta = (r >> 1) ^ -(r & 1)
                pos += 2
            else:
                delta, pos = _varint(data, pos, stop)
            if delta != i:
                raise InvalidRecordError(f"Record {i} of the batch has offset delta {delta}; producers must "
                                         f"number records 0..{count - 1} in order")
            b = data[pos]  # key length
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                r = (b & 0x7F) | (c << 7)
                n = (r >> 1) ^ -(r & 1)
                pos += 2
            else:
                n, pos = _varint(data, pos, stop)
            if n >= 0:
                pos += n
            elif n == -1:
                if need_keys:
                    keyless.append(i)
            else:
                raise _structure()
            b = data[pos]  # value length
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                r = (b & 0x7F) | (c << 7)
                n = (r >> 1) ^ -(r & 1)
                pos += 2
            else:
                n, pos = _varint(data, pos, stop)
            if n >= 0:
                pos += n
            elif n != -1:
                raise _structure()
            b = data[pos]  # header count
            if b == 0:
                pos += 1
            else:
                if b < 0x80:
                    pos += 1
                    headers = (b >> 1) ^ -(b & 1)
                else:
                    headers, pos = _varint(data, pos, stop)
                pos = _walk_headers(data, pos, stop, headers)
            if pos != stop:
                raise InvalidRecordError(f"Invalid record size: expected to read {size} bytes in record payload, "
                                         f"but instead read {pos - body}")
    except IndexError:
        raise _structure() from None
    if pos != end:
        raise InvalidRecordError("Incorrect declared batch size, records still remaining in file")
    return keyless


def _structure() -> InvalidRecordError:
    return InvalidRecordError("Found invalid record structure")


def _varint(data: bytes | bytearray | memoryview, pos: int, end: int, max_bytes: int = 5) -> tuple[int, int]:
    """A zigzag varint (varlong with max_bytes=10) at ``pos``, not reaching past ``end``."""
    raw = shift = 0
    for k in range(max_bytes):
        if pos + k >= end:
            raise _structure()
        b = data[pos + k]
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos + k + 1
        shift += 7
    raise InvalidRecordError("Varint is too long, the most significant bit in the last byte is set")


def _walk_headers(data: bytes | bytearray | memoryview, pos: int, stop: int, count: int) -> int:
    if count < 0:
        raise InvalidRecordError(f"Found invalid number of record headers {count}")
    for _ in range(count):
        n, pos = _varint(data, pos, stop)
        if n < 0:
            raise InvalidRecordError(f"Invalid negative header key size {n}")
        pos += n
        n, pos = _varint(data, pos, stop)
        if n >= 0:
            pos += n
        elif n != -1:
            raise _structure()
        if pos > stop:
            raise _structure()
    return pos


def validate_records(buf, header, *, compacted_tp=None, max_decompressed=RV.MIN_DECOMPRESSED_CAP) -> None:
    """storage.record_validation.validate_records as it was (decompression is unchanged and shared)."""
    start = header.position + B.HEADER_SIZE
    end = header.position + header.size
    count = header.records_count
    if count < 0:
        raise InvalidRecordError(f"Found invalid record count {count} in magic v2 batch")
    codec = header.attributes & B.COMPRESSION_MASK
    if codec == RV.CODEC_NONE:
        data = bytes(memoryview(buf)[start:end])
        start, end = 0, len(data)
    else:
        data = RV.decompress(codec, memoryview(buf)[start:end], max_decompressed)
        start, end = 0, len(data)
    keyless = walk_records(data, start, end, count, compacted_tp is not None)
    if keyless:
        msg = f"Compacted topic cannot accept message without key in topic partition {compacted_tp}."
        errors = [(i, msg) for i in keyless]
        raise InvalidRecordError(
            f"One or more records have been rejected due to {len(errors)} record errors in total, and only "
            f"showing the first three errors at most: {errors[:3]}", errors)
