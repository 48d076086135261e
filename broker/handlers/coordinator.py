"""FindCoordinator (key 10), versions 0-6.

Key type 0 (GROUP) maps to partition hash(group.id) of ``__consumer_offsets``, key type 1
(TRANSACTION) to partition hash(transactional.id) of ``__transaction_state``, key type 2 (SHARE,
KIP-932, v6) with key ``group:topicId:partition`` to its partition of ``__share_group_state``
(Kafka's Utils.abs(String.hashCode) % partitions); the coordinator is that partition's leader. The
internal topic is created on the first lookup, as in Kafka. v4+ batches several keys. While a
coordinator partition is still loading the answer is COORDINATOR_NOT_AVAILABLE; an unknown key
type, or a SHARE key that is not ``group:topicId:partition``, gets INVALID_REQUEST.
Cluster mode (issue 15): every broker answers the leader of the key's partition
(COORDINATOR_NOT_AVAILABLE while it has none); that broker's coordinator loaded the partition when
it became its leader and answers COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR itself. The
internal topics are created with offsets.topic.replication.factor /
transaction.state.log.replication.factor replicas (default 3): with fewer live brokers the
creation fails and FindCoordinator answers COORDINATOR_NOT_AVAILABLE until enough registered.

ACLs (as KafkaApis): DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED) or on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), CLUSTER_ACTION on the cluster for SHARE keys
(CLUSTER_AUTHORIZATION_FAILED: brokers ask), per key, before anything else is looked at.
"""

from __future__ import annotations

from kafka.protocol.metadata import FindCoordinatorResponse

from broker.handlers import AclOperation, RequestContext, ResourceType, api
from protocol.errors import ErrorCode, KafkaError

GROUP, TRANSACTION, SHARE = 0, 1, 2


def _valid_share_key(key: str | None) -> bool:
    """Kafka's SharePartitionKey.validate: ``group:topicId:partition``."""
    if not key:
        return False
    parts = key.rsplit(":", 2)
    if len(parts) != 3 or not parts[0] or len(parts[1]) != 22:
        return False
    try:
        return int(parts[2]) >= 0
    except ValueError:
        return False


async def locate(ctx: RequestContext, key: str | None, key_type: int) -> tuple[int, int, str, int, str | None]:
    """(error_code, node_id, host, port, error_message) for one coordinator key."""
    share = ctx.services.share
    coord = {GROUP: ctx.services.group_coordinator, TRANSACTION: ctx.services.txn_coordinator,
             SHARE: share.coordinator if share is not None else None}.get(key_type)
    if key_type not in (GROUP, TRANSACTION, SHARE) or (key_type == SHARE and ctx.api_version < 6):
        return ErrorCode.INVALID_REQUEST, -1, "", -1, f"Unsupported key type {key_type}"
    if key_type == SHARE:
        if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, -1, "", -1, None
        if not _valid_share_key(key):
            return ErrorCode.INVALID_REQUEST, -1, "", -1, f"Invalid share coordinator key {key!r}"
    if key_type == GROUP and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, key or ""):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, -1, "", -1, None
    if key_type == TRANSACTION and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key or ""):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, "", -1, None
    if coord is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1, "coordinator not available"
    if key is None or (key_type == TRANSACTION and key == ""):
        return ErrorCode.INVALID_REQUEST, -1, "", -1, "coordinator key must be non-empty"
    try:
        await coord.ensure_topic()
    except KafkaError as e:
        if e.code == ErrorCode.INVALID_REPLICATION_FACTOR:  # too few brokers yet (Kafka: not available)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1, e.message
        return e.code, -1, "", -1, e.message
    partition = coord.partition_for(key)
    leader = ctx.metadata.leader(coord.topic, partition)
    if not ctx.services.clustered and not coord.is_loaded(partition):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1, "coordinator is loading"
    for node, host, port, _rack in ctx.broker_addresses():  # the address on the client's listener
        if node == leader:
            return ErrorCode.NONE, node, host, port, None
    return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1, "coordinator leader unknown"


@api(10, 0, 6)
async def handle_find_coordinator(ctx: RequestContext, request) -> FindCoordinatorResponse:
    v = ctx.api_version
    key_type = request.key_type if v >= 1 else GROUP
    if v >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            code, node, host, port, msg = await locate(ctx, key, key_type)
            coordinators.append(FindCoordinatorResponse.Coordinator(
                version=v, key=key, node_id=node, host=host, port=port, error_code=code, error_message=msg))
        return FindCoordinatorResponse(version=v, throttle_time_ms=0, coordinators=coordinators)
    code, node, host, port, msg = await locate(ctx, request.key, key_type)
    return FindCoordinatorResponse(version=v, throttle_time_ms=0, error_code=code, error_message=msg, node_id=node,
                                   host=host, port=port)
