"""OffsetForLeaderEpoch (key 23), versions 2-4.

For each partition: the largest leader epoch <= the requested one that this leader's log knows,
and where it ends (the start offset of the next epoch, or the log end offset for the latest), as
Kafka's LeaderEpochFileCache.endOffsetFor; an epoch the log knows nothing of answers
UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET (-1, -1). Consumers use it after a leader change to
detect log truncation (KIP-320); kbroker's own followers use the Fetch diverging_epoch instead.

Only the leader answers (Kafka's fetchOnlyFromLeader), except for the debugging replica id -2:
NOT_LEADER_OR_FOLLOWER otherwise, UNKNOWN_TOPIC_OR_PARTITION for a partition the cluster lacks,
FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH for a current_leader_epoch below / above this leader's.

ACLs (as KafkaApis): CLUSTER_ACTION on the cluster allows every topic; otherwise DESCRIBE on each
topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED.

Versions 0-1 are not served (kafka-python's schema starts at 2, as Kafka 4.0's does).
"""

from __future__ import annotations

from kafka.protocol.consumer import OffsetForLeaderEpochResponse

from broker.handlers import AclOperation, RequestContext, ResourceType, api
from protocol.errors import ErrorCode

TopicResult = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
EpochEndOffset = TopicResult.EpochEndOffset

UNDEFINED = -1
DEBUGGING_REPLICA_ID = -2


def _answer(ctx: RequestContext, topic: str, p, debugging: bool) -> tuple[ErrorCode, int, int]:
    rm = ctx.partitions
    part, code = rm.get_leader(topic, p.partition)
    if part is None and debugging and code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
        part = rm.get(topic, p.partition)
    if part is None:
        return code, UNDEFINED, UNDEFINED
    current = p.current_leader_epoch
    if current >= 0 and current != part.leader_epoch:
        return (ErrorCode.FENCED_LEADER_EPOCH if current < part.leader_epoch else ErrorCode.UNKNOWN_LEADER_EPOCH,
                UNDEFINED, UNDEFINED)
    epoch, end = part.log.end_offset_for_epoch(p.leader_epoch)
    if end == UNDEFINED:
        return ErrorCode.NONE, UNDEFINED, UNDEFINED
    return ErrorCode.NONE, epoch, end


@api(23, 2, 4)
async def handle_offsets_for_leader_epoch(ctx: RequestContext, request) -> OffsetForLeaderEpochResponse:
    v = ctx.api_version
    replica_id = request.replica_id if v >= 3 else -1
    debugging = replica_id == DEBUGGING_REPLICA_ID
    names = [t.topic for t in request.topics]
    allowed = (set(names) if ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)
               else ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, names))
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            if t.topic in allowed:
                code, epoch, end = _answer(ctx, t.topic, p, debugging)
            else:
                code, epoch, end = ErrorCode.TOPIC_AUTHORIZATION_FAILED, UNDEFINED, UNDEFINED
            parts.append(EpochEndOffset(version=v, error_code=code, partition=p.partition, leader_epoch=epoch,
                                        end_offset=end))
        topics.append(TopicResult(version=v, topic=t.topic, partitions=parts))
    return OffsetForLeaderEpochResponse(version=v, throttle_time_ms=0, topics=topics)
