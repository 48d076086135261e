"""EtcdMetadataStore against a real etcd: two brokers' views stay in step through the watch.

Covered: topic creation (placement over the registered brokers, initial partition state, ISR =
[leader]) seen by the other view with a "created" notification; configs, partition growth and
deletion notified; two concurrent creators of one topic (exactly one wins); broker dynamic configs
and finalized features; the view recovering every change made while etcd was restarted; a controller
that starts from etcd alone moving leadership off a broker whose registration disappeared.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from cluster.controller import Controller
from cluster.controller_election import ControllerElection
from cluster.etcd_keys import KeyLayout, get_or_create_cluster_id
from cluster.etcd_store import EtcdMetadataStore
from cluster.membership import Membership
from cluster.partition_state import PartitionStateStore
from cluster.records import BrokerRegistration, Endpoint, PartitionState
from protocol.errors import ErrorCode, KafkaError
from tests.cluster.support import wait_until


async def _node(sessions, node_id: int, **kw):
    session = await sessions(**kw)
    keys = KeyLayout(await get_or_create_cluster_id(session.client))
    store = EtcdMetadataStore(session, keys, node_id)
    await store.start()
    membership = Membership(session, keys)
    await membership.register(BrokerRegistration(node_id, (Endpoint("PLAINTEXT", "127.0.0.1", 9000 + node_id),)))
    await store.wait_for(lambda: node_id in store.live_brokers(), "own registration")
    events: list[tuple[str, str]] = []
    store.add_listener(lambda event, info: events.append((event, info.name)))
    return store, events


@pytest.fixture
async def stores(sessions):
    made = []

    async def make(node_id: int, **kw):
        store, events = await _node(sessions, node_id, **kw)
        made.append(store)
        return store, events

    yield make
    for s in made:
        with contextlib.suppress(Exception):
            await s.stop()


async def test_views_follow_topic_changes(stores) -> None:
    a, _ = await stores(1)
    b, events = await stores(2)
    await wait_until(lambda: len(a.brokers()) == 2, "both brokers in a's view")
    info = await a.create_topic("t", 4, {"retention.ms": "1000"}, replication_factor=2)
    assert info.num_partitions == 4
    await wait_until(lambda: b.get_topic("t") is not None and len(b.partition_states()) == 4, "t in b's view")
    assert ("created", "t") in events
    for p in range(4):
        replicas = b.replicas("t", p)
        assert sorted(replicas) == [1, 2]
        # As Kafka: a new partition's ISR is its live replicas, led by the first.
        assert b.leader("t", p) == replicas[0] and b.isr("t", p) == replicas and b.leader_epoch("t", p) == 0
    with pytest.raises(KafkaError) as e:
        await b.create_topic("t", 1, {})
    assert e.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
    await b.set_topic_configs("t", {"retention.ms": "2000"})
    await wait_until(lambda: a.get_topic("t").configs == {"retention.ms": "2000"}, "configs in a's view")
    await a.add_partitions("t", 6)
    await wait_until(lambda: b.get_topic("t").num_partitions == 6 and b.leader("t", 5) in (1, 2), "growth in b")
    assert ("configs", "t") in events and ("partitions", "t") in events
    await b.delete_topic("t")
    await wait_until(lambda: a.get_topic("t") is None and not a.partition_states(), "deletion in a's view")
    assert ("deleted", "t") in events
    with pytest.raises(KafkaError) as e:
        await a.create_topic("u", 1, {}, replication_factor=3)
    assert e.value.code == ErrorCode.INVALID_REPLICATION_FACTOR


async def test_concurrent_creators_one_wins(stores) -> None:
    a, _ = await stores(1)
    b, _ = await stores(2)
    for i in range(10):
        results = await asyncio.gather(a.create_topic(f"race-{i}", 2, {}), b.create_topic(f"race-{i}", 2, {}),
                                       return_exceptions=True)
        wins = [r for r in results if not isinstance(r, BaseException)]
        losses = [r for r in results if isinstance(r, KafkaError)]
        assert len(wins) == 1 and len(losses) == 1 and losses[0].code == ErrorCode.TOPIC_ALREADY_EXISTS
        await wait_until(lambda n=f"race-{i}", w=wins[0]: (t := b.get_topic(n)) is not None and t.topic_id == w.topic_id,
                         "the winner in both views")


async def test_broker_configs_and_features(stores) -> None:
    a, _ = await stores(1)
    b, _ = await stores(2)
    heard: list[int | None] = []
    b.add_broker_config_listener(heard.append)
    assert a.finalized_features() == {"transaction.version": 2, "share.version": 1} and a.features_epoch() == 1
    await a.set_finalized_feature("transaction.version", 1)
    # One key per BROKER resource: the cluster-wide default and each broker's own set.
    await a.set_broker_dynamic_configs(None, {"log.cleaner.threads": "2"})
    await a.set_broker_dynamic_configs(1, {"message.max.bytes": "5000"})
    await wait_until(lambda: b.finalized_features() == {"transaction.version": 1, "share.version": 1}
                     and b.features_epoch() == 2
                     and b.broker_dynamic_configs(None) == {"log.cleaner.threads": "2"}
                     and b.broker_dynamic_configs(1) == {"message.max.bytes": "5000"}, "features and configs in b")
    assert b.broker_dynamic_configs(2) == {} and heard == [None, 1]
    # Each change is computed from the view and guarded by its revision: a write made from a stale
    # view (here: b's revision from before a's second change) is refused, not applied over a's.
    rev = b._broker_config_rev[None]
    await a.set_broker_dynamic_configs(None, {"log.cleaner.threads": "3"})
    await wait_until(lambda: b.broker_dynamic_configs(None) == {"log.cleaner.threads": "3"}, "a's change in b")
    b._broker_config_rev[None] = rev
    with pytest.raises(KafkaError) as e:
        await b.set_broker_dynamic_configs(None, {})
    assert e.value.code == ErrorCode.REQUEST_TIMED_OUT
    assert a.broker_dynamic_configs(None) == {"log.cleaner.threads": "3"}


async def test_broker_configs_of_earlier_versions_are_read(stores) -> None:
    """Before one key per resource, every broker wrote one object (defaults as "cluster-default:<name>")
    and applied all of it at start: it is read as such until a resource gets its own key."""
    a, _ = await stores(1)
    doc = b'{"version": 1, "configs": {"cluster-default:min.insync.replicas": "2", "message.max.bytes": "7000"}}'
    await a.session.client.put(a.keys.broker_configs, doc)
    await wait_until(lambda: a.broker_dynamic_configs(None) == {"min.insync.replicas": "2"}, "the old defaults")
    assert a.broker_dynamic_configs(1) == a.broker_dynamic_configs(3) == {"message.max.bytes": "7000"}
    await a.set_broker_dynamic_configs(None, {"min.insync.replicas": "3"})
    await a.set_broker_dynamic_configs(1, {})
    assert a.broker_dynamic_configs(None) == {"min.insync.replicas": "3"} and a.broker_dynamic_configs(1) == {}
    assert a.broker_dynamic_configs(3) == {"message.max.bytes": "7000"}


async def test_view_recovers_changes_made_while_etcd_restarted(stores, etcd) -> None:
    a, events = await stores(1, session_timeout_ms=9000, heartbeat_interval_ms=500)
    b, _ = await stores(2, session_timeout_ms=9000, heartbeat_interval_ms=500)
    await a.create_topic("before", 1, {})
    await wait_until(lambda: b.get_topic("before") is not None, "before in b")
    etcd.restart()
    info = await b.create_topic("after", 1, {})
    await wait_until(lambda: (t := a.get_topic("after")) is not None and t.topic_id == info.topic_id,
                     "a's view after the etcd restart")
    assert ("created", "after") in events


async def test_new_controller_moves_leadership_from_etcd_alone(sessions, stores) -> None:
    a, _ = await stores(1)
    b, _ = await stores(2)
    await wait_until(lambda: len(a.brokers()) == 2, "both registered")
    await a.create_topic("m", 2, {}, assignment={0: [1, 2], 1: [2, 1]})
    states = PartitionStateStore(a.session, a.keys)
    s0 = await states.get("m", 0)
    assert await states.update("m", 0, s0.partition_epoch, PartitionState(1, 0, (1, 2), 0))
    # Node 3 only starts now: its controller knows the cluster from etcd alone.
    c, _ = await stores(3)
    election = ControllerElection(c.session, c.keys, 3)
    controller = Controller(c, election, PartitionStateStore(c.session, c.keys), interval_s=0.2)
    election.start()
    controller.start()
    try:
        await wait_until(election.is_controller, "node 3 controller")
        await a.session.close()  # node 1's lease is revoked: its registration disappears
        await wait_until(lambda: c.leader("m", 0) == 2 and c.leader_epoch("m", 0) == 1, "m-0 moved to node 2")
        assert c.isr("m", 0) == [2]
        assert c.leader("m", 1) == 2 and c.leader_epoch("m", 1) == 0  # led by a live broker: untouched
    finally:
        await controller.stop()
        await election.stop()


async def test_controller_follows_dynamic_unclean_leader_election(stores) -> None:
    """unclean.leader.election.enable set as a cluster-wide dynamic default (through another
    broker) reaches the controller without a restart: an offline partition whose only ISR member
    died gets its out-of-sync replica as leader, as with KRaft's cluster config."""
    a, _ = await stores(1)
    b, _ = await stores(2)
    await wait_until(lambda: len(a.brokers()) == 2, "both registered")
    await a.create_topic("u", 1, {}, assignment={0: [1, 2]})
    states = PartitionStateStore(a.session, a.keys)
    s0 = await states.get("u", 0)
    assert await states.update("u", 0, s0.partition_epoch, PartitionState(1, 0, (1,), 0))  # 2 out of sync
    c, _ = await stores(3)
    election = ControllerElection(c.session, c.keys, 3)
    controller = Controller(c, election, PartitionStateStore(c.session, c.keys), interval_s=0.2)
    election.start()
    controller.start()
    try:
        await wait_until(election.is_controller, "node 3 controller")
        await a.session.close()  # the only ISR member is gone: offline without unclean election
        await wait_until(lambda: c.leader("u", 0) == -1, "u-0 offline")
        await b.set_broker_dynamic_configs(None, {"unclean.leader.election.enable": "true"})
        await wait_until(lambda: c.leader("u", 0) == 2 and c.isr("u", 0) == [2], "u-0 led by node 2 (unclean)")
    finally:
        await controller.stop()
        await election.stop()


async def test_controller_moves_many_leaderships_in_batches_and_redecides_a_stale_one(stores) -> None:
    """A broker leading many partitions disappears: the controller swaps their states in batched
    etcd transactions (issue 31: thousands of leaderships within the session timeout). A batch
    holding a state that moved on after the controller's cache read it is swapped one partition at
    a time with fresh reads, so the moved partition is decided from its new state."""
    a, _ = await stores(1)
    b, _ = await stores(2)
    await wait_until(lambda: len(a.brokers()) == 2, "both registered")
    n = 150  # three batches
    await a.create_topic("many", n, {}, assignment={p: [1, 2] for p in range(n)})
    states = PartitionStateStore(a.session, a.keys)
    for p in range(n):
        s = await states.get("many", p)
        assert await states.update("many", p, s.partition_epoch, PartitionState(1, 0, (1, 2), 0))
    c, _ = await stores(3)
    await wait_until(lambda: all(c.isr("many", p) == [1, 2] for p in range(n)), "node 3 sees the ISRs")
    election = ControllerElection(c.session, c.keys, 3)
    controller = Controller(c, election, PartitionStateStore(c.session, c.keys), interval_s=3600)
    election.start()
    try:
        await wait_until(election.is_controller, "node 3 controller")
        await a.session.close()  # node 1's registration disappears
        await wait_until(lambda: 1 not in c.live_brokers(), "node 1 gone")
        # Partition 7's state moves on behind the cache's back: its cached revision goes stale.
        c._state_rev[("many", 7)] -= 1
        assert await controller.reconcile() == n
        await wait_until(lambda: all(c.leader("many", p) == 2 for p in range(n)), "all led by node 2")
        assert all(c.leader_epoch("many", p) == 1 and c.isr("many", p) == [2] for p in range(n))
        assert await controller.reconcile() == 0  # nothing left to decide
    finally:
        await election.stop()
