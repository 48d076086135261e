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
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


def encode_key(transactional_id: str) -> bytes:
    return encode(TRANSACTION_LOG_KEY, 0, {"transactionalId": transactional_id})


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
    return encode(TRANSACTION_LOG_VALUE, 1 if flexible else 0, {
        "producerId": v.producer_id, "producerEpoch": v.producer_epoch, "transactionTimeoutMs": v.timeout_ms,
        "transactionStatus": v.status, "transactionPartitions": partitions,
        "transactionLastUpdateTimestampMs": v.last_update_ms, "transactionStartTimestampMs": v.start_ms,
        "previousProducerId": v.prev_producer_id, "nextProducerId": v.next_producer_id,
        "clientTransactionVersion": v.client_txn_version, "nextProducerEpoch": v.next_producer_epoch,
    })


def decode_value(data: bytes) -> TxnLogValue:
    version, f = decode(TRANSACTION_LOG_VALUE, data)
    if version > 1:
        raise ValueError(f"unknown TransactionLogValue version {version}")
    parts = {p["topic"]: list(p["partitionIds"]) for p in (f["transactionPartitions"] or [])}
    return TxnLogValue(f["producerId"], f["producerEpoch"], f["transactionTimeoutMs"], f["transactionStatus"], parts,
                       f["transactionLastUpdateTimestampMs"], f["transactionStartTimestampMs"],
                       f.get("previousProducerId", -1), f.get("nextProducerId", -1),
                       f.get("clientTransactionVersion", 0), f.get("nextProducerEpoch", -1))
