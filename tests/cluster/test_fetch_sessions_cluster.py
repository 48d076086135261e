"""Followers replicate through incremental fetch sessions (KIP-227), and keep replicating when the leader
loses their session: with ``max.incremental.fetch.session.cache.slots=1`` each leader keeps one session
while two followers fetch from it, so they evict each other's session and keep getting
FETCH_SESSION_ID_NOT_FOUND. Every acks=all write must still succeed, the ISR stay full and the replicas
end byte-identical. And with sessions kept: partitions that stay idle (left out of incremental fetches
as having nothing new) stay in the ISR, and a write after the idle time wakes the followers' parked
fetches and is acknowledged by all three replicas. Real etcd and three real brokers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from storage.batch import build_batch
from tests.helpers.cluster_proc import BrokerCluster
from tests.helpers.cluster_state import (
    assert_partition_replicas_identical,
    checked_cluster,
    produce_raw,
    view,
    wait_full_isr,
    wait_until,
)
from tests.helpers.etcd_proc import EtcdProcess

TOPIC = "sessions"
PARTITIONS = 3


@pytest.fixture
def cluster(etcd: EtcdProcess, tmp_path: Path) -> Iterator[BrokerCluster]:
    with checked_cluster(etcd, tmp_path, 3, **{"max.incremental.fetch.session.cache.slots": "1",
                                            "replica.fetch.backoff.ms": "200"}) as c:
        yield c


def test_replication_survives_evicted_fetch_sessions(cluster: BrokerCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "3"})])[TOPIC].result(60)
    wait_full_isr(cluster, TOPIC, PARTITIONS, 3)
    parts = view(cluster, TOPIC)
    for i in range(20):
        for p in range(PARTITIONS):
            leader = cluster.brokers[parts[p].leader]
            # min.insync.replicas=3: each answer needs both followers to have fetched the batch.
            code, _ = produce_raw(leader, TOPIC, p, bytes(build_batch([(b"k", b"v%d" % i)] * 5)), acks=-1)
            assert code == 0, f"acks=all produce to {TOPIC}-{p} answered {code}"
    wait_full_isr(cluster, TOPIC, PARTITIONS, 3)
    for p in range(PARTITIONS):
        hw, _ = wait_until(lambda p=p: (r := assert_partition_replicas_identical(cluster, TOPIC, p))[0] == 100 and r,
                           f"{TOPIC}-{p} replicated to 100 on every replica")
        assert hw == 100
    logs = "".join(b.log_text() for b in cluster.brokers.values())
    # The followers did lose their sessions to each other, and started new ones.
    assert "FETCH_SESSION_ID_NOT_FOUND" in logs


@pytest.fixture
def lag_cluster(etcd: EtcdProcess, tmp_path: Path) -> Iterator[BrokerCluster]:
    with checked_cluster(etcd, tmp_path, 3, **{"replica.lag.time.max.ms": "4000", "replica.fetch.wait.max.ms": "500"}) as c:
        yield c


def test_idle_partitions_stay_in_sync(lag_cluster: BrokerCluster) -> None:
    cluster = lag_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "3"})])[TOPIC].result(60)
    wait_full_isr(cluster, TOPIC, PARTITIONS, 3)
    parts = view(cluster, TOPIC)
    for p in range(PARTITIONS):
        code, _ = produce_raw(cluster.brokers[parts[p].leader], TOPIC, p, bytes(build_batch([(b"k", b"v")])), acks=-1)
        assert code == 0
    # Idle for more than twice replica.lag.time.max.ms: the ISR never shrinks.
    end = time.monotonic() + 10
    while time.monotonic() < end:
        assert all(len(info.isr) == 3 for info in view(cluster, TOPIC).values()), view(cluster, TOPIC)
        time.sleep(0.5)
    # Writes after the idle time: quiet partitions must still wake the followers' long polls and be
    # read again once they have news (min.insync.replicas=3: every follower must fetch each batch).
    for i in range(5):
        for p in range(PARTITIONS):
            code, _ = produce_raw(cluster.brokers[parts[p].leader], TOPIC, p,
                                  bytes(build_batch([(b"k", b"w%d" % i)])), acks=-1)
            assert code == 0, f"acks=all to {TOPIC}-{p} after idling answered {code}"
    assert all(len(info.isr) == 3 for info in view(cluster, TOPIC).values())
