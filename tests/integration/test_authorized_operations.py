"""Authorized operations reported to a stock admin client (issue 21 item 4).

With no authorizer configured Kafka answers, when asked, every operation that applies to the
resource type (AuthHelper.authorizedOperations over AclEntry.supportedOperations): 8 for a topic,
7 for the cluster, 5 for a group. confluent-kafka's AdminClient asks through Metadata
(describe_topics), DescribeCluster (describe_cluster) and ConsumerGroupDescribe/DescribeGroups
(describe_consumer_groups); without include_authorized_operations it gets nothing back.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import AclOperation as Op
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.metadata import MetadataRequest

from tests.helpers.wire import send_request
from tests.integration.test_groups_clients import unique

TOPIC_OPS = {Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
CLUSTER_OPS = {Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE, Op.ALTER,
               Op.DESCRIBE}
GROUP_OPS = {Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}


def _ops(ops) -> set | None:
    return None if ops is None else set(ops)


def test_topic_and_cluster_authorized_operations(broker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = unique("authops")
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)

    desc = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(30)
    assert len(desc.partitions) == 3
    assert _ops(desc.authorized_operations) == TOPIC_OPS
    plain = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
    assert not plain.authorized_operations  # not requested: omitted

    cluster = admin.describe_cluster(include_authorized_operations=True).result(30)
    assert _ops(cluster.authorized_operations) == CLUSTER_OPS
    assert not admin.describe_cluster().result(30).authorized_operations


def _wait_assigned(c: Consumer, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not c.assignment():
        assert time.monotonic() < deadline, "consumer never got an assignment"
        c.poll(0.1)


def test_group_authorized_operations(broker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = unique("authops-g")
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    classic, modern, empty = unique("g-classic"), unique("g-848"), unique("g-empty")
    consumers = [
        Consumer({"bootstrap.servers": broker.bootstrap, "group.id": classic, "auto.offset.reset": "earliest"}),
        Consumer({"bootstrap.servers": broker.bootstrap, "group.id": modern, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest"}),
    ]
    committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": empty, "enable.auto.commit": False})
    try:
        for c in consumers:
            c.subscribe([topic])
        for c in consumers:
            _wait_assigned(c)
        # A group with only committed offsets (state Empty) is described without error too.
        committer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        for group in (classic, modern, empty):
            desc = admin.describe_consumer_groups([group], include_authorized_operations=True)[group].result(30)
            assert _ops(desc.authorized_operations) == GROUP_OPS, group
            plain = admin.describe_consumer_groups([group])[group].result(30)
            assert not plain.authorized_operations, group
    finally:
        for c in (*consumers, committer):
            c.close()


def test_metadata_cluster_operations_v8_to_v10(broker) -> None:
    """Metadata carries the cluster's set only in v8-10 (it moved to DescribeCluster in v11); topic
    entries answered with an error still get theirs, as KafkaApis sets it on every named entry."""
    cluster_bits, topic_bits = (sum(1 << op.value for op in ops) for ops in (CLUSTER_OPS, TOPIC_OPS))
    T = MetadataRequest.MetadataRequestTopic
    for v in (8, 10):
        req = MetadataRequest(version=v, topics=[T(version=v, name="missing-topic")], allow_auto_topic_creation=False,
                              include_cluster_authorized_operations=True, include_topic_authorized_operations=True)
        resp = send_request(broker.bootstrap, req, v)
        # kafka-python decodes these fields as the set of bit positions.
        assert resp.authorized_operations == {op.value for op in CLUSTER_OPS}, v
        assert sum(1 << b for b in resp.authorized_operations) == cluster_bits
        (topic,) = resp.topics
        assert topic.error_code == 3 and sum(1 << b for b in topic.authorized_operations) == topic_bits
        req = MetadataRequest(version=v, topics=None, allow_auto_topic_creation=False,
                              include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
        assert send_request(broker.bootstrap, req, v).authorized_operations is None
