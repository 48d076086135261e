"""__transaction_state records: Kafka's TransactionLogKey (v0) / TransactionLogValue (v0, v1).

A thin typed layer over the schema-driven codec in storage.internal_records (shared with the
group coordinator and dump-log). Values are written at v0 for transaction version 0/1, and at
v1 (flexible) for transaction version 2, as Kafka's TransactionLog.valueToBytes does: v1 carries
the TV2 fields as tagged fields (0 previousProducerId, 1 nextProducerId, 2
clientTransactionVersion, and 3 nextProducerEpoch for KIP-939's recovered prepared transaction;
a field at its default is not written), so Kafka's tools decode them. A value with a non-default
tagged field is written at v1 whatever the transaction version (a TV1 client's recovered 2PC
transaction carries nextProducerEpoch). The 2PC flag itself is the timeout Integer.MAX_VALUE, as
in Kafka.
A null value (tombstone) removes an expired transactional id.

Every transition of every transaction is one such record, written before the coordinator
answers, so the common cases are encoded with fixed layouts instead of the schema-driven codec:
the key and the v0 value; the one-record v2 batch that carries them (``state_batch``) and the
COMMIT/ABORT control batch of a marker (``marker_batch``) are storage.batch's one_record_batch.
Each is byte-identical to the generic path (tests/unit/test_txn_records_fast.py); the flexible v1
value keeps the generic encoder.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from storage.batch import one_record_batch
from storage.internal_records import TRANSACTION_LOG_KEY, TRANSACTION_LOG_VALUE, decode, encode


@dataclass(slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: dict[str, list[int]] = field(default_factory=dict)
    last_update_ms: int = -1
    start_ms: int = -1
    prev_producer_id: int = -1
    next_producer_id: int = -1
    client_txn_version: int = 0
    next_producer_epoch: int = -1


_VALUE_V0_HEAD = struct.Struct(">hqhibi")  # version 0, producerId, epoch, timeout, status, partitions count
_TIMESTAMPS = struct.Struct(">qq")
_STR_LEN = struct.Struct(">h")


def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode()
    if len(raw) > 0x7FFF:
        return encode(TRANSACTION_LOG_KEY, 0, {"transactionalId": transactional_id})  # raises as before
    return b"\0\0" + _STR_LEN.pack(len(raw)) + raw


def decode_key(data: bytes) -> str:
    version, fields = decode(TRANSACTION_LOG_KEY, data)
    if version != 0:
        raise ValueError(f"unknown TransactionLogKey version {version}")
    return fields["transactionalId"]


def encode_value(v: TxnLogValue) -> bytes:
    # Kafka writes a null partition array for Empty (TransactionLog.valueToBytes).
    partitions = None if v.status == 0 and not v.partitions else [
        {"topic": t, "partitionIds": sorted(ps)} for t, ps in sorted(v.partitions.items())]
    flexible = v.client_txn_version >= 2 or v.next_producer_epoch != -1
    if not flexible:
        return _encode_value_v0(v, partitions)
    return encode(TRANSACTION_LOG_VALUE, 1 if flexible else 0, {
        "producerId": v.producer_id, "producerEpoch": v.producer_epoch, "transactionTimeoutMs": v.timeout_ms,
        "transactionStatus": v.status, "transactionPartitions": partitions,
        "transactionLastUpdateTimestampMs": v.last_update_ms, "transactionStartTimestampMs": v.start_ms,
        "previousProducerId": v.prev_producer_id, "nextProducerId": v.next_producer_id,
        "clientTransactionVersion": v.client_txn_version, "nextProducerEpoch": v.next_producer_epoch,
    })


def _encode_value_v0(v: TxnLogValue, partitions: list[dict] | None) -> bytes:
    out = bytearray(_VALUE_V0_HEAD.pack(0, v.producer_id, v.producer_epoch, v.timeout_ms, v.status,
                                        -1 if partitions is None else len(partitions)))
    for tp in partitions or ():
        raw = tp["topic"].encode()
        ids = tp["partitionIds"]
        out += _STR_LEN.pack(len(raw))
        out += raw
        out += struct.pack(f">i{len(ids)}i", len(ids), *ids)
    out += _TIMESTAMPS.pack(v.last_update_ms, v.start_ms)
    return bytes(out)


def state_batch(key: bytes, value: bytes | None, timestamp_ms: int) -> bytes:
    """The v2 batch of one ``__transaction_state`` record (a tombstone when ``value`` is None):
    what storage.batch.build_batch([(key, value)], timestamp_ms=...) returns, without going
    through kafka-python's general builder."""
    return one_record_batch(key, value, timestamp_ms)


_MARKER_ATTRIBUTES = 0x30  # transactional | control
_MARKER_VALUE = struct.Struct(">hi")  # version 0, coordinator epoch


def marker_batch(control_type: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                 timestamp_ms: int) -> bytes:
    """A COMMIT (1) / ABORT (0) control batch: what storage.batch.build_control_batch returns."""
    return one_record_batch(struct.pack(">hh", 0, control_type), _MARKER_VALUE.pack(0, coordinator_epoch),
                            timestamp_ms, attributes=_MARKER_ATTRIBUTES, producer_id=producer_id,
                            producer_epoch=producer_epoch)


def decode_value(data: bytes) -> TxnLogValue:
    version, f = decode(TRANSACTION_LOG_VALUE, data)
    if version > 1:
        raise ValueError(f"unknown TransactionLogValue version {version}")
    parts = {p["topic"]: list(p["partitionIds"]) for p in (f["transactionPartitions"] or [])}
    return TxnLogValue(f["producerId"], f["producerEpoch"], f["transactionTimeoutMs"], f["transactionStatus"], parts,
                       f["transactionLastUpdateTimestampMs"], f["transactionStartTimestampMs"],
                       f.get("previousProducerId", -1), f.get("nextProducerId", -1),
                       f.get("clientTransactionVersion", 0), f.get("nextProducerEpoch", -1))
