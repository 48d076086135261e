"""WriteTxnMarkers (key 27), versions 1-2: the transaction coordinator ends a transaction on a
partition leader. v2 carries each marker's ``transaction_version`` (KIP-890 part 2): under
TV2 the marker's epoch must be above the producer's epoch on the partition (the coordinator
bumped it when the transaction ended), unless it retries the marker of an already finished
transaction; under TV0/1 it may equal it (storage/producer_state.py ``validate_marker``).

For each partition: the marker is checked against the producer state (a stale producer epoch ->
INVALID_PRODUCER_EPOCH, an older coordinator epoch -> TRANSACTION_COORDINATOR_FENCED), a
COMMIT/ABORT control batch is appended, the producer's open transaction is closed (the LSO moves
on), an ABORT adds its entry to the segment's ``.txnindex``, and read_committed fetchers parked
on the partition are woken. Markers landing in ``__consumer_offsets`` also settle the group
offsets committed in that transaction. The coordinator calls this same code for local leaders.
Cluster mode: only the partition's leader writes markers (NOT_LEADER_OR_FOLLOWER elsewhere), and
answers once the ISR has them (acks=all; NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT or
NOT_LEADER_OR_FOLLOWER otherwise, which the coordinator retries).

ACLs (as KafkaApis): CLUSTER_ACTION on the cluster, else every partition answers
CLUSTER_AUTHORIZATION_FAILED and nothing is written.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from kafka.protocol.producer import WriteTxnMarkersResponse

from broker.handlers import AclOperation, RequestContext, api
from coordinator import txn_records
from coordinator.partition_access import TxnMarkerEntry
from protocol.errors import ErrorCode
from storage.batch import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT
from storage.log import AbortedTxn

if TYPE_CHECKING:
    from broker.broker import Broker

MARKER_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms for the marker append

log = logging.getLogger("broker.txn_markers")

OFFSETS_TOPIC = "__consumer_offsets"


def marker_batch(m: TxnMarkerEntry) -> bytes:
    """The COMMIT/ABORT control batch of ``m``: the same bytes on every partition of the entry
    (the log patches in each partition's base offset and leader epoch), so it is built once."""
    return txn_records.marker_batch(CONTROL_TYPE_COMMIT if m.committed else CONTROL_TYPE_ABORT, m.producer_id,
                                    m.producer_epoch, m.coordinator_epoch, int(time.time() * 1000))


def write_marker(broker: Broker, m: TxnMarkerEntry, topic: str, partition: int, batch: bytes | None = None) -> ErrorCode:
    part, missing = broker.replica_manager.get_leader(topic, partition)
    if part is None:  # only the leader writes markers; a follower copies them
        return missing
    ps = part.producer_state
    try:
        if ps is not None:
            ps.validate_marker(m.producer_id, m.producer_epoch, m.coordinator_epoch,
                               transaction_version=m.transaction_version)
        if batch is None:
            batch = marker_batch(m)
        offset = broker.replica_manager.append_control(part, bytearray(batch))
        if ps is not None:
            done = ps.complete_txn(m.producer_id, m.producer_epoch, m.committed, m.coordinator_epoch, offset,
                                   transaction_version=m.transaction_version)
            if done is not None and done.is_aborted:
                part.log.add_aborted_txn(AbortedTxn(done.producer_id, done.first_offset, done.last_offset,
                                                    done.last_stable_offset))
    except Exception as e:
        code = getattr(e, "error_code", None) or getattr(e, "code", None)
        if code is None:
            raise
        return ErrorCode(code)
    part.wake_waiters()
    if topic == OFFSETS_TOPIC:
        gc = getattr(broker, "group_coordinator", None)
        if gc is not None:
            gc.complete_txn(partition, m.producer_id, m.committed)
    return ErrorCode.NONE


async def write_markers_locally(broker: Broker, markers: list[TxnMarkerEntry]) -> dict[tuple[int, str, int], int]:
    out: dict[tuple[int, str, int], int] = {}
    touched = []
    for m in markers:
        batch = marker_batch(m)
        for topic, parts in m.partitions.items():
            for p in parts:
                code = out[(m.producer_id, topic, p)] = write_marker(broker, m, topic, p, batch)
                part = broker.replica_manager.get(topic, p)
                if part is not None and code == ErrorCode.NONE:
                    touched.append((m.producer_id, topic, part))
    rm = broker.replica_manager
    # Markers are answered (and CompleteCommit written) only once flush.messages is honoured.
    await rm.flush_due(part for _, _, part in touched)
    # In a cluster, only once the ISR has them too (Kafka appends markers with acks=all).
    waits = [(pid, topic, part) for pid, topic, part in touched if part.replicated]
    if waits:
        codes = await asyncio.gather(*(rm.wait_replicated(part, part.log.log_end_offset, MARKER_TIMEOUT_S)
                                       for _, _, part in waits))
        for (pid, topic, part), code in zip(waits, codes, strict=True):
            if code != ErrorCode.NONE:
                out[(pid, topic, part.index)] = code
    return out


@api(27, 1, 2)
async def handle_write_txn_markers(ctx: RequestContext, request) -> WriteTxnMarkersResponse:
    v = ctx.api_version
    R = WriteTxnMarkersResponse.WritableTxnMarkerResult
    T = R.WritableTxnMarkerTopicResult
    P = T.WritableTxnMarkerPartitionResult
    results = []
    allowed = ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)
    for m in request.markers:
        if not allowed:
            results.append(R(version=v, producer_id=m.producer_id, topics=[T(version=v, name=t.name, partitions=[
                P(version=v, partition_index=p, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                for p in t.partition_indexes]) for t in m.topics]))
            continue
        entry = TxnMarkerEntry(m.producer_id, m.producer_epoch, m.transaction_result, m.coordinator_epoch,
                               {t.name: list(t.partition_indexes) for t in m.topics},
                               transaction_version=m.transaction_version if v >= 2 else 0)
        codes = await write_markers_locally(ctx.broker, [entry])
        topics = [T(version=v, name=t.name, partitions=[
            P(version=v, partition_index=p, error_code=codes[(m.producer_id, t.name, p)]) for p in t.partition_indexes])
            for t in m.topics]
        results.append(R(version=v, producer_id=m.producer_id, topics=topics))
    return WriteTxnMarkersResponse(version=v, markers=results)
