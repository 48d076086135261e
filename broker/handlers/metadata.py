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

The response is encoded from plain tuples by protocol.fast_codecs.encode_metadata_response: a
Metadata request for every topic of a broker holding ten thousand partitions costs milliseconds.
"""

from __future__ import annotations

from broker.authorized_operations import (
    OMITTED,
    AclOperation,
    ResourceType,
    authorized_operations,
    cluster_authorized_operations,
)
from broker.handlers import RawResponse, RequestContext, api
from cluster.metadata_store import TopicInfo, validate_topic_name
from protocol.errors import ErrorCode, KafkaError
from protocol.fast_codecs import MetadataPartitionOut, MetadataTopicOut, encode_metadata_response


def topic_metadata(ctx: RequestContext, info: TopicInfo) -> MetadataTopicOut:
    md = ctx.metadata
    name = info.name
    parts: list[MetadataPartitionOut] = []
    for p in range(info.num_partitions):
        leader = md.leader(name, p)
        # Cluster mode: a partition without a live leader is LEADER_NOT_AVAILABLE, as Kafka answers.
        parts.append((ErrorCode.LEADER_NOT_AVAILABLE if leader < 0 else 0, p, leader, md.leader_epoch(name, p),
                      md.replicas(name, p), md.isr(name, p), md.offline_replicas(name, p)))
    return (0, name, info.topic_id, info.internal, parts, OMITTED)


def error_topic(name: str | None, code: ErrorCode, topic_id=None) -> MetadataTopicOut:
    return (code, name, topic_id, False, [], OMITTED)


@api(3, 0, 12)
async def handle_metadata(ctx: RequestContext, request) -> RawResponse:
    v = ctx.api_version
    md = ctx.metadata
    topics: list[MetadataTopicOut] = []
    requested = request.topics
    if requested is None or (v == 0 and not requested):
        visible = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, md.topics())
        topics = [topic_metadata(ctx, info) for info in md.topics().values() if info.name in visible]
    else:
        allow_auto = (request.allow_auto_topic_creation if v >= 4 else True) and ctx.config.auto_create_topics_enable
        for t in requested:
            name = t.name
            if name is None and getattr(t, "topic_id", None) is not None:
                info = md.get_topic_by_id(t.topic_id)
                if info is not None and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, info.name):
                    topics.append(error_topic(None, ErrorCode.TOPIC_AUTHORIZATION_FAILED, t.topic_id))
                    continue
                topics.append(topic_metadata(ctx, info) if info else
                              error_topic(None, ErrorCode.UNKNOWN_TOPIC_ID, t.topic_id))
                continue
            if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                topics.append(error_topic(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            info = md.get_topic(name)
            if info is None:
                try:
                    validate_topic_name(name)
                except KafkaError as e:
                    topics.append(error_topic(name, e.code))
                    continue
                if allow_auto and not name.startswith("__"):
                    if not (ctx.authorize_cluster(AclOperation.CREATE)
                            or ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, name)):
                        topics.append(error_topic(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                        continue
                    try:
                        md.check_collision(name)
                        info = await ctx.services.topics.create_topic(name, ctx.config.num_partitions, {})
                    except KafkaError as e:
                        if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                            topics.append(error_topic(name, e.code))
                            continue
                        info = md.get_topic(name)
            if info is None:
                topics.append(error_topic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            else:
                topics.append(topic_metadata(ctx, info))
    if v >= 8 and request.include_topic_authorized_operations:
        # Unknown topic ids have no name to authorize (KafkaApis skips them too).
        topics = [t if t[1] is None else (*t[:5], authorized_operations(ctx, ResourceType.TOPIC, t[1]))
                  for t in topics]
    cluster_ops = OMITTED
    if 8 <= v <= 10 and request.include_cluster_authorized_operations:
        cluster_ops = cluster_authorized_operations(ctx)
    return RawResponse([encode_metadata_response(v, ctx.broker_addresses(), md.cluster_id, md.controller_id,
                                                 topics, cluster_ops)])
