"""CreateTopics (19) v2-7, DeleteTopics (20) v1-6, CreatePartitions (37) v0-3.

Behaviour follows Kafka: per-topic results; invalid names -> INVALID_TOPIC_EXCEPTION; names
that collide on '.'/'_' -> INVALID_TOPIC_EXCEPTION; existing -> TOPIC_ALREADY_EXISTS;
num_partitions -1 means ``num.partitions``; zero or other negative counts -> INVALID_PARTITIONS;
replication factor -1 means the default, anything above the live broker count ->
INVALID_REPLICATION_FACTOR; bad configs -> INVALID_CONFIG; ``validate_only`` checks without
creating. Manual replica assignments are accepted only when they name this broker. Internal
topics cannot be deleted by clients. CreatePartitions can only grow a topic.
"""

from __future__ import annotations

from kafka.protocol.admin import (
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
)

from broker.config import ConfigError, describe_topic_config, validate_topic_configs
from broker.handlers import RequestContext, api
from broker.metadata import validate_topic_name
from protocol.errors import ErrorCode, KafkaError

CreatableTopicResult = CreateTopicsResponse.CreatableTopicResult


def _check_replication(ctx: RequestContext, rf: int, assignments) -> None:
    live = {b.node_id for b in ctx.broker.metadata.brokers()}
    if assignments:
        for a in assignments:
            if not a.broker_ids or any(b not in live for b in a.broker_ids):
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Replica assignment {a.broker_ids} names brokers that are not live")
        return
    if rf == -1:
        return
    if rf <= 0:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0, or -1 to use the default")
    if rf > len(live):
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"Unable to replicate the partition {rf} time(s): The target replication factor of {rf} "
                         f"cannot be reached because only {len(live)} broker(s) are registered.")


@api(19, 2, 7)
async def handle_create_topics(ctx: RequestContext, request) -> CreateTopicsResponse:
    v = ctx.api_version
    broker = ctx.broker
    md = broker.metadata
    results = []
    seen: set[str] = set()
    for t in request.topics:
        res = CreatableTopicResult(version=v, name=t.name, topic_id=None, error_code=0, error_message=None,
                                   num_partitions=-1, replication_factor=-1, configs=None)
        try:
            if t.name in seen:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Create topics request from client contains a duplicate topic: {t.name}")
            seen.add(t.name)
            validate_topic_name(t.name)
            if md.get_topic(t.name) is not None:
                raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists.")
            md.check_collision(t.name)
            if t.assignments and (t.num_partitions != -1 or t.replication_factor != -1):
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 "Both numPartitions or replicationFactor and replicasAssignments were set.")
            n = len(t.assignments) if t.assignments else t.num_partitions
            if n == -1:
                n = broker.config.num_partitions
            if n <= 0:
                raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
            _check_replication(ctx, t.replication_factor, t.assignments)
            configs = {c.name: c.value for c in (t.configs or [])}
            try:
                validate_topic_configs(configs)
            except ConfigError as e:
                raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
            res.num_partitions = n
            res.replication_factor = 1
            if not request.validate_only:
                info = await broker.create_topic(t.name, n, configs)
                res.topic_id = info.topic_id
            if v >= 5:
                res.configs = [
                    CreatableTopicResult.CreatableTopicConfigs(
                        version=v, name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                        is_sensitive=e.sensitive)
                    for e in describe_topic_config(configs, broker.config)
                ]
        except KafkaError as e:
            res.error_code = e.code
            res.error_message = e.message
            res.num_partitions = -1
            res.replication_factor = -1
        results.append(res)
    return CreateTopicsResponse(version=v, throttle_time_ms=0, topics=results)


@api(20, 1, 6)
async def handle_delete_topics(ctx: RequestContext, request) -> DeleteTopicsResponse:
    v = ctx.api_version
    md = ctx.broker.metadata
    if v >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    results = []
    for name, topic_id in wanted:
        res = DeleteTopicsResponse.DeletableTopicResult(version=v, name=name, topic_id=topic_id, error_code=0,
                                                        error_message=None)
        try:
            if name is None and topic_id is not None:
                info = md.get_topic_by_id(topic_id)
                if info is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID)
            else:
                info = md.get_topic(name) if name else None
                if info is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                     "This server does not host this topic-partition.")
            if not ctx.broker.config.get("delete.topic.enable"):
                raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
            if info.internal:
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Internal topics cannot be deleted")
            res.name, res.topic_id = info.name, info.topic_id
            await md.delete_topic(info.name)
        except KafkaError as e:
            res.error_code = e.code
            res.error_message = e.message
        results.append(res)
    return DeleteTopicsResponse(version=v, throttle_time_ms=0, responses=results)


@api(37, 0, 3)
async def handle_create_partitions(ctx: RequestContext, request) -> CreatePartitionsResponse:
    v = ctx.api_version
    md = ctx.broker.metadata
    results = []
    for t in request.topics:
        code, msg = ErrorCode.NONE, None
        try:
            info = md.check_partition_increase(t.name, t.count)
            if t.assignments is not None:
                if len(t.assignments) != t.count - info.num_partitions:
                    raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                     f"Increasing the number of partitions by {t.count - info.num_partitions} but "
                                     f"{len(t.assignments)} assignments provided.")
                _check_replication(ctx, -1, t.assignments)
            if not request.validate_only:
                await md.add_partitions(t.name, t.count)
        except KafkaError as e:
            code, msg = e.code, e.message
        results.append(CreatePartitionsResponse.CreatePartitionsTopicResult(version=v, name=t.name, error_code=code,
                                                                             error_message=msg))
    return CreatePartitionsResponse(version=v, throttle_time_ms=0, results=results)
