"""send_offsets_to_transaction when the group coordinator and the transaction coordinator are
different brokers (found by the compose test's consume-transform-produce, issue 16).

TxnOffsetCommit goes to the group's coordinator, which must check with the transactional id's
coordinator that AddOffsetsToTxn added its ``__consumer_offsets`` partition to the transaction.
It used to ask its own transaction coordinator, which knows nothing of a transactional id led
elsewhere: INVALID_PRODUCER_ID_MAPPING, fatal for the producer. Three real brokers on real etcd; a
confluent-kafka producer whose transactional id is coordinated by broker T commits offsets of a
group coordinated by broker G != T, then commits; the offsets are the group's afterwards and the
record is readable with read_committed.
"""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.helpers.coord_cluster import (
    GROUP_TOPIC,
    KEY_GROUP,
    KEY_TXN,
    TXN_TOPIC,
    coord_cluster,
    data_topic,
    ensure_internal_topic,
    id_led_by,
    read_all,
    wait_coordinator,
)
from tests.helpers.etcd_proc import EtcdProcess

TOPIC = "ctp-source"
TIMEOUT = 60.0


def test_txn_offset_commit_with_coordinators_on_two_brokers(etcd: EtcdProcess, tmp_path: Path) -> None:
    with coord_cluster(etcd, tmp_path) as cluster:
        ensure_internal_topic(cluster, TXN_TOPIC)
        ensure_internal_topic(cluster, GROUP_TOPIC)
        data_topic(cluster, TOPIC, 1)
        tid, _ = id_led_by(cluster, TXN_TOPIC, 1, "tid")
        group, _ = id_led_by(cluster, GROUP_TOPIC, 2, "group")
        assert wait_coordinator(cluster, tid, KEY_TXN) == 1
        assert wait_coordinator(cluster, group, KEY_GROUP) == 2

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid, "acks": "all",
                             "transaction.timeout.ms": 60_000})
        producer.init_transactions(TIMEOUT)
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                             "enable.auto.commit": False})
        try:
            producer.begin_transaction()
            producer.produce(TOPIC, value=b"copied", partition=0)
            # AddOffsetsToTxn to broker 1, then TxnOffsetCommit to broker 2 (which checks with 1).
            producer.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 7)], consumer.consumer_group_metadata(),
                                                 TIMEOUT)
            producer.commit_transaction(TIMEOUT)
            committed = consumer.committed([TopicPartition(TOPIC, 0)], timeout=TIMEOUT)
        finally:
            consumer.close()
        assert [(tp.partition, tp.offset) for tp in committed] == [(0, 7)]
        assert [v for _, v in read_all(cluster.bootstrap, TOPIC, [0], 1)[0]] == [b"copied"]
