"""Replication details with real etcd and three real brokers: the high-watermark checkpoint
(Kafka's replication-offset-checkpoint) written by every replica and used after a restart, and
OffsetForLeaderEpoch after a leader change (KIP-320: the old epoch ends where the new one began)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.consumer import OffsetForLeaderEpochRequest

from storage.batch import build_batch
from tests.helpers.cluster_proc import BrokerCluster
from tests.helpers.cluster_state import list_offset, produce_raw, view, wait_full_isr, wait_until
from tests.helpers.etcd_proc import EtcdProcess
from tests.helpers.wire import send_request

TOPIC = "core"


@pytest.fixture
def cluster(etcd: EtcdProcess, tmp_path: Path) -> Iterator[BrokerCluster]:
    c = BrokerCluster(etcd, tmp_path, 3, **{"replica.high.watermark.checkpoint.interval.ms": "200",
                                            "replica.fetch.backoff.ms": "200"})
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _checkpoint(data_dir: Path) -> dict[int, int]:
    path = data_dir / "replication-offset-checkpoint"
    if not path.exists():
        return {}
    lines = path.read_text().split("\n")[2:]
    return {int(p): int(o) for t, p, o in (ln.split() for ln in lines if ln) if t == TOPIC}


def _end_offset_for(broker, epoch: int) -> tuple[int, int, int]:
    Q = OffsetForLeaderEpochRequest
    T = Q.OffsetForLeaderTopic
    req = Q(version=4, replica_id=-1, topics=[T(version=4, topic=TOPIC, partitions=[
        T.OffsetForLeaderPartition(version=4, partition=0, current_leader_epoch=-1, leader_epoch=epoch)])])
    r = send_request(broker.bootstrap, req, 4, timeout=10).topics[0].partitions[0]
    return r.error_code, r.leader_epoch, r.end_offset


def test_high_watermark_checkpoint_and_epochs_across_a_leader_change(cluster: BrokerCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(60)
    wait_full_isr(cluster, TOPIC, 1, 3)
    first = view(cluster, TOPIC)[0]
    leader = cluster.brokers[first.leader]
    for _ in range(5):
        assert produce_raw(leader, TOPIC, 0, bytes(build_batch([(b"k", b"v")] * 10)), acks=-1)[0] == 0
    # Every replica checkpoints the high watermark it knows: 50 (followers learn it from the leader).
    wait_until(lambda: all(_checkpoint(b.data_dir).get(0) == 50 for b in cluster.brokers.values()),
               "every replica's replication-offset-checkpoint at 50")

    # A clean stop of the leader moves leadership (epoch + 1); the new leader answers the old
    # epoch's end (50) and, thanks to its high watermark, LATEST = 50 at once.
    leader.stop()
    second = wait_until(lambda: (p := view(cluster, TOPIC)[0]).leader not in (-1, first.leader) and p, "a new leader")
    assert second.epoch > first.epoch
    new_leader = cluster.brokers[second.leader]
    assert wait_until(lambda: list_offset(new_leader, TOPIC, 0) == (0, 50) and True, "LATEST 50 on the new leader")
    assert produce_raw(new_leader, TOPIC, 0, bytes(build_batch([(b"k", b"v")] * 5)), acks=-1)[0] == 0
    err, epoch, end = _end_offset_for(new_leader, first.epoch)
    assert (err, epoch, end) == (0, first.epoch, 50)
    assert _end_offset_for(new_leader, second.epoch) == (0, second.epoch, 55)

    # The old leader comes back as a follower, catches up and rejoins the ISR.
    leader.start()
    wait_full_isr(cluster, TOPIC, 1, 3)
    wait_until(lambda: _checkpoint(leader.data_dir).get(0) == 55, "the returning replica's checkpoint at 55")


def test_a_leader_restarted_within_its_lease_gets_a_new_leader_epoch(cluster: BrokerCluster) -> None:
    """kill -9 and an immediate restart: the new incarnation waits for the old lease, registers
    again, and the controller fences it for a pass (KRaft fences a new incarnation), so none of its
    partitions is led under the epoch its previous incarnation used."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(60)
    wait_full_isr(cluster, TOPIC, 1, 3)
    first = view(cluster, TOPIC)[0]
    leader = cluster.brokers[first.leader]
    assert produce_raw(leader, TOPIC, 0, bytes(build_batch([(b"k", b"v")] * 10)), acks=-1)[0] == 0
    leader.kill()
    leader.start()  # waits in the broker for its previous registration to expire
    # Wait for the new epoch itself: right after the restart the old view (same leader and epoch,
    # full ISR) still stands until the controller has fenced the new incarnation, and a full-ISR
    # wait alone could return it (it did once in CI under load).
    wait_until(lambda: view(cluster, TOPIC)[0].epoch > first.epoch, "a new leader epoch after the restart")
    after = wait_full_isr(cluster, TOPIC, 1, 3)[0]
    assert after.epoch > first.epoch
    current = cluster.brokers[after.leader]
    assert list_offset(current, TOPIC, 0) == (0, 10)
