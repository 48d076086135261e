"""Cluster mode end to end: a real etcd and three real kbroker processes on 127.0.0.1.

Covered: registration (a live duplicate node.id and a foreign cluster id refuse to start, node.id is
required); a 6-partition RF=1 topic spread over the 3 brokers that confluent-kafka produces to and
consumes from (following the leaders), idempotent producers getting cluster-unique ids, kcat -L
seeing 3 brokers; an RF=3 topic whose metadata lists 3 replicas, all in the ISR, and whose acks=all
produce with min.insync.replicas=2 is replicated, and once both followers are gone gets
NOT_ENOUGH_REPLICAS; produce to a non-leader answers
NOT_LEADER_OR_FOLLOWER; kill -9 of the controller: partitions with another live ISR member move
there (epoch + 1), the others go offline (leader -1, offline replica listed), a new controller is
elected.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.admin import DescribeClusterRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

from cluster.etcd_keys import KeyLayout, get_or_create_cluster_id
from cluster.etcd_session import EtcdSession
from cluster.partition_state import PartitionStateStore
from cluster.records import PartitionState
from protocol.errors import ErrorCode
from storage.batch import build_batch
from tests.helpers.broker_proc import BrokerError, BrokerProcess
from tests.helpers.cluster_proc import BrokerCluster, cluster_broker
from tests.helpers.etcd_proc import EtcdProcess
from tests.helpers.wire import encode_request, send_request

WAIT_S = 90.0


@pytest.fixture
def cluster(etcd: EtcdProcess, tmp_path: Path) -> Iterator[BrokerCluster]:
    c = BrokerCluster(etcd, tmp_path, 3)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def wait_until(condition, what: str, timeout: float = WAIT_S, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    last_error = "none"
    while time.monotonic() < deadline:
        try:
            result = condition()
            if result:
                return result
        except Exception as e:  # a broker still starting or just killed
            # repr only: a kept traceback would pin the callers' frames (and their clients).
            last_error = repr(e)
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last_error})")


def metadata(broker: BrokerProcess, topics: list[str] | None = None):
    T = MetadataRequest.MetadataRequestTopic
    req = MetadataRequest(version=12, topics=None if topics is None else [T(version=12, topic_id=None, name=t)
                                                                         for t in topics],
                          allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    return send_request(broker.bootstrap, req, 12)


def partitions(broker: BrokerProcess, topic: str) -> dict[int, object]:
    (t,) = metadata(broker, [topic]).topics
    return {p.partition_index: p for p in t.partitions}


def create(bootstrap: str, *topics: NewTopic) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics(list(topics), operation_timeout=60, request_timeout=60).values():
        f.result(timeout=90)


def produce_raw(broker: BrokerProcess, topic: str, partition: int, acks: int, *, version: int = 9):
    P = ProduceRequest.TopicProduceData
    req = ProduceRequest(version=version, transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        P(version=version, name=topic, partition_data=[P.PartitionProduceData(
            version=version, index=partition, records=build_batch([(b"k", b"v")]))])])
    resp = send_request(broker.bootstrap, req, version)
    return resp if version >= 10 else resp.responses[0].partition_responses[0].error_code


def test_duplicate_node_id_refused(etcd: EtcdProcess, tmp_path: Path) -> None:
    first = cluster_broker(etcd, tmp_path / "a", 1)
    second = cluster_broker(etcd, tmp_path / "b", 1)
    try:
        first.start(timeout=60)
        with pytest.raises(BrokerError):
            second.start(timeout=60)
        assert "node.id 1 is already registered by a live broker" in second.log_text()
        assert second.proc.returncode == 1
    finally:
        for b in (first, second):
            b.kill()


def test_cluster_id_mismatch_and_missing_node_id_refused(etcd: EtcdProcess, tmp_path: Path) -> None:
    foreign = cluster_broker(etcd, tmp_path, 1)
    foreign.data_dir.mkdir(parents=True)
    (foreign.data_dir / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\n")
    with pytest.raises(BrokerError):
        foreign.start(timeout=60)
    assert "belong to cluster AAAAAAAAAAAAAAAAAAAAAA" in foreign.log_text()
    anonymous = BrokerProcess(tmp_path / "anon", overrides={"kbroker.etcd.endpoints": etcd.endpoints})
    with pytest.raises(BrokerError):
        anonymous.start(timeout=60)
    assert "needs an explicit node.id" in anonymous.log_text()


def test_rf1_topic_spread_produce_consume(cluster: BrokerCluster) -> None:
    create(cluster.bootstrap, NewTopic("spread", num_partitions=6, replication_factor=1))
    b1 = cluster.brokers[1]
    parts = wait_until(lambda: (ps := partitions(b1, "spread")) and all(p.leader_id > 0 for p in ps.values()) and ps,
                       "leaders of spread")
    assert {p.leader_id for p in parts.values()} == {1, 2, 3}
    assert all(p.replica_nodes == [p.leader_id] == p.isr_nodes for p in parts.values())
    described = send_request(b1.bootstrap, DescribeClusterRequest(version=0, include_cluster_authorized_operations=False), 0)
    assert sorted(b.broker_id for b in described.brokers) == [1, 2, 3]
    assert described.controller_id in (1, 2, 3)

    # Produce to a broker that does not lead the partition: NOT_LEADER_OR_FOLLOWER.
    p0 = parts[0]
    other = next(b for n, b in cluster.brokers.items() if n != p0.leader_id)
    assert produce_raw(other, "spread", 0, acks=1) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # v10+ (KIP-951): the answer names the leader and its endpoint.
    resp = produce_raw(other, "spread", 0, acks=1, version=11)
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (p0.leader_id, p0.leader_epoch)
    leader = cluster.brokers[p0.leader_id]
    assert [(e.node_id, f"127.0.0.1:{e.port}") for e in resp.node_endpoints] == [(p0.leader_id, leader.bootstrap)]

    n = 300
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    errors: list = []
    for i in range(n):
        producer.produce("spread", key=str(i).encode(), value=f"v{i}".encode(),
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(90) == 0 and not errors
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "spread-g",
                         "auto.offset.reset": "earliest", "enable.auto.commit": True})
    consumer.subscribe(["spread"])
    got: set[bytes] = set()
    deadline = time.monotonic() + WAIT_S
    try:
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.add(msg.value())
    finally:
        consumer.close()
    assert len(got) == n
    # Producer ids come from etcd blocks: two brokers hand out ids from different blocks.
    pids = {send_request(b.bootstrap, InitProducerIdRequest(version=0, transactional_id=None,
                                                            transaction_timeout_ms=1000), 0).producer_id
            for b in cluster.brokers.values()}
    assert len(pids) == 3
    kcat = shutil.which("kcat")
    if kcat is not None:
        out = subprocess.run([kcat, "-b", cluster.bootstrap, "-L"], capture_output=True, text=True, timeout=60)
        assert "3 brokers:" in out.stdout, out.stdout + out.stderr


def test_rf3_metadata_and_acks_all_min_isr(cluster: BrokerCluster) -> None:
    create(cluster.bootstrap, NewTopic("rf3", num_partitions=3, replication_factor=3,
                                       config={"min.insync.replicas": "2"}))
    b2 = cluster.brokers[2]
    parts = wait_until(lambda: (ps := partitions(b2, "rf3")) and all(p.leader_id > 0 for p in ps.values()) and ps,
                       "leaders of rf3")
    for p in parts.values():
        assert sorted(p.replica_nodes) == [1, 2, 3]
        assert p.isr_nodes == p.replica_nodes and p.leader_id == p.replica_nodes[0]
        assert p.leader_epoch == 0 and p.offline_replicas == []
    # The cluster id created once in etcd is every broker's, and written to its meta.properties.
    cluster_id = metadata(b2).cluster_id
    for b in cluster.brokers.values():
        assert metadata(b).cluster_id == cluster_id
        assert f"cluster.id={cluster_id}" in (b.data_dir / "meta.properties").read_text()
    leader_id = parts[0].leader_id
    leader = cluster.brokers[leader_id]
    assert produce_raw(leader, "rf3", 0, acks=-1) == ErrorCode.NONE  # replicated to the ISR
    assert produce_raw(leader, "rf3", 0, acks=1) == ErrorCode.NONE
    # With the two followers stopped and gone from the ISR (the controller removes dead brokers),
    # acks=all is refused before the append: NOT_ENOUGH_REPLICAS.
    for node, b in cluster.brokers.items():
        if node != leader_id:
            b.stop()
    wait_until(lambda: partitions(leader, "rf3")[0].isr_nodes == [leader_id], "the ISR shrunk to the leader")
    assert produce_raw(leader, "rf3", 0, acks=-1) == ErrorCode.NOT_ENOUGH_REPLICAS
    assert produce_raw(leader, "rf3", 0, acks=1) == ErrorCode.NONE


async def test_kill_controller_moves_leadership_or_goes_offline(cluster: BrokerCluster, etcd: EtcdProcess) -> None:
    create(cluster.bootstrap, NewTopic("solo", num_partitions=3, replication_factor=1),
           NewTopic("multi", num_partitions=3, replication_factor=2))
    b1 = cluster.brokers[1]
    for topic in ("solo", "multi"):
        wait_until(lambda t=topic: all(p.leader_id > 0 for p in partitions(b1, t).values()), f"leaders of {topic}")
    # Replication is the next slice: make the ISR of "multi" hold both replicas, as a follower in
    # sync would, through the same compare-and-swap the controller uses.
    async with EtcdSession(etcd.endpoints, session_timeout_ms=3000, heartbeat_interval_ms=500) as session:
        keys = KeyLayout(await get_or_create_cluster_id(session.client))
        states = PartitionStateStore(session, keys)
        for p, meta in partitions(b1, "multi").items():
            s = await states.get("multi", p)
            assert await states.update("multi", p, s.partition_epoch,
                                       PartitionState(s.leader, s.leader_epoch, tuple(meta.replica_nodes), 0))
    victim = metadata(b1).controller_id
    before = {t: partitions(b1, t) for t in ("solo", "multi")}
    wait_until(lambda: all(len(p.isr_nodes) == 2 for p in partitions(b1, "multi").values()), "ISR of multi")
    cluster.brokers[victim].kill()
    survivor = next(b for n, b in cluster.brokers.items() if n != victim)

    def settled() -> bool:
        md = metadata(survivor)
        if md.controller_id in (-1, victim) or victim in {b.node_id for b in md.brokers}:
            return False
        after = {t.name: {p.partition_index: p for p in t.partitions} for t in md.topics}
        for t, parts in before.items():
            for i, old in parts.items():
                new = after[t][i]
                if old.leader_id != victim:
                    continue
                if t == "solo" and not (new.leader_id == -1 and new.error_code == ErrorCode.LEADER_NOT_AVAILABLE
                                        and new.offline_replicas == [victim]):
                    return False
                if t == "multi" and not (new.leader_id not in (-1, victim) and new.leader_epoch == old.leader_epoch + 1
                                         and new.isr_nodes == [new.leader_id]):
                    return False
        return True

    wait_until(settled, "leadership moved away from the killed controller and a new controller elected")
    moved = [p for p in partitions(survivor, "multi").values()]
    leader = cluster.brokers[moved[0].leader_id]
    assert produce_raw(leader, "multi", moved[0].partition_index, acks=1) == ErrorCode.NONE


def test_coordinator_loads_although_its_find_coordinator_was_cancelled(etcd: EtcdProcess, tmp_path: Path) -> None:
    """Node 1 creates __consumer_offsets for a FindCoordinator whose client leaves right after the
    etcd write (held there by a fault-injection delay): the request is cancelled before node 1
    would have loaded anything. Coordinators load with leadership, not with the request: a
    consumer bootstrapped on nodes 2 and 3 joins its group on whichever broker leads its partition."""
    c = BrokerCluster(etcd, tmp_path, 3)
    c.brokers[1].env["KBROKERTEST_DELAY_POINT"] = "etcd_store.after_create:1500"
    try:
        c.start()
        b1, b2 = c.brokers[1], c.brokers[2]
        create(b2.bootstrap, NewTopic("cc", num_partitions=1, replication_factor=1))
        producer = Producer({"bootstrap.servers": b2.bootstrap})
        for i in range(10):
            producer.produce("cc", value=f"v{i}".encode())
        assert producer.flush(60) == 0
        find = FindCoordinatorRequest(version=2, key="cc-g", key_type=0)
        with socket.create_connection(("127.0.0.1", b1.port), timeout=10) as s:
            s.sendall(encode_request(find, 2, 1))
            wait_until(lambda: "__consumer_offsets" in {t.name for t in metadata(b2).topics if t.error_code == 0},
                       "__consumer_offsets created by node 1")
        # The client is gone. The partitions are spread over the three brokers with 3 replicas
        # each (offsets.topic.replication.factor), and each leader loaded its own when it became
        # leader, whatever happened to the request that created the topic.
        offsets = partitions(b2, "__consumer_offsets").values()
        assert {p.leader_id for p in offsets} == {1, 2, 3}
        assert all(sorted(p.replica_nodes) == [1, 2, 3] for p in offsets)
        consumer = Consumer({"bootstrap.servers": f"{b2.bootstrap},{c.brokers[3].bootstrap}", "group.id": "cc-g",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["cc"])
        got = 0
        deadline = time.monotonic() + WAIT_S
        try:
            while got < 10 and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got += 1
        finally:
            consumer.close()
        assert got == 10
    finally:
        c.stop()


def test_fenced_leader_refuses_produce_until_its_session_is_healthy(etcd: EtcdProcess, tmp_path: Path) -> None:
    """etcd stops answering (SIGSTOP): once the broker's local fencing deadline passes (TTL 10 s
    minus a 2 s margin after the last acknowledged keepalive) it answers NOT_LEADER_OR_FOLLOWER
    instead of acknowledging, and it acknowledges again once etcd answers, before the lease ran out."""
    c = BrokerCluster(etcd, tmp_path, 1, **{"broker.session.timeout.ms": "10000"})
    try:
        c.start()
        b1 = c.brokers[1]
        create(b1.bootstrap, NewTopic("fence", num_partitions=1, replication_factor=1))
        wait_until(lambda: produce_raw(b1, "fence", 0, acks=1) == ErrorCode.NONE, "produce accepted")
        etcd.pause()
        try:
            wait_until(lambda: produce_raw(b1, "fence", 0, acks=1) == ErrorCode.NOT_LEADER_OR_FOLLOWER,
                       "the fenced broker refusing produce", timeout=30, interval=0.05)
        finally:
            etcd.resume()
        wait_until(lambda: produce_raw(b1, "fence", 0, acks=1) == ErrorCode.NONE, "produce accepted again")
    finally:
        c.stop()
