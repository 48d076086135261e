"""Kafka v2 record-batch header codec: parse, validate (CRC32C), patch offsets, iterate, build.

The hot path never decodes records: it reads the fixed 61-byte header, checks the CRC
over the rest of the batch and rewrites baseOffset / partitionLeaderEpoch, which both
lie outside the CRC. Building whole batches (control markers, coordinator records,
tests) and decoding records (dump-log, compaction) reuse kafka-python's record codec.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c

# Offsets of the header fields inside a v2 batch (Kafka's DefaultRecordBatch layout).
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
RECORDS_COUNT_OFFSET = 57
HEADER_SIZE = 61
# baseOffset (8) + batchLength (4): batchLength counts the bytes after these 12.
LOG_OVERHEAD = 12

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

# Control record keys: version int16, type int16.
CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_INT32 = struct.Struct(">i")


class InvalidBatchError(ValueError):
    """A batch is structurally broken (Kafka: CORRUPT_MESSAGE)."""


class CorruptBatchError(InvalidBatchError):
    """A batch's CRC does not match its contents (Kafka: CORRUPT_MESSAGE)."""


class UnsupportedMagicError(InvalidBatchError):
    """A batch with magic < 2 (Kafka: UNSUPPORTED_FOR_MESSAGE_FORMAT)."""


@dataclass(slots=True)
class BatchHeader:
    """The fixed header of one v2 record batch, plus where it sits in its buffer."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int = 0  # offset of the batch inside the buffer it was parsed from

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return (self.attributes & TIMESTAMP_TYPE_MASK) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)


def increment_sequence(sequence: int, increment: int) -> int:
    """Sequence numbers wrap from int32 max back to 0, as in Kafka."""
    if sequence > 0x7FFFFFFF - increment:
        return increment - (0x7FFFFFFF - sequence) - 1
    return sequence + increment


def parse_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse the header of the batch starting at ``position``; checks only that it fits."""
    if len(buf) - position < HEADER_SIZE:
        if len(buf) - position >= 17 and buf[position + MAGIC_OFFSET] < 2:
            raise UnsupportedMagicError(f"record batch magic {buf[position + MAGIC_OFFSET]} is not supported (need 2)")
        raise InvalidBatchError(f"truncated batch header: {len(buf) - position} bytes at position {position}")
    fields = _HEADER.unpack_from(buf, position)
    return BatchHeader(*fields, position=position)


def validate(buf: bytes | bytearray | memoryview, header: BatchHeader) -> None:
    """Check magic, length, record count and CRC of a parsed batch against its bytes."""
    if header.magic != 2:
        raise UnsupportedMagicError(f"record batch magic {header.magic} is not supported (need 2)")
    end = header.position + header.size
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise InvalidBatchError(f"batch length {header.batch_length} is smaller than the header")
    if end > len(buf):
        raise InvalidBatchError(
            f"batch at position {header.position} claims {header.size} bytes, only {len(buf) - header.position} present"
        )
    if header.records_count < 0 or header.last_offset_delta < 0:
        raise InvalidBatchError("negative record count or offset delta")
    view = memoryview(buf)[header.position + ATTRIBUTES_OFFSET : end]
    actual = crc32c.crc32c(view)
    if actual != header.crc:
        raise CorruptBatchError(f"batch CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}")


def iter_headers(buf: bytes | bytearray | memoryview, *, check: bool = True) -> Iterator[BatchHeader]:
    """Yield the header of every batch in a buffer of back-to-back batches.

    With ``check`` each batch is fully validated (CRC included); a trailing partial batch
    raises. Without it, iteration stops silently at the first batch that does not fit.
    """
    pos = 0
    n = len(buf)
    while pos < n:
        if n - pos < HEADER_SIZE:
            if check:
                parse_header(buf, pos)  # raises with the right message
            return
        header = parse_header(buf, pos)
        if check:
            validate(buf, header)
        elif header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > n:
            return
        yield header
        pos += header.size


def set_base_offset(buf: bytearray | memoryview, header: BatchHeader, base_offset: int) -> None:
    """Assign offsets to a batch in place (baseOffset lies outside the CRC)."""
    _BASE_OFFSET.pack_into(buf, header.position + BASE_OFFSET_OFFSET, base_offset)
    header.base_offset = base_offset


def set_partition_leader_epoch(buf: bytearray | memoryview, header: BatchHeader, epoch: int) -> None:
    _INT32.pack_into(buf, header.position + PARTITION_LEADER_EPOCH_OFFSET, epoch)
    header.partition_leader_epoch = epoch


def set_max_timestamp_log_append_time(buf: bytearray | memoryview, header: BatchHeader, now_ms: int) -> None:
    """Rewrite a batch for message.timestamp.type=LogAppendTime: attributes, maxTimestamp, and CRC."""
    attrs = header.attributes | TIMESTAMP_TYPE_MASK
    struct.pack_into(">h", buf, header.position + ATTRIBUTES_OFFSET, attrs)
    struct.pack_into(">q", buf, header.position + 35, now_ms)
    end = header.position + header.size
    crc = crc32c.crc32c(memoryview(buf)[header.position + ATTRIBUTES_OFFSET : end])
    struct.pack_into(">I", buf, header.position + CRC_OFFSET, crc)
    header.attributes = attrs
    header.max_timestamp = now_ms
    header.crc = crc


# --- building and decoding whole batches (not on the produce/fetch hot path) ---------------

# partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, base/max timestamp, producerId,
# producerEpoch, baseSequence, record count: the fixed part of a batch after baseOffset and length.
_BATCH_TAIL = struct.Struct(">ibIhiqqqhii")


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)  # zigzag, as Kafka's ByteUtils.writeVarint/Varlong
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_ZZ_SMALL = [_varint(n) for n in range(8192)]  # zigzag varints of 0..8191: lengths and offset deltas


def _zz(n: int) -> bytes:
    return _ZZ_SMALL[n] if 0 <= n < 8192 else _varint(n)


def plain_batch(records: list[tuple[bytes | None, bytes | None]], timestamp_ms: int, *, attributes: int = 0,
                producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                base_sequence: int = NO_SEQUENCE, base_offset: int = 0,
                partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """A v2 batch of uncompressed records without headers, all at ``timestamp_ms``, offset deltas
    0, 1, ...: byte for byte what kafka-python's builder (``build_batch``) gives, at a fraction of
    its cost. The coordinators write such batches on every state change, marker and offset commit."""
    parts: list[bytes] = []
    for i, (key, value) in enumerate(records):
        zi = _zz(i)
        if key is None:
            zk, key = b"\1", b""  # zigzag(-1): null
        else:
            zk = _zz(len(key))
        if value is None:
            zv, value = b"\1", b""
        else:
            zv = _zz(len(value))
        # attributes 0, timestampDelta 0, offsetDelta, key, value, no headers
        parts += (_zz(3 + len(zi) + len(zk) + len(key) + len(zv) + len(value)), b"\0\0", zi, zk, key, zv, value, b"\0")
    records_bytes = b"".join(parts)
    head = bytearray(_BATCH_TAIL.pack(partition_leader_epoch, 2, 0, attributes, max(len(records) - 1, 0),
                                      timestamp_ms, timestamp_ms, producer_id, producer_epoch, base_sequence,
                                      len(records)))
    # The length field covers head and records; the CRC covers them from the attributes (head offset 9) on.
    struct.pack_into(">I", head, 5, crc32c.crc32c(records_bytes, crc32c.crc32c(memoryview(head)[9:])))
    return b"".join((struct.pack(">qi", base_offset, len(head) + len(records_bytes)), head, records_bytes))


def one_record_batch(key: bytes, value: bytes | None, timestamp_ms: int, *, attributes: int = 0,
                     producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH) -> bytes:
    """A v2 batch of one uncompressed record without headers at offset 0 (no sequence, no partition
    leader epoch): the coordinators' state records and markers."""
    return plain_batch([(key, value)], timestamp_ms, attributes=attributes, producer_id=producer_id,
                       producer_epoch=producer_epoch)


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def build_batch(
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]
    | list[tuple[bytes | None, bytes | None]],
    *,
    base_offset: int = 0,
    timestamp_ms: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    compression: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """Encode one v2 batch from (key, value[, headers]) tuples."""
    import time

    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    if compression == 0 and records and all(len(rec) == 2 or not rec[2] for rec in records):  # type: ignore[misc]
        attributes = (TRANSACTIONAL_MASK if transactional else 0) | (CONTROL_MASK if control else 0)
        return plain_batch([(rec[0], rec[1]) for rec in records], ts, attributes=attributes, producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=base_sequence, base_offset=base_offset,
                           partition_leader_epoch=partition_leader_epoch)
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 30,
    )
    for i, rec in enumerate(records):
        key, value = rec[0], rec[1]
        headers = list(rec[2]) if len(rec) > 2 else []  # type: ignore[misc]
        builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    data = bytearray(builder.build())
    if control:
        # kafka-python's builder has no control flag: set it and recompute the CRC.
        attrs = struct.unpack_from(">h", data, ATTRIBUTES_OFFSET)[0] | CONTROL_MASK
        struct.pack_into(">h", data, ATTRIBUTES_OFFSET, attrs)
        struct.pack_into(">I", data, CRC_OFFSET, crc32c.crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]))
    struct.pack_into(">q", data, 0, base_offset)
    struct.pack_into(">i", data, PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)
    return bytes(data)


def build_control_batch(
    control_type: int,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp_ms: int | None = None,
    base_offset: int = 0,
) -> bytes:
    """An end-transaction marker: key (version 0, type), value (version 0, coordinator epoch)."""
    key = struct.pack(">hh", 0, control_type)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch(
        [(key, value)],
        base_offset=base_offset,
        timestamp_ms=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
    )


def parse_control_key(key: bytes) -> tuple[int, int]:
    """(version, type) of a control record key."""
    return struct.unpack_from(">hh", key)


def decode_records(batch: bytes | bytearray | memoryview) -> list[Record]:
    """Decode every record of one batch (decompressing if needed)."""
    from kafka.record.default_records import DefaultRecordBatch

    rb = DefaultRecordBatch(bytes(batch))
    return [
        Record(r.offset, r.timestamp, r.key, r.value, list(r.headers))
        for r in rb  # type: ignore[attr-defined]
    ]
