"""DeleteRecords (key 21), versions 0-2.

Moves a partition's log start offset forward to the requested offset (-1 = the high
watermark) and deletes whole segments below it. An offset above the high watermark ->
OFFSET_OUT_OF_RANGE, as in Kafka. ACLs (as KafkaApis): DELETE on each topic, else its partitions
answer TOPIC_AUTHORIZATION_FAILED.

Replicated partitions (cluster mode), as Kafka's DelayedDeleteRecords: the answer waits until the
low watermark, the smallest log start offset over the leader and its followers on live brokers
(Partition.lowWatermarkIfLeader), has reached the requested offset, so every live replica has
dropped the records when the request is answered. Followers learn the new log start from their next
fetch answer (their parked fetches are woken) and report theirs in the fetch after. Past the
request's ``timeout_ms``: REQUEST_TIMED_OUT; leadership lost meanwhile: NOT_LEADER_OR_FOLLOWER. The
low watermark returned is the one reached (single node: the new log start offset).
"""

from __future__ import annotations

import asyncio
import time

from kafka.protocol.admin import DeleteRecordsResponse

from broker.handlers import AclOperation, RequestContext, ResourceType, api
from broker.partition import Partition
from protocol.errors import ErrorCode

TopicRes = DeleteRecordsResponse.DeleteRecordsTopicResult
PartRes = TopicRes.DeleteRecordsPartitionResult

# How often a pending DeleteRecords looks at its partitions' low watermarks again (followers
# report their log start with each fetch; an admin request can afford a short poll).
_POLL_S = 0.01


@api(21, 0, 2)
async def handle_delete_records(ctx: RequestContext, request) -> DeleteRecordsResponse:
    v = ctx.api_version
    rm = ctx.partitions
    deletable = ctx.authorized(AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in request.topics))
    results: dict[tuple[str, int], list] = {}  # (topic, partition) -> [code, low watermark]
    pending: dict[tuple[str, int], tuple[Partition, int]] = {}  # waiting for the followers
    for t in request.topics:
        for p in t.partitions:
            key = (t.name, p.partition_index)
            part, missing = (rm.get_leader(t.name, p.partition_index) if t.name in deletable
                             else (None, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            code, low = ErrorCode.NONE, -1
            if part is None:
                code = missing
            else:
                target = part.high_watermark if p.offset == -1 else p.offset
                if target < 0 or target > part.high_watermark:
                    code = ErrorCode.OFFSET_OUT_OF_RANGE
                else:
                    low = part.log.delete_records_before(target) if target > part.log.log_start_offset \
                        else part.log.log_start_offset
                    if part.leader_state is not None:
                        part.wake_waiters()  # followers' parked fetches: tell them the new log start
                        low = _low_watermark(ctx, part)
                        if low < target:
                            pending[key] = (part, target)
            results[key] = [code, low]
    if pending:
        await _wait_for_followers(ctx, request.timeout_ms, pending, results)
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            code, low = results[(t.name, p.partition_index)]
            parts.append(PartRes(version=v, partition_index=p.partition_index, low_watermark=low, error_code=code))
        topics.append(TopicRes(version=v, name=t.name, partitions=parts))
    return DeleteRecordsResponse(version=v, throttle_time_ms=0, topics=topics)


def _low_watermark(ctx: RequestContext, part: Partition) -> int:
    ls = part.leader_state
    if ls is None:
        return part.log.log_start_offset
    alive = (b.node_id for b in ctx.metadata.brokers())
    return ls.low_watermark(part.log.log_start_offset, alive)


async def _wait_for_followers(ctx: RequestContext, timeout_ms: int, pending: dict[tuple[str, int], tuple[Partition, int]],
                              results: dict[tuple[str, int], list]) -> None:
    rm = ctx.partitions
    deadline = time.monotonic() + max(timeout_ms, 0) / 1000
    while pending:
        for key, (part, target) in list(pending.items()):
            if rm.get_leader(*key)[0] is not part:
                results[key] = [ErrorCode.NOT_LEADER_OR_FOLLOWER, -1]
                del pending[key]
                continue
            low = _low_watermark(ctx, part)
            results[key][1] = low
            if low >= target:
                del pending[key]
        if not pending:
            return
        if time.monotonic() >= deadline:
            for key in pending:
                results[key][0] = ErrorCode.REQUEST_TIMED_OUT
            return
        await asyncio.sleep(_POLL_S)
