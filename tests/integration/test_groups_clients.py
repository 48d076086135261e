"""Consumer groups through stock clients against a real broker (issue 6, acceptance 1-3).

Three members per client library share a 6-partition topic: every partition is owned by exactly
one member once the group settles, a fourth-member join and a leave each trigger a rebalance that
settles within seconds, and members never own the same partition at the same time. A member
killed with SIGKILL is evicted after its session timeout; a static member restarted within the
session timeout gets its partitions back without a rebalance; committed offsets survive a broker
kill -9; a stale generation is rejected with ILLEGAL_GENERATION.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.consumer import JoinGroupRequest, OffsetCommitRequest, SyncGroupRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from tests.helpers.wire import RawConnection

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 6
SESSION_MS = 6000
SETTLE_S = 30  # upper bound for any wait; a settled group is normally reached in ~1-4 s
OVERRIDES = {"offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0"}
_ids = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_ids)}-{int(time.time() * 1000) % 10_000_000}"


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def produce(bootstrap: str, topic: str, n: int = 60) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), partition=i % PARTITIONS)
    p.flush(30)


def assert_exact_cover(assignments: list[set[int]], partitions: int = PARTITIONS) -> None:
    union: set[int] = set()
    for a in assignments:
        assert not (union & a), f"partition owned twice: {assignments}"
        union |= a
    assert union == set(range(partitions)), f"not every partition assigned: {assignments}"


def covered(assignments: list[set[int]], n: int = PARTITIONS) -> bool:
    return sum(len(a) for a in assignments) == n and set().union(*assignments) == set(range(n))


# --- confluent-kafka --------------------------------------------------------------------------------


class RdMember:
    """A librdkafka consumer whose rebalance callbacks track what it owns right now."""

    def __init__(self, bootstrap: str, group: str, topic: str, strategy: str, **extra: str) -> None:
        self.owned: set[int] = set()
        self.callbacks = 0  # rebalance callbacks seen (assign + revoke)
        self.cooperative = strategy == "cooperative-sticky"
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                           "partition.assignment.strategy": strategy, "session.timeout.ms": SESSION_MS,
                           "heartbeat.interval.ms": 300, "enable.auto.commit": False, **extra})
        self.c.subscribe([topic], on_assign=self._assign, on_revoke=self._revoke)

    def _assign(self, c: Consumer, parts: list[TopicPartition]) -> None:
        got = {p.partition for p in parts}
        self.callbacks += 1
        if self.cooperative:
            self.owned |= got
        else:
            self.owned = got

    def _revoke(self, c: Consumer, parts: list[TopicPartition]) -> None:
        self.callbacks += 1
        self.owned -= {p.partition for p in parts}

    def poll(self) -> None:
        m = self.c.poll(0.05)
        assert m is None or not m.error() or m.error().code() < 0, m.error() if m else None


def poll_until(members: list[RdMember], cond: Callable[[], bool], what: str, timeout: float = SETTLE_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.poll()
            # Invariant at every step: nobody owns a partition another member owns.
            owned = [x.owned for x in members]
            assert sum(len(o) for o in owned) == len(set().union(*owned)), f"overlap: {owned}"
        if cond():
            return
    raise AssertionError(f"timed out waiting for {what}: {[m.owned for m in members]}")


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_confluent_kafka_three_members(broker_factory, strategy: str) -> None:
    broker = broker_factory(OVERRIDES)
    topic, group = unique("t"), unique("g")
    create_topic(broker.bootstrap, topic)
    produce(broker.bootstrap, topic)
    members = [RdMember(broker.bootstrap, group, topic, strategy) for _ in range(3)]
    try:
        poll_until(members, lambda: covered([m.owned for m in members]) and all(len(m.owned) == 2 for m in members),
                   "three members with two partitions each")
        assert_exact_cover([m.owned for m in members])
        # A fourth member joins: every partition still owned exactly once, the newcomer gets some.
        members.append(RdMember(broker.bootstrap, group, topic, strategy))
        poll_until(members, lambda: covered([m.owned for m in members]) and len(members[-1].owned) >= 1,
                   "rebalance after a join")
        # One member leaves: the others take over its partitions.
        t0 = time.monotonic()
        leaving = members.pop(0)
        leaving.c.close()
        poll_until(members, lambda: covered([m.owned for m in members]) and all(m.owned for m in members),
                   "rebalance after a leave")
        assert time.monotonic() - t0 < 15
        assert_exact_cover([m.owned for m in members])
    finally:
        for m in members:
            m.c.close()


# --- kafka-python -------------------------------------------------------------------------------------

# kafka-python 3.0.x loses a rebalance whose JoinGroup/SyncGroup completes while no poll() is
# waiting on it: need_rejoin() ignores a join still in flight, so a leader whose assignment
# snapshot catches up mid-join never consumes the result (heartbeats stay disabled, the broker
# evicts it after the session timeout and it never rejoins), and a finished join found by the next
# poll() is thrown away and sent again (a leader rejoining in Stable: one more rebalance). Polling
# three consumers in turn from one thread with short timeouts leaves each one outside poll() most
# of the time, so under load the group never settles. Each member therefore runs its own poll loop
# with long polls: a join always completes inside the poll() that started it.
KP_POLL_MS = 1000


class KpMember:
    """A kafka-python consumer owned by one thread that polls it continuously; other calls run on
    that thread too (a KafkaConsumer is not meant to be shared between threads)."""

    def __init__(self, consumer: Any) -> None:
        self.c = consumer
        self.error: BaseException | None = None
        self._calls: queue.Queue[tuple[Callable[[Any], Any], Future[Any]]] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.c.poll(timeout_ms=KP_POLL_MS)
                while not self._calls.empty():
                    fn, fut = self._calls.get()
                    try:
                        fut.set_result(fn(self.c))
                    except BaseException as e:  # handed to the caller
                        fut.set_exception(e)
        except BaseException as e:  # reported by owned()
            self.error = e
        finally:
            self.c.close()

    def call(self, fn: Callable[[Any], Any]) -> Any:
        fut: Future[Any] = Future()
        self._calls.put((fn, fut))
        return fut.result(SETTLE_S)

    def owned(self) -> set[int]:
        if self.error is not None:
            raise AssertionError(f"poll loop failed: {self.error!r}") from self.error
        return {tp.partition for tp in self.c.assignment()}

    def stop(self) -> None:
        self._stop.set()

    def join(self) -> None:
        self._thread.join(SETTLE_S)
        assert not self._thread.is_alive(), "consumer thread did not stop"


def test_kafka_python_three_members(broker_factory) -> None:
    from kafka import KafkaConsumer

    broker = broker_factory(OVERRIDES)
    topic, group = unique("t"), unique("g")
    create_topic(broker.bootstrap, topic)
    produce(broker.bootstrap, topic)

    def member() -> KpMember:
        c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, auto_offset_reset="earliest",
                          session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300, enable_auto_commit=False,
                          max_poll_interval_ms=SESSION_MS * 5)
        c.subscribe([topic])
        return KpMember(c)

    def wait(ms: list[KpMember], cond: Callable[[list[set[int]]], bool], what: str) -> None:
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline:
            if cond([m.owned() for m in ms]):
                return
            time.sleep(0.02)
        raise AssertionError(f"timed out waiting for {what}: {[m.owned() for m in ms]}")

    members = [member() for _ in range(3)]
    try:
        wait(members, lambda o: covered(o) and all(len(a) == 2 for a in o), "3 x 2 partitions")
        assert_exact_cover([m.owned() for m in members])
        members[0].call(lambda c: c.commit())
        leaving = members.pop()
        leaving.stop()
        leaving.join()
        wait(members, lambda o: covered(o) and all(o), "rebalance after a leave")
        assert_exact_cover([m.owned() for m in members])
    finally:
        for m in members:
            m.stop()
        for m in members:
            m.join()


# --- aiokafka -----------------------------------------------------------------------------------------


def test_aiokafka_three_members(broker_factory) -> None:
    from aiokafka import AIOKafkaConsumer

    broker = broker_factory(OVERRIDES)
    topic, group = unique("t"), unique("g")
    create_topic(broker.bootstrap, topic)
    produce(broker.bootstrap, topic)

    async def scenario() -> None:
        async def member() -> AIOKafkaConsumer:
            c = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                                 auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
                                 heartbeat_interval_ms=300, enable_auto_commit=False)
            await c.start()
            return c

        def owned(cs: list[AIOKafkaConsumer]) -> list[set[int]]:
            return [{tp.partition for tp in c.assignment()} for c in cs]

        async def wait(cs: list[AIOKafkaConsumer], cond: Callable[[list[set[int]]], bool], what: str) -> None:
            deadline = time.monotonic() + SETTLE_S
            while time.monotonic() < deadline:
                for c in cs:
                    await c.getmany(timeout_ms=20)
                if cond(owned(cs)):
                    return
            raise AssertionError(f"timed out waiting for {what}: {owned(cs)}")

        consumers = [await member() for _ in range(3)]
        try:
            await wait(consumers, lambda o: covered(o) and all(len(a) == 2 for a in o), "3 x 2 partitions")
            assert_exact_cover(owned(consumers))
            await consumers[1].commit()
            leaving = consumers.pop(0)
            await leaving.stop()
            await wait(consumers, lambda o: covered(o) and all(o), "rebalance after a leave")
            assert_exact_cover(owned(consumers))
        finally:
            for c in consumers:
                await c.stop()

    asyncio.run(scenario())


# --- crashes, static membership ----------------------------------------------------------------------

MEMBER_SCRIPT = r"""
import json, sys, time
from confluent_kafka import Consumer
bootstrap, group, topic, instance = sys.argv[1:5]
conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "session.timeout.ms": int(sys.argv[5]), "heartbeat.interval.ms": 300}
if instance != "-":
    conf["group.instance.id"] = instance
c = Consumer(conf)
def on_assign(c, parts):
    print(json.dumps(sorted(p.partition for p in parts)), flush=True)
c.subscribe([topic], on_assign=on_assign)
while True:
    c.poll(0.1)
"""


class MemberProcess:
    """A confluent-kafka consumer in its own process (so it can be SIGKILLed); prints each assignment."""

    def __init__(self, bootstrap: str, group: str, topic: str, instance: str | None = None,
                 session_ms: int = SESSION_MS) -> None:
        self.args = [sys.executable, "-c", MEMBER_SCRIPT, bootstrap, group, topic, instance or "-", str(session_ms)]
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT, text=True)

    def next_assignment(self, timeout: float = SETTLE_S) -> set[int]:
        import selectors

        assert self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise AssertionError("member process printed no assignment")
        return set(json.loads(self.proc.stdout.readline()))

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def test_sigkilled_member_evicted_after_session_timeout(broker_factory) -> None:
    broker = broker_factory(OVERRIDES)
    topic, group = unique("t"), unique("g")
    create_topic(broker.bootstrap, topic)
    local = RdMember(broker.bootstrap, group, topic, "range")
    poll_until([local], lambda: len(local.owned) == PARTITIONS, "the first member owning everything")
    remote = MemberProcess(broker.bootstrap, group, topic)
    try:
        poll_until([local], lambda: len(local.owned) == PARTITIONS // 2, "the second member's share")
        remote_owned = remote.next_assignment()
        while len(remote_owned) != PARTITIONS // 2:
            remote_owned = remote.next_assignment()
        assert_exact_cover([local.owned, remote_owned])
        remote.kill()
        t0 = time.monotonic()
        poll_until([local], lambda: len(local.owned) == PARTITIONS, "the survivor taking everything")
        waited = time.monotonic() - t0
        assert waited >= SESSION_MS / 1000 - 1.5, f"evicted after {waited:.1f}s, before the session timeout"
    finally:
        remote.kill()
        local.c.close()


def test_static_member_restart_gets_partitions_back_without_rebalance(broker_factory) -> None:
    broker = broker_factory(OVERRIDES)
    topic, group = unique("t"), unique("g")
    create_topic(broker.bootstrap, topic)
    session = 15_000
    local = RdMember(broker.bootstrap, group, topic, "range", **{"group.instance.id": "local-1",
                                                                   "session.timeout.ms": str(session)})
    remote = MemberProcess(broker.bootstrap, group, topic, "remote-1", session)
    try:
        poll_until([local], lambda: len(local.owned) == PARTITIONS // 2, "two static members sharing")
        before = remote.next_assignment()
        while len(before) != PARTITIONS // 2:
            before = remote.next_assignment()
        assigns_before, callbacks_before = local.owned.copy(), local.callbacks
        remote.kill()
        remote = MemberProcess(broker.bootstrap, group, topic, "remote-1", session)
        after = remote.next_assignment()
        assert after == before
        for _ in range(40):  # 2 s of polling: the local member sees no rebalance
            local.poll()
        assert local.callbacks == callbacks_before and local.owned == assigns_before
    finally:
        remote.kill()
        local.c.close()


# --- offsets ------------------------------------------------------------------------------------------


def test_committed_offsets_survive_broker_kill(broker_factory) -> None:
    broker = broker_factory(OVERRIDES)
    topic, group = unique("t"), unique("g")
    create_topic(broker.bootstrap, topic)
    produce(broker.bootstrap, topic)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    offsets = [TopicPartition(topic, p, 3 + p) for p in range(PARTITIONS)]
    c.commit(offsets=offsets, asynchronous=False)
    c.close()
    broker.restart(kill=True)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        assert [(tp.partition, tp.offset) for tp in got] == [(p, 3 + p) for p in range(PARTITIONS)]
    finally:
        c.close()


def _coordinator(bootstrap: str, group: str) -> str:
    with RawConnection(bootstrap) as conn:
        req = FindCoordinatorRequest(key=group, key_type=0)
        for _ in range(50):
            r = conn.receive(req, 1, conn.send(req, 1))
            if r.error_code == 0:
                return f"{r.host}:{r.port}"
            time.sleep(0.1)
    raise AssertionError("no coordinator")


def test_stale_generation_commit_is_rejected(broker) -> None:
    group = unique("g")
    create_topic(broker.bootstrap, "stale", 1)
    with RawConnection(_coordinator(broker.bootstrap, group)) as conn:
        def call(req, v):
            return conn.receive(req, v, conn.send(req, v))

        protocols = [JoinGroupRequest.JoinGroupRequestProtocol(version=5, name="range", metadata=b"\x00\x00")]
        join = JoinGroupRequest(version=5, group_id=group, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=10000,
                                member_id="", group_instance_id=None, protocol_type="consumer", protocols=protocols)
        r = call(join, 5)
        assert r.error_code == 79 and r.member_id  # MEMBER_ID_REQUIRED
        join.member_id = r.member_id
        r = call(join, 5)
        assert r.error_code == 0 and r.generation_id == 1
        sync = SyncGroupRequest(version=3, group_id=group, generation_id=1, member_id=r.member_id,
                                group_instance_id=None, assignments=[])
        assert call(sync, 3).error_code == 0

        def commit(generation: int) -> int:
            T = OffsetCommitRequest.OffsetCommitRequestTopic
            P = T.OffsetCommitRequestPartition
            req = OffsetCommitRequest(version=8, group_id=group, generation_id_or_member_epoch=generation,
                                      member_id=r.member_id, group_instance_id=None, topics=[
                                          T(version=8, name="stale", partitions=[
                                              P(version=8, partition_index=0, committed_offset=5,
                                                committed_leader_epoch=-1, committed_metadata="")])])
            return call(req, 8).topics[0].partitions[0].error_code

        assert commit(0) == 22  # ILLEGAL_GENERATION
        assert commit(1) == 0
