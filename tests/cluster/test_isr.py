"""Issue 14, acceptance 3: followers and the ISR, with a real etcd and three real brokers.

- A follower killed with SIGKILL leaves the ISR by the leader's lag rule (replica.lag.time.max.ms =
  3000, while etcd still holds its registration: the controller's lease-expiry removal is not what
  moved it), and after a restart catches up and rejoins the ISR, its replica then byte-identical to
  the others up to the high watermark.
- Two of three brokers down: once the ISR of every partition led by the survivor is the survivor
  alone, acks=all produce gets NOT_ENOUGH_REPLICAS (min.insync.replicas=2) before any append, and
  no record becomes visible to consumers (high watermark and log end unchanged, nothing to read).
- An old leader holding records acknowledged with acks=1 only, never replicated, is truncated to the
  new leader's log when it comes back. This is Kafka's acks=1 contract: the leader acknowledges
  once the records are in its own log; if it then dies before any follower copied them, a follower
  becomes leader without them and they are lost. How the test gets there: the followers are frozen
  (SIGSTOP) so they stop fetching, the leader takes acks=1 writes, the leader is killed (SIGKILL)
  and the followers resume (SIGCONT); one of them becomes leader, takes more writes, and the old
  leader restarts and follows.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.errors import ErrorCode
from storage import batch as rb
from tests.compat.rdkafka_io import consume_all
from tests.helpers.broker_proc import BrokerProcess
from tests.helpers.cluster_proc import BrokerCluster
from tests.helpers.cluster_state import (
    assert_partition_replicas_identical,
    list_offset,
    produce_raw,
    registered_brokers,
    start_when_lease_gone,
    stop_and_check,
    view,
    wait_full_isr,
    wait_until,
)
from tests.helpers.etcd_proc import EtcdProcess
from tests.helpers.replica_compare import partition_dir, read_batches

TIMEOUT = 90


@pytest.fixture
def make_cluster(etcd: EtcdProcess, tmp_path: Path) -> Iterator:
    made: list[BrokerCluster] = []

    def make(**overrides: str) -> BrokerCluster:
        c = BrokerCluster(etcd, tmp_path, 3, **{"replica.fetch.backoff.ms": "200", **overrides})
        made.append(c)
        c.start()
        return c

    yield make
    problems = []
    for c in made:
        for b in c.brokers.values():  # a frozen broker cannot take SIGTERM
            if b.running:
                os.kill(b.proc.pid, signal.SIGCONT)
        problems += stop_and_check(c)
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


def create(cluster: BrokerCluster, topic: str, partitions: int, *, min_isr: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    fs = admin.create_topics([NewTopic(topic, partitions, 3, config={"min.insync.replicas": str(min_isr)})],
                             operation_timeout=60, request_timeout=60)
    fs[topic].result(TIMEOUT)
    wait_full_isr(cluster, topic, partitions, 3)


def batch(prefix: str, n: int) -> bytes:
    return rb.build_batch([(f"{prefix}-{i}".encode(), f"{prefix}-value-{i}".encode()) for i in range(n)])


def produce_ok(broker: BrokerProcess, topic: str, partition: int, prefix: str, n: int, *, acks: int = -1) -> int:
    err, base = produce_raw(broker, topic, partition, batch(prefix, n), acks=acks)
    assert err == 0, f"produce {prefix} to {topic}-{partition} on {broker.bootstrap}: {ErrorCode(err).name}"
    return base


def bootstrap_of(brokers: list[BrokerProcess]) -> str:
    return ",".join(b.bootstrap for b in brokers)


def test_killed_follower_leaves_isr_by_lag_then_catches_up_and_rejoins(make_cluster) -> None:
    # Lag 3 s; the lease lives 15 s, so the lag rule, not the controller, must shrink the ISR.
    c = make_cluster(**{"replica.lag.time.max.ms": "3000", "broker.session.timeout.ms": "15000",
                        "broker.heartbeat.interval.ms": "1000"})
    topic = "isr-lag"
    create(c, topic, 1)
    info = view(c, topic)[0]
    leader = c.brokers[info.leader]
    follower_id = next(n for n in info.replicas if n != info.leader)
    follower = c.brokers[follower_id]
    produce_ok(leader, topic, 0, "before", 50)

    follower.kill()
    # New records the dead follower never fetches: its lag grows until the leader drops it.
    n_while_down = 0

    def shrunk() -> bool:
        nonlocal n_while_down
        # acks=1: an acks=all write would wait for the dead follower until the ISR shrinks.
        produce_ok(leader, topic, 0, f"down{n_while_down}", 10, acks=1)
        n_while_down += 1
        return follower_id not in view(c, topic, via=leader)[0].isr
    wait_until(shrunk, f"broker {follower_id} out of the ISR", TIMEOUT, interval=0.2)
    # Still registered in etcd at this point: the leader's lag check removed it, not lease expiry.
    assert follower_id in registered_brokers(leader), "lease expired first: the lag rule was not tested"
    assert sorted(view(c, topic, via=leader)[0].isr) == sorted(n for n in info.replicas if n != follower_id)

    start_when_lease_gone(follower)
    wait_full_isr(c, topic, 1, 3)
    produce_ok(leader, topic, 0, "after", 5)
    wait_full_isr(c, topic, 1, 3)
    hw, batches = assert_partition_replicas_identical(c, topic, 0)
    assert hw == 50 + 10 * n_while_down + 5 and batches == 2 + n_while_down
    rows = consume_all(c.bootstrap, topic, 1, hw, timeout=TIMEOUT)
    assert [r.offset for r in rows] == list(range(hw))


def test_two_brokers_down_acks_all_gets_not_enough_replicas_and_nothing_is_visible(make_cluster) -> None:
    c = make_cluster(**{"replica.lag.time.max.ms": "3000"})
    topic = "isr-min"
    create(c, topic, 3)
    survivor = c.brokers[1]
    for p in range(3):
        produce_ok(c.brokers[view(c, topic)[p].leader], topic, p, f"p{p}", 20)
    wait_full_isr(c, topic, 3, 3)
    c.brokers[2].kill()
    c.brokers[3].kill()

    def survivor_alone() -> bool:
        parts = view(c, topic, via=survivor)
        return all(i.leader == 1 and i.isr == (1,) for i in parts.values())
    wait_until(survivor_alone, "every partition led by broker 1 with ISR [1]", TIMEOUT)

    for p in range(3):
        before = list_offset(survivor, topic, p)
        assert before == (0, 20)
        err, _ = produce_raw(survivor, topic, p, batch(f"rejected{p}", 5), acks=-1)
        assert err == ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode(err).name
        # Refused before the append: nothing in the log, the high watermark where it was.
        assert list_offset(survivor, topic, p) == (0, 20)
        pdir = partition_dir(survivor.data_dir, topic, p)
        assert sum(rb.parse_header(b).records_count for b in read_batches(pdir).values()) == 20
    rows = consume_all(survivor.bootstrap, topic, 3, 60, timeout=TIMEOUT)
    assert len(rows) == 60 and not any(r.key.startswith(b"rejected") for r in rows)


@pytest.mark.slow
def test_old_leader_truncates_acks1_records_it_alone_held(make_cluster) -> None:
    # Leases and lag long enough that frozen followers stay registered and in the ISR meanwhile.
    c = make_cluster(**{"replica.lag.time.max.ms": "20000", "broker.session.timeout.ms": "12000",
                        "broker.heartbeat.interval.ms": "1000", "replica.fetch.wait.max.ms": "200"})
    topic = "acks1"
    create(c, topic, 1, min_isr=1)
    info = view(c, topic)[0]
    old = c.brokers[info.leader]
    follower_ids = {n for n in info.replicas if n != info.leader}
    followers = [c.brokers[n] for n in sorted(follower_ids)]
    produce_ok(old, topic, 0, "committed", 10)
    wait_until(lambda: all(
        sum(rb.parse_header(b).records_count for b in read_batches(partition_dir(f.data_dir, topic, 0)).values()) == 10
        for f in followers), "followers holding the 10 committed records")

    for f in followers:
        os.kill(f.proc.pid, signal.SIGSTOP)
    try:
        # A follower's long-poll Fetch parked at the leader would be answered with the new records and
        # read by the follower after SIGCONT; wait out replica.fetch.wait.max.ms (200 ms) with room.
        time.sleep(1.0)
        for i in range(3):
            produce_ok(old, topic, 0, f"acks1-{i}", 4, acks=1)
        assert list_offset(old, topic, 0) == (0, 10), "the acks=1 records must stay above the high watermark"
        old.kill()
    finally:
        for f in followers:
            os.kill(f.proc.pid, signal.SIGCONT)
    held = read_batches(partition_dir(old.data_dir, topic, 0))
    assert sorted(held) == [0, 10, 14, 18], "the old leader's log must hold the 12 acks=1 records"

    # A follower becomes leader (from the ISR, after the old leader's lease expires) without them.
    def new_leader_elected():
        now = view(c, topic, via=followers[0])[0]
        return now if now.leader in follower_ids and now.epoch > info.epoch else None
    new = wait_until(new_leader_elected, "a new leader from the followers", TIMEOUT)
    new_leader = c.brokers[new.leader]
    base = produce_ok(new_leader, topic, 0, "new", 6)
    assert base == 10

    start_when_lease_gone(old)
    wait_full_isr(c, topic, 1, 3)
    hw, _ = assert_partition_replicas_identical(c, topic, 0)
    assert hw == 16
    rows = consume_all(c.bootstrap, topic, 1, 16, timeout=TIMEOUT)
    assert [r.key for r in rows] == [f"committed-{i}".encode() for i in range(10)] + \
        [f"new-{i}".encode() for i in range(6)]
    # The old leader's own files: the acks=1 batches are gone, replaced by the new leader's.
    assert not any(b"acks1" in data for data in read_batches(partition_dir(old.data_dir, topic, 0)).values())
