"""DeleteRecords (key 21), versions 0-2.

Moves a partition's log start offset forward to the requested offset (-1 = the high
watermark) and deletes whole segments below it; the low watermark returned is the new log start
offset. An offset above the high watermark -> OFFSET_OUT_OF_RANGE, as in Kafka.
ACLs (as KafkaApis): DELETE on each topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from kafka.protocol.admin import DeleteRecordsResponse

from broker.handlers import AclOperation, RequestContext, ResourceType, api
from protocol.errors import ErrorCode

TopicRes = DeleteRecordsResponse.DeleteRecordsTopicResult
PartRes = TopicRes.DeleteRecordsPartitionResult


@api(21, 0, 2)
async def handle_delete_records(ctx: RequestContext, request) -> DeleteRecordsResponse:
    v = ctx.api_version
    rm = ctx.broker.replica_manager
    topics = []
    deletable = ctx.authorized(AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in request.topics))
    for t in request.topics:
        parts = []
        for p in t.partitions:
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
            parts.append(PartRes(version=v, partition_index=p.partition_index, low_watermark=low, error_code=code))
        topics.append(TopicRes(version=v, name=t.name, partitions=parts))
    return DeleteRecordsResponse(version=v, throttle_time_ms=0, topics=topics)
