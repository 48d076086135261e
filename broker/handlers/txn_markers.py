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
offsets committed in that transaction (broker/txn_marker_writer.py, which the coordinator also
calls for the partitions this broker leads).
Cluster mode: only the partition's leader writes markers (NOT_LEADER_OR_FOLLOWER elsewhere), and
answers once the ISR has them (acks=all; NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT or
NOT_LEADER_OR_FOLLOWER otherwise, which the coordinator retries).

ACLs (as KafkaApis): CLUSTER_ACTION on the cluster, else every partition answers
CLUSTER_AUTHORIZATION_FAILED and nothing is written.
"""

from __future__ import annotations

from kafka.protocol.producer import WriteTxnMarkersResponse

from broker.handlers import AclOperation, RequestContext, api
from coordinator.partition_access import TxnMarkerEntry
from protocol.errors import ErrorCode


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
        codes = await ctx.services.markers.write_all([entry])
        topics = [T(version=v, name=t.name, partitions=[
            P(version=v, partition_index=p, error_code=codes[(m.producer_id, t.name, p)]) for p in t.partition_indexes])
            for t in m.topics]
        results.append(R(version=v, producer_id=m.producer_id, topics=topics))
    return WriteTxnMarkersResponse(version=v, markers=results)
