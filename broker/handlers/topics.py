"""CreateTopics (19) v2-7, DeleteTopics (20) v1-6, CreatePartitions (37) v0-3.

Behaviour follows Kafka: per-topic results; invalid names -> INVALID_TOPIC_EXCEPTION; names
that collide on '.'/'_' -> INVALID_TOPIC_EXCEPTION; existing -> TOPIC_ALREADY_EXISTS;
num_partitions -1 means ``num.partitions``; zero or other negative counts -> INVALID_PARTITIONS;
replication factor -1 means the default, anything above the live broker count ->
INVALID_REPLICATION_FACTOR; bad configs -> INVALID_CONFIG; ``validate_only`` checks without
creating. Internal topics cannot be deleted by clients. CreatePartitions can only grow a topic.

Manual replica assignments (CreateTopics and CreatePartitions ``assignments``) are used as given,
after Kafka's controller checks (cluster/placement.py, ReplicationControlManager's messages):
INVALID_REPLICA_ASSIGNMENT for a count of CreatePartitions assignments other than the partitions
added, an empty replica list, a broker that is not registered or listed twice, a replica count other
than the topic's, every replica fenced or in controlled shutdown, a CreateTopics partition index
given twice or indexes not 0..n-1; with assignments, CreateTopics' num_partitions and
replication_factor must be -1 (INVALID_REQUEST). Nothing is created when a check fails. A single
node is a one-broker cluster: only its own id is a valid replica, and it holds every partition.

Size bounds (broker.admin_limits): as Kafka's controller, a CreateTopics asking for more than
10,000 partitions in all, or whose topics would write more than 10,000 metadata records (one per
topic, config and partition), and a CreatePartitions adding more than 10,000 partitions fail
whole, every topic with POLICY_VIOLATION (validate_only too). kbroker extension:
``kbroker.max.partitions`` refuses, per topic, creations that would take the broker past it.
Partitions are created in steps off the event loop (ReplicaManager.start_creation); the answer
is sent once they exist.

ACLs (as KafkaApis): CreateTopics needs CREATE on the cluster or on the topic, DeleteTopics DELETE
on the topic, CreatePartitions ALTER on the topic; a denied topic answers TOPIC_AUTHORIZATION_FAILED
(before existence is checked) and the others go on. CreateTopics v5+ answers the new topic's configs
only with DESCRIBE_CONFIGS on it (else topic_config_error_code TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from collections import Counter

from kafka.protocol.admin import (
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
)

from broker.admin_limits import (
    check_records,
    check_requested_partitions,
    create_topic_records,
    requested_partitions,
)
from broker.config import ConfigError, describe_topic_config, validate_topic_configs
from broker.handlers import AclOperation, RequestContext, ResourceType, api
from cluster.metadata_store import INTERNAL_TOPICS, TopicInfo, validate_topic_name
from cluster.placement import check_added_partitions_assignment, check_new_topic_assignment
from protocol.errors import ErrorCode, KafkaError

CreatableTopicResult = CreateTopicsResponse.CreatableTopicResult


def _check_replication(ctx: RequestContext, rf: int) -> None:
    live = {b.node_id for b in ctx.metadata.brokers()}
    if rf == -1:
        return
    if rf <= 0:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0, or -1 to use the default")
    if rf > len(live):
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"Unable to replicate the partition {rf} time(s): The target replication factor of {rf} "
                         f"cannot be reached because only {len(live)} broker(s) are registered.")


def _failed_request(v: int, request, error: KafkaError) -> CreateTopicsResponse:
    """Kafka's answer when the controller refuses the whole request: every topic gets the error."""
    return CreateTopicsResponse(version=v, throttle_time_ms=0, topics=[
        CreatableTopicResult(version=v, name=t.name, topic_id=None, error_code=error.code,
                             error_message=error.message, num_partitions=-1, replication_factor=-1, configs=None)
        for t in request.topics])


@api(19, 2, 7)
async def handle_create_topics(ctx: RequestContext, request) -> CreateTopicsResponse:
    v = ctx.api_version
    admin = ctx.services.topics
    md = ctx.metadata
    default_partitions = ctx.config.num_partitions
    names = Counter(t.name for t in request.topics)
    try:
        # Kafka's controller counts the requested partitions first (duplicates are dropped
        # before it sees the request), so a huge count is refused before anything else.
        check_requested_partitions(
            requested_partitions(t.num_partitions, len(t.assignments or ()), default_partitions)
            for t in request.topics if names[t.name] == 1)
    except KafkaError as e:
        return _failed_request(v, request, e)
    results = []
    by_name = {t.name: t for t in request.topics}
    planned: list[tuple[CreatableTopicResult, str, int, dict[str, str | None], dict[int, list[int]] | None]] = []
    seen: set[str] = set()
    may_create_any = ctx.authorize_cluster(AclOperation.CREATE)
    for t in request.topics:
        res = CreatableTopicResult(version=v, name=t.name, topic_id=None, error_code=0, error_message=None,
                                   num_partitions=-1, replication_factor=-1, configs=None)
        results.append(res)
        try:
            if t.name in seen:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Create topics request from client contains a duplicate topic: {t.name}")
            seen.add(t.name)
            if not (may_create_any or ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, t.name)):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            validate_topic_name(t.name)
            if md.get_topic(t.name) is not None:
                raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists.")
            md.check_collision(t.name)
            assignment = None
            if t.assignments:
                # Kafka's controller (ReplicationControlManager.createTopic): the replica lists are
                # used as given, once valid; the counts must then be left to them (-1).
                if t.replication_factor != -1:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, but "
                                                                "replication factor was not set to -1.")
                if t.num_partitions != -1:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, but "
                                                                "numPartitions was not set to -1.")
                assignment = check_new_topic_assignment(
                    [(a.partition_index, list(a.broker_ids)) for a in t.assignments],
                    {b.node_id for b in md.brokers()}, md.eligible_leaders())
            n = len(assignment) if assignment else t.num_partitions
            if n == -1:
                n = default_partitions
            if n <= 0:
                raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
            if assignment is None:
                _check_replication(ctx, t.replication_factor)
            configs = {c.name: c.value for c in (t.configs or [])}
            try:
                validate_topic_configs(configs)
            except ConfigError as e:
                raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
            planned.append((res, t.name, n, configs, assignment))
        except KafkaError as e:
            res.error_code = e.code
            res.error_message = e.message
    try:
        # Kafka's BoundedList: the records the topics that passed their checks would write, with
        # validate_only too (the controller builds the records, then discards them).
        check_records(sum(create_topic_records(n, len(configs)) for _, _, n, configs, _ in planned))
    except KafkaError as e:
        return _failed_request(v, request, e)
    created: dict[str, TopicInfo | KafkaError] = {}
    if not request.validate_only:
        # One metadata change for the whole request, as Kafka's controller writes one batch of
        # records (cluster mode places replicas; a single node holds every partition).
        created = await admin.create_topics([(name, n, configs, by_name[name].replication_factor, assignment)
                                             for _, name, n, configs, assignment in planned])
    validated = 0  # validate_only: partitions the request would add before this topic
    for res, name, n, configs, _ in planned:
        try:
            if request.validate_only:
                if name not in INTERNAL_TOPICS:
                    admin.check_partition_limit(validated + n)
                    validated += n
            else:
                info = created[name]
                if isinstance(info, KafkaError):
                    raise info
                res.topic_id = info.topic_id
            res.num_partitions = n
            res.replication_factor = len(md.replicas(name, 0)) or 1 if not request.validate_only else 1
            if v >= 5 and not ctx.authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name):
                # Kafka: created, but the configs are not shown without DESCRIBE_CONFIGS on the topic
                res.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif v >= 5:
                res.configs = [
                    CreatableTopicResult.CreatableTopicConfigs(
                        version=v, name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                        is_sensitive=e.sensitive)
                    for e in describe_topic_config(configs, ctx.config)
                ]
        except KafkaError as e:
            res.error_code = e.code
            res.error_message = e.message
    return CreateTopicsResponse(version=v, throttle_time_ms=0, topics=results)


@api(20, 1, 6)
async def handle_delete_topics(ctx: RequestContext, request) -> DeleteTopicsResponse:
    v = ctx.api_version
    md = ctx.metadata
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
                if name and not ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, name):
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                info = md.get_topic(name) if name else None
                if info is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                     "This server does not host this topic-partition.")
            if not ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, info.name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            if not ctx.config.get("delete.topic.enable"):
                raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
            if info.internal:
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Internal topics cannot be deleted")
            res.name, res.topic_id = info.name, info.topic_id
            await ctx.services.topics.delete_topic(info.name)
        except KafkaError as e:
            res.error_code = e.code
            res.error_message = e.message
        results.append(res)
    return DeleteTopicsResponse(version=v, throttle_time_ms=0, responses=results)


@api(37, 0, 3)
async def handle_create_partitions(ctx: RequestContext, request) -> CreatePartitionsResponse:
    v = ctx.api_version
    admin = ctx.services.topics
    md = ctx.metadata
    outcomes: list[tuple[str, ErrorCode, str | None]] = []
    # (outcome index, topic, new total, added, internal, manual assignment of the added partitions)
    planned: list[tuple[int, str, int, int, bool, list[list[int]] | None]] = []
    for t in request.topics:
        try:
            if not ctx.authorize(AclOperation.ALTER, ResourceType.TOPIC, t.name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            info = md.check_partition_increase(t.name, t.count)
            added = t.count - info.num_partitions
            assignment = None
            if t.assignments is not None:
                # Used as given once valid (Kafka's ReplicationControlManager.createPartitions), with
                # the replication factor of the topic's partitions (those of its first, as Kafka).
                assignment = check_added_partitions_assignment(
                    [list(a.broker_ids) for a in t.assignments], added, info.num_partitions,
                    len(md.replicas(t.name, 0)) or None, {b.node_id for b in md.brokers()}, md.eligible_leaders())
            planned.append((len(outcomes), t.name, t.count, added, info.internal, assignment))
            outcomes.append((t.name, ErrorCode.NONE, None))
        except KafkaError as e:
            outcomes.append((t.name, e.code, e.message))
    try:
        # One PartitionRecord per added partition, bounded per request like Kafka's controller
        # (deviation: Kafka catches the overflow per topic; here the whole request fails).
        check_records(sum(added for _, _, _, added, _, _ in planned))
    except KafkaError as e:
        outcomes = [(t.name, e.code, e.message) for t in request.topics]
        planned = []
    validated = 0
    for i, name, count, added, internal, assignment in planned:
        try:
            if request.validate_only:
                if not internal:
                    admin.check_partition_limit(validated + added)
                    validated += added
            else:
                await admin.add_partitions(name, count, assignment=assignment)
        except KafkaError as e:
            outcomes[i] = (name, e.code, e.message)
    return CreatePartitionsResponse(version=v, throttle_time_ms=0, results=[
        CreatePartitionsResponse.CreatePartitionsTopicResult(version=v, name=name, error_code=code, error_message=msg)
        for name, code, msg in outcomes])
