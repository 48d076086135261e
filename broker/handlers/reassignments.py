"""AlterPartitionReassignments (45) v0 and ListPartitionReassignments (46) v0 (KIP-455).

Behaviour (KRaft's ReplicationControlManager, rules in cluster/reassignment.py): a partition given
target replicas gets the replica list target + (current - target), with adding = target - current
and removing = current - target; the new replicas start following, and once every target replica is
in the ISR the controller finishes it (replicas = target, ISR ∩ target, a new leader from the target
if the old one is not in it). One whose target replicas are all in the ISR already finishes at
once. Null replicas cancel: back to the original replicas. Per-partition errors:
INVALID_REPLICA_ASSIGNMENT (empty, duplicates, a broker that is not registered),
NO_REASSIGNMENT_IN_PROGRESS (cancel with none), UNKNOWN_TOPIC_OR_PARTITION. The alter needs ALTER on
the CLUSTER, the list DESCRIBE on the CLUSTER (else CLUSTER_AUTHORIZATION_FAILED at the top level,
and for every partition of an alter). The list answers every ongoing reassignment (null topics) or
those of the named partitions; unknown topics and partitions not moving are left out.

Versions: v0 of both (flexible). v1 of AlterPartitionReassignments (KIP-1101's
allow_replication_factor_change) is not served.

Deviations: Kafka forwards the alter to the controller; in cluster mode the broker that receives it
writes the topic record and the partition states itself in one etcd transaction guarded by the
revisions it decided from (re-deciding from a newer view when it lost), and answers once its view
shows the change, bounded by ``timeout_ms``. Single-node mode: the only broker is the only valid
target, so the alter accepts [this node] (nothing moves) and the list is always empty.
"""

from __future__ import annotations

from kafka.protocol.admin import AlterPartitionReassignmentsResponse, ListPartitionReassignmentsResponse

from broker.handlers import AclOperation, RequestContext, api
from cluster.reassignment import validate_target
from protocol.errors import ErrorCode, KafkaError

TopicResponse = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
PartitionResponse = TopicResponse.ReassignablePartitionResponse
OngoingTopic = ListPartitionReassignmentsResponse.OngoingTopicReassignment
OngoingPartition = OngoingTopic.OngoingPartitionReassignment


def _alter_response(v: int, outcomes: dict[str, dict[int, KafkaError | None]], error: KafkaError | None = None
                    ) -> AlterPartitionReassignmentsResponse:
    topics = [TopicResponse(version=v, name=name, partitions=[
        PartitionResponse(version=v, partition_index=p, error_code=e.code if e else 0,
                          error_message=e.message if e else None) for p, e in parts.items()])
        for name, parts in outcomes.items()]
    return AlterPartitionReassignmentsResponse(version=v, throttle_time_ms=0, error_code=error.code if error else 0,
                                               error_message=error.message if error else None, responses=topics)


def _single_node(md, node_id: int, name: str, changes: dict[int, list[int] | None]) -> dict[int, KafkaError | None]:
    info = md.get_topic(name)
    out: dict[int, KafkaError | None] = {}
    for p, target in changes.items():
        if info is None or not 0 <= p < info.num_partitions:
            out[p] = KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {name}-{p}")
        elif target is None:
            out[p] = KafkaError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"No ongoing reassignment for {name}-{p}")
        else:
            try:
                validate_target(list(target), {node_id})
                out[p] = None
            except KafkaError as e:
                out[p] = e
    return out


@api(45, 0, 0)
async def handle_alter_partition_reassignments(ctx: RequestContext, request) -> AlterPartitionReassignmentsResponse:
    v = ctx.api_version
    requested = {t.name: {p.partition_index: None if p.replicas is None else list(p.replicas) for p in t.partitions}
                 for t in request.topics}
    if not ctx.authorize_cluster(AclOperation.ALTER):
        err = KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return _alter_response(v, {name: dict.fromkeys(parts, err) for name, parts in requested.items()}, err)
    md = ctx.metadata
    alter = getattr(md, "alter_reassignments", None)
    timeout_s = max(request.timeout_ms, 0) / 1000
    outcomes: dict[str, dict[int, KafkaError | None]] = {}
    for name, changes in requested.items():
        if alter is None:
            outcomes[name] = _single_node(md, ctx.node_id, name, changes)
            continue
        try:
            outcomes[name] = await alter(name, changes, timeout_s=timeout_s)
        except KafkaError as e:
            outcomes[name] = dict.fromkeys(changes, e)
    return _alter_response(v, outcomes)


@api(46, 0, 0)
async def handle_list_partition_reassignments(ctx: RequestContext, request) -> ListPartitionReassignmentsResponse:
    v = ctx.api_version
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return ListPartitionReassignmentsResponse(version=v, throttle_time_ms=0,
                                                  error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                  error_message=None, topics=[])
    listing = getattr(ctx.metadata, "reassignments", None)
    ongoing = listing() if listing is not None else {}
    if request.topics is not None:
        wanted = {(t.name, p) for t in request.topics for p in t.partition_indexes}
        ongoing = {k: r for k, r in ongoing.items() if k in wanted}
    by_topic: dict[str, list[OngoingPartition]] = {}
    for (name, p), (replicas, moving) in sorted(ongoing.items()):
        by_topic.setdefault(name, []).append(OngoingPartition(
            version=v, partition_index=p, replicas=list(replicas), adding_replicas=list(moving.adding),
            removing_replicas=list(moving.removing)))
    return ListPartitionReassignmentsResponse(version=v, throttle_time_ms=0, error_code=0, error_message=None,
                                              topics=[OngoingTopic(version=v, name=n, partitions=ps)
                                                      for n, ps in by_topic.items()])
