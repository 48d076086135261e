"""Metadata (key 3), versions 0-12.

Returns the brokers, cluster id, controller and, per topic, its id (v10+), partitions, leader,
leader epoch, replicas and ISR from the MetadataStore. ``topics`` null (v1+) or empty (v0) means
every topic. Missing topics are auto-created when the request allows it (v4+) and
``auto.create.topics.enable`` is true, with ``num.partitions`` partitions; unlike Kafka, which
answers LEADER_NOT_AVAILABLE until the new leader is elected, kbroker creates synchronously and
answers with the topic ready. Cluster mode: every live broker, the controller id, replicas, ISR,
offline replicas (on brokers without a live registration) and leader epochs from the etcd store; a
partition without a leader answers LEADER_NOT_AVAILABLE with leader -1. Authorized operations (v8+ topics, v8-10 cluster) are answered when
asked, from broker/authorized_operations.py, for every topic entry that has a name (errors included,
as KafkaApis does); otherwise Kafka's "not requested" value.

ACLs (as KafkaApis): a request for every topic lists only the topics the principal may DESCRIBE;
a named topic (or topic id) it may not DESCRIBE answers TOPIC_AUTHORIZATION_FAILED; auto-creation
needs CREATE on the cluster or on the topic (TOPIC_AUTHORIZATION_FAILED otherwise).
"""

from __future__ import annotations

from kafka.protocol.metadata import MetadataResponse

from broker.authorized_operations import (
    AclOperation,
    ResourceType,
    as_bitfield,
    authorized_operations,
    cluster_authorized_operations,
)
from broker.handlers import RequestContext, api
from cluster.metadata_store import TopicInfo, validate_topic_name
from protocol.errors import ErrorCode, KafkaError

AUTHORIZED_OPERATIONS_OMITTED = None  # kafka-python "bitfield": encodes as Kafka's INT32_MIN "not requested"

Topic = MetadataResponse.MetadataResponseTopic
PartitionMeta = Topic.MetadataResponsePartition


def topic_metadata(ctx: RequestContext, info: TopicInfo, version: int) -> Topic:
    md = ctx.metadata
    parts = []
    for p in range(info.num_partitions):
        replicas = md.replicas(info.name, p)
        leader = md.leader(info.name, p)
        # Cluster mode: a partition without a live leader is LEADER_NOT_AVAILABLE, as Kafka answers.
        parts.append(PartitionMeta(version=version, error_code=ErrorCode.LEADER_NOT_AVAILABLE if leader < 0 else 0,
                                   partition_index=p, leader_id=leader,
                                   leader_epoch=md.leader_epoch(info.name, p), replica_nodes=replicas,
                                   isr_nodes=md.isr(info.name, p), offline_replicas=md.offline_replicas(info.name, p)))
    return Topic(version=version, error_code=0, name=info.name, topic_id=info.topic_id, is_internal=info.internal,
                 partitions=parts, authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)


def error_topic(name: str | None, code: ErrorCode, version: int, topic_id=None) -> Topic:
    return Topic(version=version, error_code=code, name=name, topic_id=topic_id, is_internal=False, partitions=[],
                 authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)


@api(3, 0, 12)
async def handle_metadata(ctx: RequestContext, request) -> MetadataResponse:
    v = ctx.api_version
    md = ctx.metadata
    topics: list[Topic] = []
    requested = request.topics
    if requested is None or (v == 0 and not requested):
        visible = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, md.topics())
        topics = [topic_metadata(ctx, info, v) for info in md.topics().values() if info.name in visible]
    else:
        allow_auto = (request.allow_auto_topic_creation if v >= 4 else True) and ctx.config.auto_create_topics_enable
        for t in requested:
            name = t.name
            if name is None and getattr(t, "topic_id", None) is not None:
                info = md.get_topic_by_id(t.topic_id)
                if info is not None and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, info.name):
                    topics.append(error_topic(None, ErrorCode.TOPIC_AUTHORIZATION_FAILED, v, t.topic_id))
                    continue
                topics.append(topic_metadata(ctx, info, v) if info else
                              error_topic(None, ErrorCode.UNKNOWN_TOPIC_ID, v, t.topic_id))
                continue
            if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                topics.append(error_topic(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, v))
                continue
            info = md.get_topic(name)
            if info is None:
                try:
                    validate_topic_name(name)
                except KafkaError as e:
                    topics.append(error_topic(name, e.code, v))
                    continue
                if allow_auto and not name.startswith("__"):
                    if not (ctx.authorize_cluster(AclOperation.CREATE)
                            or ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, name)):
                        topics.append(error_topic(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, v))
                        continue
                    try:
                        md.check_collision(name)
                        info = await ctx.services.topics.create_topic(name, ctx.config.num_partitions, {})
                    except KafkaError as e:
                        if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                            topics.append(error_topic(name, e.code, v))
                            continue
                        info = md.get_topic(name)
            if info is None:
                topics.append(error_topic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, v))
            else:
                topics.append(topic_metadata(ctx, info, v))
    if v >= 8 and request.include_topic_authorized_operations:
        for t in topics:
            if t.name is not None:  # unknown topic ids have no name to authorize (KafkaApis skips them too)
                t.authorized_operations = as_bitfield(authorized_operations(ctx, ResourceType.TOPIC, t.name))
    cluster_ops = AUTHORIZED_OPERATIONS_OMITTED
    if 8 <= v <= 10 and request.include_cluster_authorized_operations:
        cluster_ops = as_bitfield(cluster_authorized_operations(ctx))
    brokers = [MetadataResponse.MetadataResponseBroker(version=v, node_id=node, host=host, port=port, rack=rack)
               for node, host, port, rack in ctx.broker_addresses()]
    return MetadataResponse(version=v, throttle_time_ms=0, brokers=brokers, cluster_id=md.cluster_id,
                            controller_id=md.controller_id, topics=topics,
                            authorized_operations=cluster_ops, error_code=0)
