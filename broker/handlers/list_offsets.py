"""ListOffsets (key 2), versions 1-10.

Special timestamps: -1 latest (high watermark; last stable offset for read_committed),
-2 earliest (log start offset), -3 max timestamp (v7+), -4 earliest local (= earliest: no
tiered storage), -5 latest tiered (no tiered storage: offset -1). A timestamp >= 0 finds the
first record with a timestamp >= it; none -> offset -1, timestamp -1. Lookups never reveal
offsets at or above the last stable offset for read_committed (or the high watermark).
The returned leader epoch is the epoch that wrote the offset, from the leader-epoch cache.
Cluster mode: NOT_LEADER_OR_FOLLOWER for a partition this broker does not lead (or while fenced);
a new leader whose high watermark has not yet reached the start offset of its epoch answers
LATEST with OFFSET_NOT_AVAILABLE (retriable) until its followers' fetches move it there, as
Kafka's Partition.fetchOffsetForTimestamp.

MAX_TIMESTAMP and timestamp lookups decode the records of the batch that holds the answer. A log
may hold batches stored before produce validated records (see `kbroker dump-log --deep-verify`);
when that batch cannot be decoded, the answer is best effort at batch granularity, with one WARN
line and never a traceback: MAX_TIMESTAMP answers the offset the segment recorded for its max
timestamp (the last offset of its batch), a timestamp lookup the base offset and max timestamp of
the first batch whose max timestamp reaches the target.

ACLs (as KafkaApis): DESCRIBE on each topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import logging

from kafka.protocol.consumer import ListOffsetsResponse

from broker.handlers import AclOperation, RequestContext, ResourceType, api
from protocol.errors import ErrorCode

TopicResp = ListOffsetsResponse.ListOffsetsTopicResponse
PartResp = TopicResp.ListOffsetsPartitionResponse

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5

log = logging.getLogger("broker.handlers.list_offsets")


def epoch_for_offset(entries: list[tuple[int, int]], offset: int, default: int) -> int:
    epoch = -1
    for e, start in entries:
        if start <= offset:
            epoch = e
        else:
            break
    return epoch if epoch >= 0 else default


def lookup(part, timestamp: int, isolation: int) -> tuple[int, int]:
    """(offset, timestamp) for one partition."""
    lg = part.log
    upper = part.last_stable_offset if isolation == 1 else part.high_watermark
    if timestamp == LATEST:
        return upper, -1
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return lg.log_start_offset, -1
    if timestamp == LATEST_TIERED:
        return -1, -1
    if timestamp == MAX_TIMESTAMP:
        found = _latest_timestamp(part)
        if found is None:
            return -1, -1
        ts, off = found
    elif timestamp >= 0:
        found = _offset_for_timestamp(part, timestamp)
        if found is None:
            return -1, -1
        off, ts = found
    else:
        return -1, -1
    if off >= upper:
        return -1, -1
    return off, ts


def _latest_timestamp(part) -> tuple[int, int] | None:
    """Log.latest_timestamp, falling back to the segment's own (timestamp, offset) when the batch
    holding the max timestamp cannot be decoded (data stored before produce validated records)."""
    lg = part.log
    try:
        return lg.latest_timestamp()
    except Exception as e:  # whatever the codec or record decoder raises on undecodable bytes
        best = None
        for seg in lg.segments:
            if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        log.warning("ListOffsets MAX_TIMESTAMP on %s-%d: undecodable batch near offset %s (%s: %s); answering "
                    "the segment's max timestamp offset (see kbroker dump-log --deep-verify)", part.topic,
                    part.index, None if best is None else best.offset_of_max_timestamp, type(e).__name__, e)
        return None if best is None else (best.max_timestamp, best.offset_of_max_timestamp)


def _offset_for_timestamp(part, timestamp: int) -> tuple[int, int] | None:
    """Log.offset_for_timestamp, falling back to batch granularity when a batch cannot be decoded."""
    lg = part.log
    try:
        return lg.offset_for_timestamp(timestamp)
    except Exception as e:  # undecodable records, as in _latest_timestamp
        log.warning("ListOffsets timestamp %d on %s-%d: undecodable batch (%s: %s); answering at batch "
                    "granularity (see kbroker dump-log --deep-verify)", timestamp, part.topic, part.index,
                    type(e).__name__, e)
    start = lg.log_start_offset
    for seg in list(lg.segments):
        if seg.max_timestamp < timestamp:
            continue
        for h, _ in seg.iter_from(max(seg.time_index.lookup(timestamp)[1], start)):
            if h.max_timestamp >= timestamp and h.last_offset >= start:
                return max(h.base_offset, start), h.max_timestamp
    return None


def _high_watermark_unknown(part) -> bool:
    ls = part.leader_state
    return ls is not None and ls.epoch_start_offset > part.high_watermark


@api(2, 1, 10)
async def handle_list_offsets(ctx: RequestContext, request) -> ListOffsetsResponse:
    v = ctx.api_version
    rm = ctx.partitions
    isolation = request.isolation_level if v >= 2 else 0
    topics = []
    described = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in request.topics))
    for t in request.topics:
        parts = []
        for p in t.partitions:
            part, missing = (rm.get_leader(t.name, p.partition_index) if t.name in described
                             else (None, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            code, off, ts, epoch = ErrorCode.NONE, -1, -1, -1
            if part is None:
                code = missing
            elif v >= 4 and p.current_leader_epoch >= 0 and p.current_leader_epoch != part.leader_epoch:
                code = (ErrorCode.FENCED_LEADER_EPOCH if p.current_leader_epoch < part.leader_epoch
                        else ErrorCode.UNKNOWN_LEADER_EPOCH)
            elif p.timestamp == MAX_TIMESTAMP and v < 7:
                code = ErrorCode.UNSUPPORTED_VERSION
            elif p.timestamp == LATEST and _high_watermark_unknown(part):
                code = ErrorCode.OFFSET_NOT_AVAILABLE
            else:
                off, ts = lookup(part, p.timestamp, isolation)
                if off >= 0:
                    epoch = epoch_for_offset(part.log.leader_epoch_entries, off, part.leader_epoch)
            parts.append(PartResp(version=v, partition_index=p.partition_index, error_code=code, timestamp=ts,
                                  offset=off, leader_epoch=epoch))
        topics.append(TopicResp(version=v, name=t.name, partitions=parts))
    return ListOffsetsResponse(version=v, throttle_time_ms=0, topics=topics)
