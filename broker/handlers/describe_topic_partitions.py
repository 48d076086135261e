"""DescribeTopicPartitions (key 75), version 0 (KIP-966): what Java admin clients 3.8+ use for
describeTopics, paginated.

Behaviour, as Kafka's DescribeTopicPartitionsRequestHandler and
KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse:
- ``topics`` empty means every topic; otherwise the named ones (duplicates count once). Only names
  >= the cursor's topic are considered, sorted by name.
- At most min(``response_partition_limit``, ``max.request.partition.size.limit`` = 2000) partitions
  are answered. When a topic is cut, or the next topic gets no room, ``next_cursor`` names the first
  topic/partition left out; a topic that gets no partition is not listed. The cursor's partition
  index applies to the cursor's topic only.
- A named topic that does not exist answers UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an
  illegal name) with a zero topic id, in its sorted place; with an empty list unknown topics are
  simply absent. A cursor whose topic is not in a non-empty list is an invalid request: every
  requested topic gets INVALID_REQUEST (Kafka's error response for the request).
- ``topic_authorized_operations`` is filled for every answered topic (errors included): there is no
  "include" flag in this API.

- ACLs (as Kafka): every topic needs DESCRIBE; with an empty list the others are left out, a named
  one answers TOPIC_AUTHORIZATION_FAILED in its sorted place.

Partition state (leader, leader epoch, replicas, ISR) is read from the MetadataStore, as Metadata
reads it; offline replicas are the replicas whose broker is not registered. Eligible leader
replicas and last known ELR are empty lists, as Kafka answers with ELR disabled.
"""

from __future__ import annotations

import uuid

from kafka.protocol.admin import DescribeTopicPartitionsResponse

from broker.authorized_operations import OMITTED, AclOperation, ResourceType, authorized_operations
from broker.config import ConfigError
from broker.handlers import RequestContext, api
from cluster.metadata_store import INTERNAL_TOPICS, MetadataStore, TopicInfo, validate_topic_name
from protocol.errors import ErrorCode, KafkaError

R = DescribeTopicPartitionsResponse
Topic = R.DescribeTopicPartitionsResponseTopic
Partition = Topic.DescribeTopicPartitionsResponsePartition
ZERO_UUID = uuid.UUID(int=0)
# Kafka's read-only max.request.partition.size.limit and its default.
PARTITION_LIMIT_CONFIG = "max.request.partition.size.limit"
DEFAULT_PARTITION_LIMIT = 2000


def _broker_partition_limit(ctx: RequestContext) -> int:
    # kbroker defines no such config yet: a value given in the properties file still counts.
    try:
        value = ctx.config.get(PARTITION_LIMIT_CONFIG)
    except ConfigError:
        return DEFAULT_PARTITION_LIMIT
    try:
        return int(value)
    except (TypeError, ValueError):
        return DEFAULT_PARTITION_LIMIT


def _partitions(md: MetadataStore, live: set[int], info: TopicInfo, start: int, max_count: int
                ) -> tuple[list, int]:
    """Partitions start..start+max_count-1 of the topic, and the next index left out (-1: none)."""
    upper = min(info.num_partitions, start + max_count)
    next_index = upper if upper < info.num_partitions else -1
    out = []
    for p in range(start, upper):
        if p < 0:
            continue  # a negative cursor index: Kafka finds no such partition and skips it
        replicas = md.replicas(info.name, p)
        leader = md.leader(info.name, p)
        out.append(Partition(version=0, error_code=0, partition_index=p,
                             leader_id=leader if leader in live else -1,
                             leader_epoch=md.leader_epoch(info.name, p), replica_nodes=replicas,
                             isr_nodes=md.isr(info.name, p), eligible_leader_replicas=[], last_known_elr=[],
                             offline_replicas=[r for r in replicas if r not in live]))
    return out, next_index


def _error_topic(name: str, code: int) -> Topic:
    return Topic(version=0, error_code=code, name=name, topic_id=ZERO_UUID, is_internal=name in INTERNAL_TOPICS,
                 partitions=[], topic_authorized_operations=OMITTED)


@api(75, 0, 0)
async def handle_describe_topic_partitions(ctx: RequestContext, request) -> DescribeTopicPartitionsResponse:
    md = ctx.metadata
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    fetch_all = not request.topics
    candidates = md.topics().keys() if fetch_all else {t.name for t in request.topics}
    names = sorted(n for n in candidates if n >= cursor_topic)
    described = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    if fetch_all:
        names = [n for n in names if n in described]
    if not fetch_all and cursor is not None and cursor_topic not in names:
        # Kafka throws InvalidRequestException here; the request's error response covers every topic.
        return R(version=0, throttle_time_ms=0, next_cursor=None, topics=[
            Topic(version=0, error_code=ErrorCode.INVALID_REQUEST, name=t.name, topic_id=ZERO_UUID,
                  is_internal=False, partitions=[], topic_authorized_operations=OMITTED) for t in request.topics])

    live = {b.node_id for b in md.brokers()}
    remaining = min(_broker_partition_limit(ctx), request.response_partition_limit)
    topics: list[Topic] = []
    next_cursor = None
    for name in names:
        if remaining == 0:
            # No room left: the next answer starts at this topic (which need not exist).
            next_cursor = R.Cursor(version=0, topic_name=name, partition_index=0)
            break
        if remaining < 0:
            break
        if name not in described:
            topics.append(_error_topic(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        info = md.get_topic(name)
        if info is None:
            if not fetch_all:
                try:
                    validate_topic_name(name)
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                except KafkaError as e:
                    code = e.code
                topics.append(_error_topic(name, code))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        parts, next_index = _partitions(md, live, info, start, remaining)
        topics.append(Topic(version=0, error_code=0, name=name, topic_id=info.topic_id, is_internal=info.internal,
                            partitions=parts, topic_authorized_operations=OMITTED))
        if next_index != -1:
            next_cursor = R.Cursor(version=0, topic_name=name, partition_index=next_index)
            break
        remaining -= len(parts)
    for t in topics:
        if t.error_code != ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            t.topic_authorized_operations = authorized_operations(ctx, ResourceType.TOPIC, t.name)
    return R(version=0, throttle_time_ms=0, topics=topics, next_cursor=next_cursor)
