"""Record-level validation of v2 batches, as Kafka's LogValidator does before an append.

The produce path calls `validate_records` after the batch header and CRC check (storage.batch)
and before anything is appended; `kbroker dump-log --deep-verify` calls it on stored batches.
A CRC only proves the bytes arrived as the client sent them; this proves consumers can decode
them: every record's framing (length varint, attributes, timestamp delta, offset delta,
key/value lengths, header count and headers) is walked, the number of records must equal the
header's record count with no bytes left over, and record i must carry offset delta i.

Compressed batches are decompressed with the codec libraries the cleaner uses (zlib for gzip,
python-snappy/cramjam, lz4.frame, zstandard), in bounded steps, and rejected as soon as the output
passes ``max_decompressed`` bytes, so a small zstd frame cannot expand to gigabytes. With the
compiled walk this is one streaming pass: each decompressed piece (at most 64 KiB; snappy: one
block, decoded into a buffer the thread reuses) is walked by `_recwalk.Walker`, which carries a
record that straddles two pieces over without copying it, and dropped; the output is never joined,
and no large buffer is allocated per batch (a fresh 1 MB buffer costs a page fault per 4 KiB, more
than lz4 takes to fill it, unless malloc is tuned: broker.malloc_tuning). When the records are
invalid or the payload does not decode, the one-buffer path reruns (`decompress`, then the Python
walk), so errors are exactly its own; output past the cap is refused at once (see _walk_streaming).
Without the compiled walk the one-buffer path is the only one; its output (at most the cap) is
held while it is walked. `first_record_key_value` reads one record's key and value with the same
framing reader (producer state reads each transaction marker's control record with it).

The walk is compiled when it can be: `storage._recwalk` (storage/_recwalk.c, an optional extension
that setup.py builds when a C compiler is present) walks the request's buffer in place, about 100x
faster than Python, and only says valid (with the keyless records) or invalid; on invalid the
Python walk below runs to raise Kafka's exact error, so verdicts and messages are the Python
walk's by construction (tests/unit/test_record_walk_equivalence.py runs both over a corpus).
Without the extension (no compiler at install, or KBROKERTEST_PURE_PYTHON_WALK=1) the Python walk does
everything: over a bytes copy of an uncompressed records section (indexing bytes is faster than
indexing the request's memoryview), building no Python object per record (a tight loop over
integer indices, 1- and 2-byte varints inlined).

Errors, following Kafka:
- framing, record count and offset deltas -> `InvalidRecordError` (INVALID_RECORD; Kafka's
  InvalidRecordException, with its messages);
- unknown codec (attributes 5-7) and payloads that fail to decompress, or decompress past the
  cap -> `CorruptRecordsError` (CORRUPT_MESSAGE). Kafka lets an IllegalArgumentException /
  KafkaException escape here and answers UNKNOWN_SERVER_ERROR; CORRUPT_MESSAGE says what is wrong.
- keyless records in a compacted topic -> `InvalidRecordError` with ``record_errors``
  (batch index, message) for each of them; the whole batch fails.
Deviation: Kafka rewrites (recompresses) a compressed batch whose offset deltas are not 0..n-1
and stores uncompressed ones as they are; kbroker never rewrites batches, so it rejects them.
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from collections.abc import Generator, Iterator

from storage import batch as B

try:  # the optional compiled walk (see the module docstring)
    from storage import _recwalk
except ImportError:
    _recwalk = None
if os.environ.get("KBROKERTEST_PURE_PYTHON_WALK"):
    _recwalk = None
if _recwalk is not None and not hasattr(_recwalk, "Walker"):
    # A build from before the streaming walk (e.g. a tree updated without reinstalling): its
    # whole-buffer walk is still good, the Python path serves compressed batches.
    _recwalk = None

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = 0, 1, 2, 3, 4

# Decompressed bytes allowed per batch: max(64 MiB, 32 x the batch size limit). Kafka has no such
# limit; 32x covers the compression ratios of real (even very repetitive) payloads at the
# default max.message.bytes, while one request can cost at most this much memory and walk time.
MIN_DECOMPRESSED_CAP = 64 << 20
DECOMPRESSED_CAP_RATIO = 32
# Decompression step: output is produced and counted in pieces of this size.
_CHUNK = 1 << 20
# Streaming step (compiled walk): output is walked and dropped in pieces of at most this size, which
# stay in the CPU cache and in malloc's heap. A whole batch's output in one fresh buffer costs a page
# fault per 4 KiB on every batch (glibc hands large blocks back to the kernel when they are freed):
# that, not the codec, was most of the time of validating a ~1 MB lz4 batch.
_STREAM_CHUNK = 64 << 10


# validate_records(inline_budget=...): a compressed batch is validated on the caller's thread only
# while it stays this cheap; past it, ValidationTooHeavy (the caller then validates it elsewhere).
# 65,536 records take the compiled walk ~2 ms at worst (minimal records), and the codecs allowed
# inline (lz4, zstd, snappy) produce the budget's output in ~3-6 ms.
INLINE_MAX_RECORDS = 65_536


class ValidationTooHeavy(Exception):  # noqa: N818 - a signal to the caller, not an error of the batch
    """The batch needs more work than ``validate_records(inline_budget=...)`` allows: gzip, more
    records than INLINE_MAX_RECORDS, more decompressed output than the budget, or records found
    invalid (the exact error then comes from a full validation, which may decompress up to the cap
    into one buffer). Nothing about the batch's validity follows from it."""


class InvalidRecordError(ValueError):
    """A batch's records are malformed or refused (Kafka: INVALID_RECORD)."""

    def __init__(self, message: str, record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message)
        self.record_errors = record_errors or []


class CorruptRecordsError(B.InvalidBatchError):
    """A batch's records cannot be decompressed (Kafka: CORRUPT_MESSAGE)."""


def decompressed_cap(max_message_bytes: int) -> int:
    return max(MIN_DECOMPRESSED_CAP, DECOMPRESSED_CAP_RATIO * max_message_bytes)


def validate_records(buf: bytes | bytearray | memoryview, header: B.BatchHeader, *,
                     compacted_tp: str | None = None,
                     max_decompressed: int = MIN_DECOMPRESSED_CAP,
                     inline_budget: int | None = None) -> None:
    """Check the records of the batch ``header`` (parsed from ``buf``, CRC already checked).

    ``compacted_tp``: the "topic-partition" name when the topic is compacted (records need keys).
    ``inline_budget``: for a compressed batch, the decompressed bytes it may take here; a batch that
    needs more work raises ValidationTooHeavy, after at most that much (see INLINE_MAX_RECORDS).
    """
    start = header.position + B.HEADER_SIZE
    end = header.position + header.size
    count = header.records_count
    if count < 0:
        raise InvalidRecordError(f"Found invalid record count {count} in magic v2 batch")
    codec = header.attributes & B.COMPRESSION_MASK
    need_keys = compacted_tp is not None
    if codec == CODEC_NONE and _recwalk is not None and end <= len(buf):
        keyless = _recwalk.walk(buf, start, end, count, need_keys)  # in place: no copy
        if keyless is None:  # invalid: the Python walk raises the exact error (its verdict wins)
            keyless = walk_records(bytes(memoryview(buf)[start:end]), 0, end - start, count, need_keys)
    elif codec == CODEC_NONE:
        # Indexing bytes is ~1.5x faster than indexing a memoryview of the request buffer, which
        # pays for the copy many times over (a memcpy of the batch, freed at once).
        data = bytes(memoryview(buf)[start:end])
        keyless = walk_records(data, 0, len(data), count, need_keys)
    elif inline_budget is not None and (_recwalk is None or codec == CODEC_GZIP or count > INLINE_MAX_RECORDS):
        raise ValidationTooHeavy
    elif _recwalk is not None:
        keyless = _walk_streaming(codec, memoryview(buf)[start:end], count, need_keys, max_decompressed,
                                  inline_budget)
    else:
        data = decompress(codec, memoryview(buf)[start:end], max_decompressed)
        keyless = walk_records(data, 0, len(data), count, need_keys)
    if keyless:
        msg = f"Compacted topic cannot accept message without key in topic partition {compacted_tp}."
        errors = [(i, msg) for i in keyless]
        raise InvalidRecordError(
            f"One or more records have been rejected due to {len(errors)} record errors in total, and only "
            f"showing the first three errors at most: {errors[:3]}", errors)


# --- decompression ------------------------------------------------------------------------------


def decompress(codec: int, payload: memoryview, cap: int) -> bytes:
    """The decompressed records section; CorruptRecordsError if it cannot be decoded or passes ``cap``."""
    try:
        if codec == CODEC_GZIP:
            chunks = _gunzip(payload, cap)
        elif codec == CODEC_SNAPPY:
            chunks = _unsnappy(payload, cap)
        elif codec == CODEC_LZ4:
            chunks = _unlz4(payload, cap)
        elif codec == CODEC_ZSTD:
            chunks = _unzstd(payload, cap)
        else:
            raise CorruptRecordsError(f"Unknown compression type id: {codec}")
    except B.InvalidBatchError:
        raise
    except Exception as e:  # each library has its own error types; all mean "cannot decode"
        raise CorruptRecordsError(f"Failed to decompress record stream: {type(e).__name__}: {e}") from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_big(cap: int) -> CorruptRecordsError:
    e = CorruptRecordsError(f"Decompressed records exceed {cap} bytes (the broker's limit per batch)")
    e.past_cap = True  # type: ignore[attr-defined]  # read by _walk_streaming
    return e


def _gunzip(payload: memoryview, cap: int) -> list[bytes]:
    out: list[bytes] = []
    total = 0
    data: bytes | memoryview = payload
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    while True:
        chunk = d.decompress(data, _CHUNK)
        total += len(chunk)
        if total > cap:
            raise _too_big(cap)
        out.append(chunk)
        data = d.unconsumed_tail
        if d.eof:
            rest = d.unused_data
            # Concatenated gzip members are one stream (as Java's GZIPInputStream reads them);
            # other trailing bytes are ignored, as Java does.
            if len(rest) >= 2 and rest[0] == 0x1F and rest[1] == 0x8B:
                d, data = zlib.decompressobj(16 + zlib.MAX_WBITS), rest
                continue
            return out
        if not chunk and not data:
            raise CorruptRecordsError("Failed to decompress record stream: truncated gzip data")


_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _unsnappy(payload: memoryview, cap: int) -> list[bytes]:
    import snappy

    out: list[bytes] = []
    total = 0
    for block in _snappy_blocks(payload):
        # A raw snappy block starts with its uncompressed length (unsigned varint): check it first.
        total += _uvarint_prefix(block)
        if total > cap:
            raise _too_big(cap)
        chunk = snappy.decompress(bytes(block))
        out.append(chunk)
    if sum(map(len, out)) > cap:
        raise _too_big(cap)
    return out


def _snappy_chunks(payload: memoryview, cap: int) -> Iterator[memoryview]:
    """_unsnappy's decoding and checks, each block decoded into the thread's reused buffer (python-
    snappy's decompress is cramjam's decompress_raw plus a copy into bytes; this is the same decoder
    writing in place, and the buffer's pages stay mapped from batch to batch)."""
    import cramjam

    total = 0
    for block in _snappy_blocks(payload):
        size = _uvarint_prefix(block)
        total += size
        if total > cap:
            raise _too_big(cap)
        buf = getattr(_local, "snappy_out", None)
        if buf is None or len(buf) < size:
            buf = bytearray(size)
            if size <= _SNAPPY_KEEP:
                _local.snappy_out = buf
        n = cramjam.snappy.decompress_raw_into(block, memoryview(buf)[:size])
        yield memoryview(buf)[:n]


# Largest snappy output buffer a thread keeps for the next batch (default batches are <= 1 MiB).
_SNAPPY_KEEP = 2 << 20


def _snappy_blocks(payload: memoryview) -> list[memoryview]:
    blocks: list[memoryview] = []
    if bytes(payload[:8]) == _XERIAL_MAGIC:
        # Java's snappy-java framing: magic, version, compatible version, then (int32 length, block)*.
        pos, n = 16, len(payload)
        while pos < n:
            if n - pos < 4:
                raise CorruptRecordsError("Failed to decompress record stream: truncated snappy block length")
            (size,) = struct.unpack_from(">i", payload, pos)
            if size < 0 or pos + 4 + size > n:
                raise CorruptRecordsError("Failed to decompress record stream: bad snappy block length")
            blocks.append(payload[pos + 4:pos + 4 + size])
            pos += 4 + size
    else:
        blocks.append(payload)
    return blocks


def _uvarint_prefix(block: memoryview) -> int:
    value = shift = 0
    for i in range(min(5, len(block))):
        b = block[i]
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value
        shift += 7
    raise CorruptRecordsError("Failed to decompress record stream: bad snappy length preamble")


def _unlz4(payload: memoryview, cap: int) -> list[bytes]:
    import lz4.frame

    d = lz4.frame.LZ4FrameDecompressor()
    out: list[bytes] = []
    total = 0
    data: bytes | memoryview = payload
    while True:
        chunk = d.decompress(data, max_length=_CHUNK)
        data = b""
        total += len(chunk)
        if total > cap:
            raise _too_big(cap)
        out.append(chunk)
        if d.eof:
            return out
        if d.needs_input:
            raise CorruptRecordsError("Failed to decompress record stream: truncated lz4 frame")


# A ZstdDecompressor and an lz4 decompression context per thread (they are not thread-safe;
# creating one costs).
_local = threading.local()


def _unzstd(payload: memoryview, cap: int) -> list[bytes]:
    return list(_zstd_pieces(payload, cap))


def _zstd_pieces(payload: memoryview, cap: int) -> Iterator[bytes]:
    """The decompressed pieces as they come (a few KiB each, see the slicing below)."""
    import zstandard

    # A frame that declares its size is refused before any work.
    declared = zstandard.frame_content_size(payload)
    if declared > cap:
        raise _too_big(cap)
    dctx = getattr(_local, "zstd", None)
    if dctx is None:
        dctx = _local.zstd = zstandard.ZstdDecompressor()
    # zstandard's decompressobj has no output limit per call, so the input is fed in slices small
    # enough that even the densest blocks (an RLE block: 4 bytes -> 128 KiB) cannot produce more
    # than what is left of the cap; its eof flag, unlike stream_reader's, tells a truncated frame.
    d = dctx.decompressobj()
    total = 0
    pos, n = 0, len(payload)
    while True:
        step = max(8, (cap - total) >> 15)
        chunk = d.decompress(payload[pos:pos + step])
        pos = min(pos + step, n)
        if chunk:
            total += len(chunk)
            if total > cap:
                raise _too_big(cap)
            yield chunk
        if d.eof:
            rest = len(d.unused_data)
            pos -= rest
            if pos < n:  # another frame follows (Java's ZstdInputStream reads across frames)
                d = dctx.decompressobj()
                continue
            return
        if pos >= n:
            raise CorruptRecordsError("Failed to decompress record stream: truncated zstd frame")


# --- streaming decompression and walk ---------------------------------------------------------------


def _walk_streaming(codec: int, payload: memoryview, count: int, need_keys: bool, cap: int,
                    budget: int | None = None) -> list[int]:
    """The compiled walk fed chunk by chunk as the payload decompresses; the keyless records.
    With a ``budget`` (validate_records' inline_budget), ValidationTooHeavy once the output passes
    it or the records are found invalid, instead of going on.

    When the records are invalid or the payload does not decode it returns the one-buffer path's
    outcome: `decompress` then the Python walk, which raise exactly the errors they always have.
    Both paths run the same decoders on the same bytes and count the same totals against the cap,
    and the streaming walk has the whole-buffer walk's verdict
    (tests/unit/test_record_walk_equivalence.py), so a batch the streaming path accepts is one the
    one-buffer path accepts, with the same keyless records. Output past the cap is refused at once
    with the cap's CORRUPT_MESSAGE error, without decoding the payload a second time into one
    buffer of up to the cap (what the cap is there to bound). The one-buffer path gives that same
    error unless the payload also fails to decode within its last step (1 MiB of output, or one
    zstd slice) after the cap: then it named the decoding failure, also CORRUPT_MESSAGE.
    """
    walker = _recwalk.Walker(count, need_keys)
    ok = codec in (CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD)  # else decompress() raises
    chunks = _stream_chunks(codec, payload, cap) if ok else _no_chunks()
    out = 0
    try:
        for chunk in chunks:
            if budget is not None:
                out += len(chunk)
                if out > budget:
                    raise ValidationTooHeavy
            if not walker.feed(chunk):
                ok = False
                break
    except ValidationTooHeavy:
        raise
    except Exception as e:  # noqa: BLE001 - any other failure: the one-buffer path below raises the exact error
        if getattr(e, "past_cap", False):
            raise
        ok = False
    finally:
        chunks.close()  # done with the thread's decoder before the one-buffer path may use it
    keyless = walker.finish() if ok else None
    if keyless is None and budget is not None:
        raise ValidationTooHeavy
    if keyless is None:
        data = decompress(codec, payload, cap)
        keyless = walk_records(data, 0, len(data), count, need_keys)
    return keyless


def _stream_chunks(codec: int, payload: memoryview, cap: int) -> Generator[bytes | memoryview, None, None]:
    if codec == CODEC_LZ4:
        return _lz4_chunks(payload, cap)
    if codec == CODEC_ZSTD:
        return _zstd_chunks(payload, cap) if _one_whole_zstd_frame(payload) else _zstd_pieces(payload, cap)
    if codec == CODEC_GZIP:
        return _gzip_chunks(payload, cap)
    return _snappy_chunks(payload, cap)


def _no_chunks() -> Generator[bytes, None, None]:
    yield from ()


def _lz4_chunks(payload: memoryview, cap: int) -> Iterator[bytes]:
    """_unlz4's decoding and checks, one `_STREAM_CHUNK` at a time, on the thread's reused context
    (LZ4FrameDecompressor copies its unread input at every call; decompress_chunk reads a view)."""
    import lz4.frame

    ctx = getattr(_local, "lz4", None)
    if ctx is None:
        ctx = _local.lz4 = lz4.frame.create_decompression_context()
    lz4.frame.reset_decompression_context(ctx)  # a previous batch may have failed mid-frame
    pos, n, total = 0, len(payload), 0
    while True:
        chunk, read, eof = lz4.frame.decompress_chunk(ctx, payload[pos:], max_length=_STREAM_CHUNK)
        pos += read
        total += len(chunk)
        if total > cap:
            raise _too_big(cap)
        yield chunk
        if eof:
            return
        if pos >= n:  # all input read, frame not ended (LZ4FrameDecompressor's needs_input)
            raise CorruptRecordsError("Failed to decompress record stream: truncated lz4 frame")
        if not read and not chunk:  # no progress: never loop on it (the one-buffer path decides)
            raise CorruptRecordsError("Failed to decompress record stream: lz4 frame makes no progress")


def _zstd_chunks(payload: memoryview, cap: int) -> Iterator[bytes]:
    """_unzstd's decoding of a payload that is one whole frame (`_one_whole_zstd_frame`: so the
    truncation and next-frame checks cannot fire) with its cap checks, in pieces of at most
    `_STREAM_CHUNK`: read_to_iter bounds its output per step, so the input need not be cut into the
    2 KiB slices _zstd_pieces feeds (each a call that drops and retakes the GIL)."""
    import zstandard

    if zstandard.frame_content_size(payload) > cap:
        raise _too_big(cap)
    dctx = getattr(_local, "zstd", None)
    if dctx is None:
        dctx = _local.zstd = zstandard.ZstdDecompressor()
    total = 0
    for chunk in dctx.read_to_iter(payload, read_size=len(payload), write_size=_STREAM_CHUNK):
        total += len(chunk)
        if total > cap:
            raise _too_big(cap)
        yield chunk


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _one_whole_zstd_frame(payload: memoryview) -> bool:
    """Whether ``payload`` is exactly one zstd frame, every block present (RFC 8878 section 3.1.1:
    the header's field sizes, then 3-byte block headers up to the last block, then the checksum);
    the blocks' contents are not read. False for anything else (several frames, skippable frames,
    truncated or malformed structure), which _zstd_pieces then decodes as it always has."""
    n = len(payload)
    if n < 6 or payload[:4] != _ZSTD_MAGIC:
        return False
    fhd = payload[4]
    if fhd & 0x08:  # reserved bit
        return False
    single_segment = fhd & 0x20
    fcs_size = (0, 2, 4, 8)[fhd >> 6] or (1 if single_segment else 0)
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[fhd & 3] + fcs_size
    while pos + 3 <= n:
        header = payload[pos] | payload[pos + 1] << 8 | payload[pos + 2] << 16
        kind = (header >> 1) & 3
        if kind == 3:  # reserved block type
            return False
        pos += 3 + (1 if kind == 1 else header >> 3)  # an RLE block stores one byte
        if header & 1:  # the last block
            return pos + (4 if fhd & 0x04 else 0) == n
    return False


def _gzip_chunks(payload: memoryview, cap: int) -> Iterator[bytes]:
    """_gunzip's decoding and checks, the input fed in slices (at most 16 KiB, and small enough that
    even deflate's densest output, ~1,032x, stays within what is left of the cap). Unlike an output
    limit per call, this never copies the unread input (zlib's unconsumed_tail is a new bytes object
    at every call); the decoded bytes are the same."""
    total = 0
    pos, n = 0, len(payload)
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    while True:
        step = max(1024, min(16 << 10, (cap - total) >> 10))
        chunk = d.decompress(payload[pos:pos + step])
        pos = min(pos + step, n)
        total += len(chunk)
        if total > cap:
            raise _too_big(cap)
        if chunk:
            yield chunk
        if d.eof:
            pos -= len(d.unused_data)
            # Concatenated gzip members are one stream (as Java's GZIPInputStream reads them);
            # other trailing bytes are ignored, as Java does.
            if n - pos >= 2 and payload[pos] == 0x1F and payload[pos + 1] == 0x8B:
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                continue
            return
        if pos >= n:
            raise CorruptRecordsError("Failed to decompress record stream: truncated gzip data")


# --- the record walk ------------------------------------------------------------------------------


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


def first_record_key_value(header: B.BatchHeader,
                           batch: bytes | bytearray | memoryview) -> tuple[bytes | None, bytes | None]:
    """Key and value of the first record of one batch (``header``: its parsed header): a
    transaction marker's control record, read on every marker append, on every replica. Read in
    place by the walk's own framing reader when the batch is not compressed (a control batch never
    is); a compressed one goes through storage.batch.decode_records. InvalidRecordError (a
    ValueError) when the batch has no record or its first record runs past the batch."""
    if header.compression:
        records = B.decode_records(batch)
        if not records:
            raise InvalidRecordError("batch without records")
        return records[0].key, records[0].value
    if header.records_count < 1 or len(batch) <= B.HEADER_SIZE:
        raise InvalidRecordError("batch without records")
    length, pos = _varint(batch, B.HEADER_SIZE, len(batch))
    end = min(len(batch), pos + length)
    _, pos = _varint(batch, pos + 1, end, 10)  # after the attributes byte: timestamp delta (a varlong)
    _, pos = _varint(batch, pos, end)  # offset delta
    fields: list[bytes | None] = []
    for _ in range(2):  # key, value
        n, pos = _varint(batch, pos, end)
        if n < 0:
            fields.append(None)
            continue
        if pos + n > end:
            raise _structure()
        fields.append(bytes(batch[pos : pos + n]))
        pos += n
    return fields[0], fields[1]


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
