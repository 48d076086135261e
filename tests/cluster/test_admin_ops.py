"""Admin operations of cluster mode (issue 14): ElectLeaders, partition reassignments, preferred-leader
rebalance, CreatePartitions and DeleteTopics on replicated topics, and their `kbroker` tools.

Store level (real etcd, EtcdMetadataStore views of three registered nodes, no controller running,
so every step is deterministic): a reassignment RF 1 -> 3 that stays in progress until its new
replicas are in the ISR, the "leaders" notification of the brokers it adds, listing, completion,
an immediate completion (the target is in the ISR already), cancel, and Kafka's per-partition errors.

Broker processes (real etcd, three real kbroker processes): preferred election through
confluent-kafka's AdminClient.elect_leaders (NONE, then ELECTION_NOT_NEEDED; PREFERRED_LEADER_NOT_
AVAILABLE while the preferred broker is down), unclean election of an offline partition, the
controller's automatic preferred-leader rebalance, raw ElectLeaders / AlterPartitionReassignments /
ListPartitionReassignments errors, CreatePartitions on an RF=3 topic, DeleteTopics removing the
replicas on every broker, the CLI tools, and a reassignment RF=1 -> 3 -> 1 with
the data intact.

Single node (no etcd): ElectLeaders answers ELECTION_NOT_NEEDED, only [this node] is a valid target;
with the standard authorizer and no ACLs every API answers CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    ElectLeadersRequest,
    ListPartitionReassignmentsRequest,
)
from kafka.protocol.metadata import MetadataRequest

from cli.reassign_partitions import read_plan
from cluster.etcd_keys import KeyLayout, get_or_create_cluster_id
from cluster.etcd_session import EtcdSession
from cluster.etcd_store import EtcdMetadataStore
from cluster.membership import Membership
from cluster.partition_state import PartitionStateStore
from cluster.records import BrokerRegistration, Endpoint, PartitionState, Reassignment
from protocol.errors import ErrorCode
from tests.cluster.support import wait_until
from tests.helpers.broker_proc import BrokerProcess
from tests.helpers.cluster_proc import BrokerCluster
from tests.helpers.etcd_proc import EtcdProcess
from tests.helpers.waiting import wait_for
from tests.helpers.wire import send_request

WAIT_S = 90.0
REPO = Path(__file__).resolve().parents[2]


# --- store level -----------------------------------------------------------------------------------
@pytest.fixture
async def nodes(sessions) -> list[tuple[EtcdMetadataStore, list[tuple[str, str]]]]:
    """Stores of registered nodes 1, 2, 3, each with the events its listener saw."""
    made = []
    for node_id in (1, 2, 3):
        session = await sessions()
        keys = KeyLayout(await get_or_create_cluster_id(session.client))
        store = EtcdMetadataStore(session, keys, node_id)
        await store.start()
        await Membership(session, keys).register(
            BrokerRegistration(node_id, (Endpoint("PLAINTEXT", "127.0.0.1", 9000 + node_id),)))
        events: list[tuple[str, str]] = []
        store.add_listener(lambda event, info, events=events: events.append((event, info.name)))
        made.append((store, events))
    for store, _ in made:
        await wait_until(lambda store=store: len(store.live_brokers()) == 3, "three live brokers in every view")
    yield made
    for store, _ in made:
        with contextlib.suppress(Exception):
            await store.stop()


async def _expand_isr(store: EtcdMetadataStore, topic: str, p: int, isr: tuple[int, ...]) -> None:
    """What a partition leader does when followers caught up: an ISR change by compare-and-swap."""
    state = store.partition_state(topic, p)
    states = PartitionStateStore(store.session, store.keys)
    assert await states.update(topic, p, state.partition_epoch, PartitionState(state.leader, state.leader_epoch, isr, 0))
    await wait_until(lambda: store.isr(topic, p) == list(isr), f"ISR {isr} of {topic}-{p}")


async def test_store_reassignment_lifecycle(nodes) -> None:
    (a, _), (b, b_events), (c, c_events) = nodes
    await a.create_topic("m", 2, {}, assignment={0: [1], 1: [1]})
    await wait_until(lambda: c.get_topic("m") is not None and len(c.partition_states()) == 2, "m in c's view")
    c_events.clear()

    # RF 1 -> 3 on b: replicas = target + (original - target); the ISR is unchanged; in progress.
    assert await b.alter_reassignments("m", {0: [1, 2, 3]}) == {0: None}
    await wait_until(lambda: c.replicas("m", 0) == [1, 2, 3], "the new replicas in c's view")
    assert ("leaders", "m") in c_events  # the replica manager of a newly assigned broker hears of it
    # Each store follows etcd by its own watch: a's view may come after b's and c's.
    await wait_until(lambda: all(s.reassignments() for s in (a, b, c)), "the reassignment in every view")
    for store in (a, b, c):
        assert store.reassignments() == {("m", 0): ([1, 2, 3], Reassignment((2, 3), ()))}
        assert store.isr("m", 0) == [1] and store.leader("m", 0) == 1
    # Not complete while the new replicas are outside the ISR.
    assert await a.complete_reassignments("m") == 0
    await _expand_isr(a, "m", 0, (1, 2))
    assert await a.complete_reassignments("m") == 0
    await _expand_isr(a, "m", 0, (1, 2, 3))
    assert await a.complete_reassignments("m") == 1
    await wait_until(lambda: not c.reassignments(), "completion in c's view")
    assert c.replicas("m", 0) == [1, 2, 3] and c.isr("m", 0) == [1, 2, 3]
    epoch = c.leader_epoch("m", 0)

    # Back to one replica that is in the ISR already: done at once, the leader moves to it.
    assert await c.alter_reassignments("m", {0: [3]}) == {0: None}
    await wait_until(lambda: a.replicas("m", 0) == [3], "replicas [3] in a's view")
    assert not a.reassignments()
    assert a.isr("m", 0) == [3] and a.leader("m", 0) == 3 and a.leader_epoch("m", 0) == epoch + 1

    # Cancel reverts to the original replicas and leaves the state alone.
    assert await a.alter_reassignments("m", {1: [2, 3]}) == {1: None}
    await wait_until(lambda: b.replicas("m", 1) == [2, 3, 1], "reassignment of m-1 in b's view")
    assert b.reassignments()[("m", 1)] == ([2, 3, 1], Reassignment((2, 3), (1,)))
    assert await b.alter_reassignments("m", {1: None}) == {1: None}
    await wait_until(lambda: a.replicas("m", 1) == [1] and not a.reassignments(), "m-1 back on [1]")
    assert a.leader("m", 1) == 1 and a.isr("m", 1) == [1]

    # Kafka's per-partition errors.
    codes = {p: (e.code if e else 0) for p, e in
             (await a.alter_reassignments("m", {0: [3, 3], 1: [7], 5: [1]})).items()}
    assert codes == {0: ErrorCode.INVALID_REPLICA_ASSIGNMENT, 1: ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                     5: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert (await a.alter_reassignments("m", {0: None}))[0].code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    assert (await a.alter_reassignments("nope", {0: [1]}))[0].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert (await a.alter_reassignments("m", {0: []}))[0].code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    # Topic changes keep an ongoing reassignment (configs and growth rewrite the record).
    assert await a.alter_reassignments("m", {1: [1, 2]}) == {1: None}
    await a.set_topic_configs("m", {"retention.ms": "5000"})
    await a.add_partitions("m", 3)
    await wait_until(lambda: b.get_topic("m").num_partitions == 3, "3 partitions in b's view")
    assert b.reassignments() == {("m", 1): ([1, 2], Reassignment((2,), ()))}
    assert len(b.replicas("m", 2)) == 1  # the replication factor of partition 0's target


async def test_store_elections(nodes) -> None:
    (a, _), (b, _), _ = nodes
    await a.create_topic("e", 2, {}, assignment={0: [1, 2], 1: [2]})
    await wait_until(lambda: len(b.partition_states()) == 2, "e in b's view")
    states = PartitionStateStore(a.session, a.keys)
    s0 = a.partition_state("e", 0)
    # Leader on the second replica with the preferred one in the ISR.
    assert await states.update("e", 0, s0.partition_epoch, PartitionState(2, s0.leader_epoch + 1, (2, 1), 0))
    await wait_until(lambda: b.leader("e", 0) == 2, "leader 2 in b's view")
    out = await b.elect_leaders([("e", 0), ("e", 1), ("e", 9), ("x", 0)], 0)
    assert {k: (e.code if e else 0) for k, e in out.items()} == {
        ("e", 0): 0, ("e", 1): ErrorCode.ELECTION_NOT_NEEDED, ("e", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("x", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert b.leader("e", 0) == 1 and b.leader_epoch("e", 0) == s0.leader_epoch + 2  # seen when answered
    # All partitions: those that need nothing are left out.
    assert await a.elect_leaders(None, 0) == {}
    # Elected, but timeout_ms 0 leaves no time to see it: REQUEST_TIMED_OUT (the election stands).
    s0 = a.partition_state("e", 0)
    assert await states.update("e", 0, s0.partition_epoch, PartitionState(2, s0.leader_epoch + 1, (2, 1), 0))
    await wait_until(lambda: a.leader("e", 0) == 2, "leader 2 again")
    out = await a.elect_leaders([("e", 0)], 0, timeout_s=0)
    assert out[("e", 0)].code == ErrorCode.REQUEST_TIMED_OUT
    await wait_until(lambda: a.leader("e", 0) == 1, "the election seen later")
    # Unclean: only for a partition without a leader.
    s1 = a.partition_state("e", 1)
    assert await states.update("e", 1, s1.partition_epoch, PartitionState(-1, s1.leader_epoch + 1, (9,), 0))
    await wait_until(lambda: a.leader("e", 1) == -1, "e-1 offline")
    out = await a.elect_leaders([("e", 0), ("e", 1)], 1)
    assert out[("e", 0)].code == ErrorCode.ELECTION_NOT_NEEDED and out[("e", 1)] is None
    assert a.leader("e", 1) == 2 and a.isr("e", 1) == [2]


# --- broker processes ------------------------------------------------------------------------------
def _cluster(etcd: EtcdProcess, tmp_path: Path, **overrides: str) -> Iterator[BrokerCluster]:
    c = BrokerCluster(etcd, tmp_path, 3, **overrides)
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture
def cluster(etcd: EtcdProcess, tmp_path: Path) -> Iterator[BrokerCluster]:
    """Three brokers without the automatic rebalance (the tests move leaders themselves)."""
    yield from _cluster(etcd, tmp_path, **{"auto.leader.rebalance.enable": "false"})


def metadata(broker: BrokerProcess, topic: str) -> dict[int, object]:
    T = MetadataRequest.MetadataRequestTopic
    req = MetadataRequest(version=12, topics=[T(version=12, topic_id=None, name=topic)],
                          allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    (t,) = send_request(broker.bootstrap, req, 12).topics
    return {p.partition_index: p for p in t.partitions}


def create(bootstrap: str, *topics: NewTopic) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics(list(topics), operation_timeout=60, request_timeout=60).values():
        f.result(timeout=90)


def led(broker: BrokerProcess, topic: str, count: int) -> dict[int, object]:
    return wait_for(lambda: (ps := metadata(broker, topic)) and len(ps) == count
                    and all(p.leader_id > 0 for p in ps.values()) and ps, f"leaders of {topic}", WAIT_S)


async def _set_state(etcd: EtcdProcess, topic: str, p: int, leader: int, isr: tuple[int, ...]) -> None:
    """Move a partition's state by compare-and-swap, as the controller or a leader would."""
    session = await EtcdSession(etcd.endpoints, session_timeout_ms=5000, heartbeat_interval_ms=1000).open()
    try:
        states = PartitionStateStore(session, KeyLayout(await get_or_create_cluster_id(session.client)))
        for _ in range(20):
            old = await states.get(topic, p)
            if await states.update(topic, p, old.partition_epoch,
                                   PartitionState(leader, old.leader_epoch + 1, isr, 0)):
                return
        raise AssertionError(f"could not move {topic}-{p}")
    finally:
        await session.close()


def _elect(admin: AdminClient, kind: ElectionType, parts: list[tuple[str, int]] | None) -> dict[tuple[str, int], int]:
    # (confluent-kafka 2.16's elect_leaders takes no timeout keywords: librdkafka's defaults apply)
    got = admin.elect_leaders(kind, None if parts is None else [TopicPartition(t, p) for t, p in parts]).result(90)
    return {(tp.topic, tp.partition): 0 if e is None else e.code() for tp, e in got.items()}  # KafkaError values


async def test_elect_leaders_preferred_and_unclean(cluster: BrokerCluster, etcd: EtcdProcess) -> None:
    create(cluster.bootstrap, NewTopic("pref", num_partitions=3, replication_factor=3),
           NewTopic("solo", num_partitions=1, replication_factor=1))
    b1 = cluster.brokers[1]
    parts = led(b1, "pref", 3)
    p0 = parts[0]
    preferred, other = p0.replica_nodes[0], p0.replica_nodes[1]
    await _set_state(etcd, "pref", 0, other, tuple(p0.replica_nodes))
    wait_for(lambda: metadata(b1, "pref")[0].leader_id == other, "leader moved off the preferred replica", WAIT_S)
    epoch = metadata(b1, "pref")[0].leader_epoch
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    assert _elect(admin, ElectionType.PREFERRED, [("pref", 0), ("pref", 1)]) == {
        ("pref", 0): 0, ("pref", 1): ErrorCode.ELECTION_NOT_NEEDED}
    for b in cluster.brokers.values():  # every broker's view shows it soon (the answering one already did)
        wait_for(lambda b=b: (m := metadata(b, "pref")[0]).leader_id == preferred and m.leader_epoch == epoch + 1,
                 f"preferred leader in broker {b.port}'s metadata", WAIT_S)
    # Unknown partitions, and "all partitions" leaving out the ones that need nothing.
    assert _elect(admin, ElectionType.PREFERRED, [("pref", 7), ("nope", 0)]) == {
        ("pref", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert _elect(admin, ElectionType.PREFERRED, None) == {}

    # The preferred broker down: its partitions cannot go back to it.
    (solo,) = led(b1, "solo", 1).values()
    down = cluster.brokers[preferred]
    down.stop()
    up = next(b for n, b in cluster.brokers.items() if n != preferred)
    wait_for(lambda: metadata(up, "pref")[0].leader_id not in (-1, preferred), "leadership off the stopped broker",
             WAIT_S)
    admin = AdminClient({"bootstrap.servers": up.bootstrap})
    assert _elect(admin, ElectionType.PREFERRED, [("pref", 0)]) == {("pref", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}
    assert _elect(admin, ElectionType.UNCLEAN, [("pref", 0)]) == {("pref", 0): ErrorCode.ELECTION_NOT_NEEDED}
    if solo.leader_id == preferred:  # its only replica is down: nobody can lead it
        wait_for(lambda: metadata(up, "solo")[0].leader_id == -1, "solo offline", WAIT_S)
        assert _elect(admin, ElectionType.UNCLEAN, [("solo", 0)]) == {
            ("solo", 0): ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE}
    # Unclean election of an offline partition whose ISR holds only the stopped broker.
    await _set_state(etcd, "pref", 1, -1, (preferred,))
    wait_for(lambda: metadata(up, "pref")[1].leader_id == -1, "pref-1 offline", WAIT_S)
    replicas = metadata(up, "pref")[1].replica_nodes
    assert _elect(admin, ElectionType.PREFERRED, [("pref", 1)]) == {("pref", 1): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}
    assert _elect(admin, ElectionType.UNCLEAN, [("pref", 1)]) == {("pref", 1): 0}
    # The election is the controller's (librdkafka sends it there); up's view follows by its watch.
    wait_for(lambda: metadata(up, "pref")[1].leader_id != -1, "pref-1 led again in up's view", WAIT_S)
    m = metadata(up, "pref")[1]
    first_live = next(r for r in replicas if r != preferred)
    # The unclean election's ISR is the new leader alone; the other live replica may already have
    # caught up and rejoined it by the time this reads it (a race the CI hit once), the stopped
    # broker never.
    assert m.leader_id == first_live and first_live in m.isr_nodes and preferred not in m.isr_nodes


def test_elect_leaders_raw_errors_and_versions(cluster: BrokerCluster) -> None:
    create(cluster.bootstrap, NewTopic("raw", num_partitions=1, replication_factor=2))
    b2 = cluster.brokers[2]
    led(b2, "raw", 1)
    T = ElectLeadersRequest.TopicPartitions
    # v0 has no election type (preferred) and no top-level error.
    resp = send_request(b2.bootstrap, ElectLeadersRequest(version=0, topic_partitions=[
        T(version=0, topic="raw", partitions=[0, 3])], timeout_ms=30000), 0)
    codes = {p.partition_id: p.error_code for r in resp.replica_election_results for p in r.partition_result}
    assert codes == {0: ErrorCode.ELECTION_NOT_NEEDED, 3: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    # An unknown election type fails the request.
    resp = send_request(b2.bootstrap, ElectLeadersRequest(version=2, election_type=5, topic_partitions=[
        T(version=2, topic="raw", partitions=[0])], timeout_ms=30000), 2)
    assert resp.error_code == ErrorCode.INVALID_REQUEST
    # ListPartitionReassignments with nothing moving, and an alter naming an unknown broker.
    listed = send_request(b2.bootstrap, ListPartitionReassignmentsRequest(version=0, timeout_ms=30000, topics=None), 0)
    assert listed.error_code == 0 and listed.topics == []
    R = AlterPartitionReassignmentsRequest.ReassignableTopic
    resp = send_request(b2.bootstrap, AlterPartitionReassignmentsRequest(version=0, timeout_ms=30000, topics=[
        R(version=0, name="raw", partitions=[R.ReassignablePartition(version=0, partition_index=0, replicas=[1, 9]),
                                              R.ReassignablePartition(version=0, partition_index=1, replicas=[1]),
                                              ])]), 0)
    assert {p.partition_index: p.error_code for t in resp.responses for p in t.partitions} == {
        0: ErrorCode.INVALID_REPLICA_ASSIGNMENT, 1: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


@pytest.fixture
def balancing(etcd: EtcdProcess, tmp_path: Path) -> Iterator[BrokerCluster]:
    """Three brokers whose controller checks the leader balance every second."""
    yield from _cluster(etcd, tmp_path, **{"leader.imbalance.check.interval.seconds": "1"})


async def test_auto_rebalance_moves_leaders_back(balancing: BrokerCluster, etcd: EtcdProcess) -> None:
    create(balancing.bootstrap, NewTopic("bal", num_partitions=3, replication_factor=3))
    b3 = balancing.brokers[3]
    p = led(b3, "bal", 3)[1]
    preferred = p.replica_nodes[0]
    await _set_state(etcd, "bal", 1, p.replica_nodes[2], tuple(p.replica_nodes))
    # The controller moves it back to the preferred replica within a few check intervals.
    m = wait_for(lambda: (m := metadata(b3, "bal")[1]).leader_id == preferred and m.leader_epoch > p.leader_epoch + 1
                 and m, "leadership back on the preferred replica", WAIT_S)
    assert m.leader_epoch == p.leader_epoch + 2


def test_create_partitions_and_delete_on_replicated_topic(cluster: BrokerCluster) -> None:
    create(cluster.bootstrap, NewTopic("grow", num_partitions=2, replication_factor=3))
    b1 = cluster.brokers[1]
    led(b1, "grow", 2)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_partitions([NewPartitions("grow", 5)], operation_timeout=60, request_timeout=60)["grow"].result(90)
    parts = led(b1, "grow", 5)
    assert all(sorted(p.replica_nodes) == [1, 2, 3] for p in parts.values())
    assert len({p.replica_nodes[0] for i, p in parts.items() if i >= 2}) > 1  # new leaders spread too
    # Every broker holds a replica of every partition; DeleteTopics removes them everywhere.
    dirs = [b.data_dir / f"grow-{i}" for b in cluster.brokers.values() for i in range(5)]
    wait_for(lambda: all(d.is_dir() for d in dirs), "the replicas' log dirs on every broker", WAIT_S)
    admin.delete_topics(["grow"], operation_timeout=60, request_timeout=60)["grow"].result(90)
    wait_for(lambda: not any(d.exists() for d in dirs), "the replicas' log dirs removed on every broker", WAIT_S)


def _kbroker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KBROKERTEST_TOOL_TIMEOUT_S": "60"}
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=REPO)


async def test_cli_tools(cluster: BrokerCluster, etcd: EtcdProcess, tmp_path: Path) -> None:
    create(cluster.bootstrap, NewTopic("cli", num_partitions=2, replication_factor=3))
    b1 = cluster.brokers[1]
    p0 = led(b1, "cli", 2)[0]
    await _set_state(etcd, "cli", 0, p0.replica_nodes[1], tuple(p0.replica_nodes))
    wait_for(lambda: metadata(b1, "cli")[0].leader_id == p0.replica_nodes[1], "leader off the preferred", WAIT_S)
    out = _kbroker("leader-election", "-b", b1.bootstrap, "--election-type", "preferred", "--all-topic-partitions")
    assert out.returncode == 0, out.stderr
    # The tool also says which partitions already had their preferred leader (issue 33, item 9).
    assert out.stdout == ("Successfully completed leader election (PREFERRED) for partitions cli-0\n"
                          "Valid replica already elected for partitions cli-1\n")
    out = _kbroker("leader-election", "-b", b1.bootstrap, "--election-type", "preferred", "--topic", "cli",
                   "--partition", "1")
    assert out.returncode == 0 and out.stdout == "Valid replica already elected for partitions cli-1\n", out
    out = _kbroker("leader-election", "-b", b1.bootstrap, "--election-type", "preferred", "--topic", "cli",
                   "--partition", "9")
    assert out.returncode == 1
    assert out.stdout.startswith("Error completing leader election (PREFERRED) for partition: cli-9: ")
    assert out.stderr == "kbroker leader-election: 1 replica(s) could not be elected\n"
    out = _kbroker("leader-election", "-b", b1.bootstrap, "--election-type", "preferred", "--topic", "cli")
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "--partition" in out.stderr

    out = _kbroker("reassign-partitions", "-b", b1.bootstrap, "--list")
    assert out.returncode == 0 and out.stdout == "No partition reassignments found.\n", out
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "cli", "partition": 1, "replicas": [3, 2]}]}))
    out = _kbroker("reassign-partitions", "-b", b1.bootstrap, "--execute", "--reassignment-json-file", str(plan))
    assert out.returncode == 0, out.stderr
    assert "Current partition replica assignment" in out.stdout
    assert out.stdout.rstrip().endswith("Successfully started partition reassignments for cli-1")
    rollback = json.loads(out.stdout.split("\n")[2])
    assert rollback["partitions"][0]["topic"] == "cli"
    assert sorted(rollback["partitions"][0]["replicas"]) == [1, 2, 3]  # the assignment before
    # Shrinking to replicas that are in the ISR completes at once.
    wait_for(lambda: metadata(b1, "cli")[1].replica_nodes == [3, 2], "cli-1 on [3, 2]", WAIT_S)
    out = _kbroker("reassign-partitions", "-b", b1.bootstrap, "--verify", "--reassignment-json-file", str(plan))
    assert out.returncode == 0
    assert out.stdout == "Status of partition reassignment:\nReassignment of partition cli-1 is completed.\n"
    out = _kbroker("reassign-partitions", "-b", b1.bootstrap, "--cancel", "--reassignment-json-file", str(plan))
    assert out.returncode == 1 and "NO_REASSIGNMENT_IN_PROGRESS" in out.stdout
    assert out.stderr == "kbroker reassign-partitions: 1 partition reassignment(s) failed\n"
    bad = tmp_path / "bad.json"
    bad.write_text('{"partitions": [{"topic": "cli"}]}')
    out = _kbroker("reassign-partitions", "-b", b1.bootstrap, "--execute", "--reassignment-json-file", str(bad))
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "replicas" in out.stderr

    # --generate: the current assignment, and a proposal over the broker list that keeps the partition
    # count and the first partition's replication factor (cli-0 still has 3 replicas).
    move = tmp_path / "move.json"
    move.write_text(json.dumps({"version": 1, "topics": [{"topic": "cli"}]}))
    out = _kbroker("reassign-partitions", "-b", b1.bootstrap, "--generate", "--topics-to-move-json-file", str(move),
                   "--broker-list", "3,1,2")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert lines[0] == "Current partition replica assignment" and lines[3] == "Proposed partition reassignment configuration"
    current, proposed = json.loads(lines[1]), json.loads(lines[4])
    assert [(e["topic"], e["partition"]) for e in current["partitions"]] == [("cli", 0), ("cli", 1)]
    assert current["partitions"][1]["replicas"] == [3, 2]
    assert [(e["topic"], e["partition"]) for e in proposed["partitions"]] == [("cli", 0), ("cli", 1)]
    assert all(sorted(e["replicas"]) == [1, 2, 3] for e in proposed["partitions"])
    assert len({e["replicas"][0] for e in proposed["partitions"]}) == 2  # leaders spread over brokers
    # The proposal is a file --execute takes.
    plan2 = tmp_path / "proposed.json"
    plan2.write_text(lines[4])
    assert read_plan(str(plan2), need_replicas=True) == [(e["topic"], e["partition"], e["replicas"])
                                                          for e in proposed["partitions"]]
    out = _kbroker("reassign-partitions", "-b", b1.bootstrap, "--generate", "--topics-to-move-json-file", str(move),
                   "--broker-list", "1,2,9")  # 9 is not registered: two brokers cannot hold 3 replicas
    assert out.returncode == 1 and "replication factor of 3 cannot be reached" in out.stderr, out
    move.write_text(json.dumps({"version": 1, "topics": [{"topic": "no-such-topic"}]}))
    out = _kbroker("reassign-partitions", "-b", b1.bootstrap, "--generate", "--topics-to-move-json-file", str(move),
                   "--broker-list", "1,2,3")
    assert out.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in out.stderr, out
    out = _kbroker("reassign-partitions", "-b", b1.bootstrap, "--generate", "--topics-to-move-json-file", str(move),
                   "--broker-list", "1,1")
    assert out.returncode == 1 and "duplicate" in out.stderr, out


# --- with replication --------------------------------------------------------------------------------
def _alter(broker: BrokerProcess, topic: str, p: int, replicas: list[int] | None) -> int:
    R = AlterPartitionReassignmentsRequest.ReassignableTopic
    resp = send_request(broker.bootstrap, AlterPartitionReassignmentsRequest(version=0, timeout_ms=60000, topics=[
        R(version=0, name=topic, partitions=[R.ReassignablePartition(version=0, partition_index=p,
                                                                     replicas=replicas)])]), 0, timeout=90)
    return resp.responses[0].partitions[0].error_code


def _ongoing(broker: BrokerProcess) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
    resp = send_request(broker.bootstrap, ListPartitionReassignmentsRequest(version=0, timeout_ms=30000, topics=None), 0)
    return {(t.name, p.partition_index): (p.replicas, p.adding_replicas, p.removing_replicas)
            for t in resp.topics for p in t.partitions}


def _consume_all(bootstrap: str, topic: str, n: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def test_reassignment_rf1_to_rf3_and_back(cluster: BrokerCluster) -> None:
    create(cluster.bootstrap, NewTopic("move", num_partitions=1, replication_factor=1))
    b1 = cluster.brokers[1]
    (p,) = led(b1, "move", 1).values()
    first = p.leader_id
    n = 500
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all"})
    for i in range(n):
        producer.produce("move", value=f"v{i}".encode())
    assert producer.flush(90) == 0
    others = [b for b in (1, 2, 3) if b != first]
    target = [first, *others]
    assert _alter(b1, "move", 0, target) == 0
    # In progress until both new replicas caught up and joined the ISR; the list shows it meanwhile.
    ongoing = _ongoing(b1)
    if ongoing:
        assert ongoing == {("move", 0): (target, others, [])}
    wait_for(lambda: not _ongoing(b1) and sorted(metadata(b1, "move")[0].isr_nodes) == [1, 2, 3],
             "RF 3 with a full ISR", WAIT_S)
    assert metadata(b1, "move")[0].replica_nodes == target
    # Back to one replica on another broker: leadership moves there, the data comes along.
    last = others[-1]
    assert _alter(b1, "move", 0, [last]) == 0
    wait_for(lambda: (m := metadata(b1, "move")[0]).replica_nodes == [last] and m.leader_id == last,
             "RF 1 on the last broker", WAIT_S)
    got = _consume_all(cluster.brokers[last].bootstrap, "move", n)
    assert got == [f"v{i}".encode() for i in range(n)]
    gone = [cluster.brokers[b].data_dir / "move-0" for b in (1, 2, 3) if b != last]
    wait_for(lambda: not any(d.exists() for d in gone), "the removed replicas' logs deleted", WAIT_S)


# --- single node, and authorization -------------------------------------------------------------
def test_single_node_answers_and_cluster_authorization(tmp_path: Path) -> None:
    """No etcd: one replica per partition, so elections are never needed and only [this node] is a valid
    target. With the standard authorizer and no ACLs, ANONYMOUS lacks ALTER/DESCRIBE on the cluster."""
    T = ElectLeadersRequest.TopicPartitions
    R = AlterPartitionReassignmentsRequest.ReassignableTopic
    P = R.ReassignablePartition

    def elect(b: BrokerProcess):
        return send_request(b.bootstrap, ElectLeadersRequest(version=1, election_type=0, topic_partitions=[
            T(version=1, topic="one", partitions=[0, 4])], timeout_ms=30000), 1)

    def alter(b: BrokerProcess, replicas: list[int] | None, p: int = 0):
        return send_request(b.bootstrap, AlterPartitionReassignmentsRequest(version=0, timeout_ms=30000, topics=[
            R(version=0, name="one", partitions=[P(version=0, partition_index=p, replicas=replicas)])]), 0)

    def codes(resp) -> list[int]:
        return [p.error_code for t in resp.responses for p in t.partitions]

    with BrokerProcess(tmp_path / "single", overrides={"node.id": "1"}) as b:
        create(b.bootstrap, NewTopic("one", num_partitions=1, replication_factor=1))
        resp = elect(b)
        assert resp.error_code == 0
        assert {p.partition_id: p.error_code for r in resp.replica_election_results for p in r.partition_result} == {
            0: ErrorCode.ELECTION_NOT_NEEDED, 4: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert codes(alter(b, [1])) == [0]
        assert codes(alter(b, [2])) == [ErrorCode.INVALID_REPLICA_ASSIGNMENT]
        assert codes(alter(b, None)) == [ErrorCode.NO_REASSIGNMENT_IN_PROGRESS]
        assert codes(alter(b, [1], p=3)) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        listed = send_request(b.bootstrap, ListPartitionReassignmentsRequest(version=0, timeout_ms=1000, topics=None), 0)
        assert listed.error_code == 0 and listed.topics == []

    with BrokerProcess(tmp_path / "secured", overrides={"authorizer.class.name": "standard"}) as b:
        resp = elect(b)
        assert resp.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert [p.error_code for r in resp.replica_election_results for p in r.partition_result] == [
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 2
        resp = alter(b, [1])
        assert resp.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert codes(resp) == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
        listed = send_request(b.bootstrap, ListPartitionReassignmentsRequest(version=0, timeout_ms=1000, topics=None), 0)
        assert listed.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
