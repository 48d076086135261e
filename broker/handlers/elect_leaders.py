"""ElectLeaders (43) v0-2: preferred (0) and unclean (1) leader elections, as kafka-leader-election asks.

Behaviour (KRaft's ReplicationControlManager.electLeaders, rules in cluster/leader_election.py): per
partition NONE (elected), ELECTION_NOT_NEEDED (the preferred replica already leads / the partition
has a leader), PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE or
UNKNOWN_TOPIC_OR_PARTITION. Null ``topic_partitions`` means every partition, and then partitions
that need no election are left out of the answer. An unknown election type fails the whole request
with INVALID_REQUEST. Needs ALTER on the CLUSTER: otherwise every requested partition (none for
"all") answers CLUSTER_AUTHORIZATION_FAILED, and v1+ also at the top level.

Versions: v0 has no election type (preferred) and no top-level error code; v2 is flexible.

Deviations: Kafka forwards the request to the controller; in cluster mode the broker that receives
it writes the new partition states itself, each by compare-and-swap on the partition key's revision
(as CreateTopics), and answers once its own metadata view shows them, bounded by ``timeout_ms``
(REQUEST_TIMED_OUT after). A partition that changed between the decision and the swap answers
PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE (retriable by asking again) instead
of being decided again. Single-node mode: every partition has one replica that leads it, so each
existing partition answers ELECTION_NOT_NEEDED.
"""

from __future__ import annotations

from collections import defaultdict

from kafka.protocol.admin import ElectLeadersResponse

from broker.handlers import AclOperation, RequestContext, api
from protocol.errors import ErrorCode, KafkaError

ReplicaElectionResult = ElectLeadersResponse.ReplicaElectionResult
PartitionResult = ReplicaElectionResult.PartitionResult
ELECTION_TYPES = (0, 1)  # PREFERRED, UNCLEAN


def _requested(request) -> list[tuple[str, int]] | None:
    if request.topic_partitions is None:
        return None
    return [(t.topic, p) for t in request.topic_partitions for p in t.partitions]


def _response(v: int, outcomes: dict[tuple[str, int], KafkaError | None], error: ErrorCode = ErrorCode.NONE
              ) -> ElectLeadersResponse:
    by_topic: dict[str, list[PartitionResult]] = defaultdict(list)
    for (topic, p), err in outcomes.items():
        by_topic[topic].append(PartitionResult(version=v, partition_id=p, error_code=err.code if err else 0,
                                               error_message=err.message if err else None))
    results = [ReplicaElectionResult(version=v, topic=t, partition_result=parts) for t, parts in by_topic.items()]
    kw = {"error_code": error} if v >= 1 else {}
    return ElectLeadersResponse(version=v, throttle_time_ms=0, replica_election_results=results, **kw)


def _failed(v: int, wanted: list[tuple[str, int]] | None, code: ErrorCode, message: str | None = None
            ) -> ElectLeadersResponse:
    err = KafkaError(code, message)
    return _response(v, {tp: err for tp in wanted or ()}, code)


@api(43, 0, 2)
async def handle_elect_leaders(ctx: RequestContext, request) -> ElectLeadersResponse:
    v = ctx.api_version
    wanted = _requested(request)
    if not ctx.authorize_cluster(AclOperation.ALTER):
        return _failed(v, wanted, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    election_type = request.election_type if v >= 1 else 0
    if election_type not in ELECTION_TYPES:
        return _failed(v, wanted, ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}")
    md = ctx.metadata
    elect = getattr(md, "elect_leaders", None)
    if elect is not None:  # cluster mode (cluster/etcd_store.py)
        outcomes = await elect(wanted, election_type, timeout_s=max(request.timeout_ms, 0) / 1000)
        return _response(v, outcomes)
    outcomes: dict[tuple[str, int], KafkaError | None] = {}
    for topic, p in wanted or ():
        info = md.get_topic(topic)
        if info is None or not 0 <= p < info.num_partitions:
            outcomes[(topic, p)] = KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic}-{p}")
        else:
            outcomes[(topic, p)] = KafkaError(ErrorCode.ELECTION_NOT_NEEDED)
    return _response(v, outcomes)
