"""The fixed-layout __transaction_state encoders (coordinator/txn_records.py) are byte-identical to
the schema-driven codec and to storage.batch.build_batch, which they replace on the coordinator's
write path: Kafka's tools and our own replay must not see any difference."""

from __future__ import annotations

import pytest

from coordinator.txn_records import (
    TxnLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    state_batch,
)
from storage.batch import build_batch, decode_records, iter_headers
from storage.internal_records import TRANSACTION_LOG_KEY, TRANSACTION_LOG_VALUE, encode

VALUES = [
    TxnLogValue(1000, 3, 60000, 1, {"t": [3, 1, 2], "é-ü": [0]}, 1795507294000, 1795507293000),
    TxnLogValue(5, 0, 100, 0, {}, -1, -1),  # Empty: a null partition array
    TxnLogValue(2**40, 32766, 2**31 - 1, 4, {}, 1, 2),  # CompleteCommit with no partitions: an empty array
    TxnLogValue(7, 1, 900, 2, {f"topic-{i}": list(range(i + 1)) for i in range(20)}, 3, 4),
]


def _generic_value(v: TxnLogValue) -> bytes:
    partitions = None if v.status == 0 and not v.partitions else [
        {"topic": t, "partitionIds": sorted(ps)} for t, ps in sorted(v.partitions.items())]
    return encode(TRANSACTION_LOG_VALUE, 0, {
        "producerId": v.producer_id, "producerEpoch": v.producer_epoch, "transactionTimeoutMs": v.timeout_ms,
        "transactionStatus": v.status, "transactionPartitions": partitions,
        "transactionLastUpdateTimestampMs": v.last_update_ms, "transactionStartTimestampMs": v.start_ms})


@pytest.mark.parametrize("value", VALUES)
def test_v0_value_matches_the_schema_codec(value: TxnLogValue) -> None:
    assert encode_value(value) == _generic_value(value)
    back = decode_value(encode_value(value))
    assert (back.producer_id, back.status, back.partitions) == (
        value.producer_id, value.status, {t: sorted(p) for t, p in value.partitions.items()})


@pytest.mark.parametrize("tid", ["a", "bench-ctp-1795507294665", "ü" * 300, ""])
def test_key_matches_the_schema_codec(tid: str) -> None:
    assert encode_key(tid) == encode(TRANSACTION_LOG_KEY, 0, {"transactionalId": tid})
    assert decode_key(encode_key(tid)) == tid


@pytest.mark.parametrize("tid", ["a", "bench-ctp-1795507294665", "ü" * 300])
@pytest.mark.parametrize("size", [None, 0, 5, 63, 64, 300, 70_000])  # varint length widths, a tombstone
def test_state_batch_matches_build_batch(tid: str, size: int | None) -> None:
    key = encode_key(tid)
    value = None if size is None else bytes(range(256)) * (size // 256) + b"v" * (size % 256)
    batch = state_batch(key, value, 1795507294123)
    assert batch == build_batch([(key, value)], timestamp_ms=1795507294123)
    (header,) = iter_headers(batch, check=True)  # the CRC holds
    (rec,) = decode_records(batch)
    assert (header.records_count, rec.key, rec.value) == (1, key, value)


def test_coordinator_partition_is_cached_and_unchanged() -> None:
    """partition_for is memoised (it runs for every group and transaction request); the cache
    must return exactly Kafka's Utils.abs(key.hashCode) % partitions."""
    from coordinator.partition_access import java_string_hash, partition_for

    for key in ["bench-ctp-1795507294665", "ü" * 40, "", "polygenelubricants"]:  # the last hashes to MIN_VALUE
        h = java_string_hash(key)
        expected = (0 if h == -(1 << 31) else abs(h)) % 50
        assert partition_for(key, 50) == expected
        hits = partition_for.cache_info().hits
        assert partition_for(key, 50) == expected
        assert partition_for.cache_info().hits == hits + 1


@pytest.mark.parametrize("control_type", [0, 1])
@pytest.mark.parametrize(("pid", "epoch", "coordinator_epoch"), [(0, 0, 0), (1000, 3, 7), (2**62, 32766, 2**31 - 1)])
def test_marker_batch_matches_build_control_batch(control_type: int, pid: int, epoch: int,
                                                  coordinator_epoch: int) -> None:
    from coordinator.txn_records import marker_batch
    from storage.batch import build_control_batch

    fast = marker_batch(control_type, pid, epoch, coordinator_epoch, 1795507294123)
    assert fast == build_control_batch(control_type, producer_id=pid, producer_epoch=epoch,
                                       coordinator_epoch=coordinator_epoch, timestamp_ms=1795507294123)
    (header,) = iter_headers(fast, check=True)
    assert (header.is_control, header.is_transactional, header.producer_id, header.producer_epoch) == (
        True, True, pid, epoch)
