"""__transaction_state records: Kafka's TransactionLogKey (v0) / TransactionLogValue (v0) layouts.

Key: version int16 (0), transactional_id string. Value: version int16 (0), producer_id int64,
producer_epoch int16, transaction_timeout_ms int32, transaction_status int8, partitions
(nullable array of {topic string, partition_ids []int32}), last_update_ms int64,
start_ms int64. A null value (tombstone) removes an expired transactional id.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

_VALUE_HEAD = struct.Struct(">hqhib")
_TAIL = struct.Struct(">qq")


@dataclass(slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: dict[str, list[int]] = field(default_factory=dict)
    last_update_ms: int = -1
    start_ms: int = -1


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def encode_key(transactional_id: str) -> bytes:
    return struct.pack(">h", 0) + _string(transactional_id)


def decode_key(data: bytes) -> str:
    version, n = struct.unpack_from(">hh", data)
    if version != 0:
        raise ValueError(f"unknown TransactionLogKey version {version}")
    return data[4 : 4 + n].decode()


def encode_value(v: TxnLogValue) -> bytes:
    out = [_VALUE_HEAD.pack(0, v.producer_id, v.producer_epoch, v.timeout_ms, v.status)]
    # Kafka writes a null partition array for Empty (TransactionLog.valueToBytes).
    out.append(struct.pack(">i", -1 if v.status == 0 and not v.partitions else len(v.partitions)))
    for topic, parts in sorted(v.partitions.items()):
        out.append(_string(topic))
        out.append(struct.pack(f">i{len(parts)}i", len(parts), *sorted(parts)))
    out.append(_TAIL.pack(v.last_update_ms, v.start_ms))
    return b"".join(out)


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def decode_value(data: bytes) -> TxnLogValue:
    """Decodes v0 and the flexible v1 (compact strings/arrays; tagged fields skipped)."""
    version, pid, epoch, timeout, status = _VALUE_HEAD.unpack_from(data)
    pos = _VALUE_HEAD.size
    partitions: dict[str, list[int]] = {}
    if version == 0:
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(max(count, 0)):
            (n,) = struct.unpack_from(">h", data, pos)
            topic = data[pos + 2 : pos + 2 + n].decode()
            pos += 2 + n
            (k,) = struct.unpack_from(">i", data, pos)
            partitions[topic] = list(struct.unpack_from(f">{k}i", data, pos + 4))
            pos += 4 + 4 * k
    elif version == 1:
        count, pos = _read_uvarint(data, pos)
        for _ in range(max(count - 1, 0)):
            n, pos = _read_uvarint(data, pos)
            topic = data[pos : pos + n - 1].decode()
            pos += n - 1
            k, pos = _read_uvarint(data, pos)
            partitions[topic] = list(struct.unpack_from(f">{k - 1}i", data, pos))
            pos += 4 * (k - 1)
            tags, pos = _read_uvarint(data, pos)
            for _ in range(tags):
                _, pos = _read_uvarint(data, pos)
                size, pos = _read_uvarint(data, pos)
                pos += size
    else:
        raise ValueError(f"unknown TransactionLogValue version {version}")
    last_update, start = _TAIL.unpack_from(data, pos)
    return TxnLogValue(pid, epoch, timeout, status, partitions, last_update, start)
