"""Consumer groups through stock clients against a real broker (issue 6, acceptance 1-3).

Three members per client library (confluent-kafka with each assignor, kafka-python, aiokafka) share
a 6-partition topic and run the same scenario (:func:`three_members_join_and_leave`): every
partition is owned by exactly one member once the group settles, a fourth member's join and then a
member's leave each trigger a rebalance that settles within seconds with every partition owned
exactly once, and at no point — checked after every poll and every rebalance callback — do two
members own the same partition. A member
killed with SIGKILL is evicted after its session timeout; a static member restarted within the
session timeout gets its partitions back without a rebalance; committed offsets survive a broker
kill -9; a stale generation is rejected with ILLEGAL_GENERATION.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from typing import Any, Protocol

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
REBALANCE_S = 45  # bound for the rebalance after a join or a leave to settle (normally 1-4 s)
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


def assert_no_overlap(assignments: list[set[int]]) -> None:
    assert sum(len(a) for a in assignments) == len(set().union(*assignments)), f"overlap: {assignments}"


# --- the scenario every client library runs -----------------------------------------------------------


class Group(Protocol):
    """The members of one consumer group, run by one client library."""

    def add(self) -> None:
        """Start one more member (subscribed to the topic)."""

    def leave(self, index: int) -> None:
        """Close member ``index`` cleanly (it sends LeaveGroup)."""

    def owned(self) -> list[set[int]]:
        """What each live member owns right now, in join order."""

    def step(self) -> None:
        """Let the members run a little; fails if two members ever owned the same partition meanwhile."""

    def close(self) -> None:
        """Close every member still running."""


def settle(group: Group, cond: Callable[[list[set[int]]], bool], what: str, timeout: float = SETTLE_S) -> None:
    """Drive the group until ``cond(owned)``, checking after every step that no partition is owned twice."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        group.step()
        owned = group.owned()
        assert_no_overlap(owned)
        if cond(owned):
            return
    raise AssertionError(f"timed out after {timeout}s waiting for {what}: {group.owned()}")


def three_members_join_and_leave(group: Group, after_settle: Callable[[], None] = lambda: None) -> None:
    """3 members settle on 2 partitions each; a 4th joins; the first (the leader) leaves."""
    try:
        for _ in range(3):
            group.add()
        settle(group, lambda o: covered(o) and all(len(a) == 2 for a in o), "three members with two partitions each")
        assert_exact_cover(group.owned())
        after_settle()
        # A fourth member joins: a rebalance gives it partitions, every partition still owned exactly once.
        group.add()
        settle(group, lambda o: len(o) == 4 and covered(o) and all(o), "rebalance after a fourth member joined",
               REBALANCE_S)
        assert_exact_cover(group.owned())
        # One member leaves: the other three take over its partitions.
        group.leave(0)
        settle(group, lambda o: len(o) == 3 and covered(o) and all(o), "rebalance after a member left", REBALANCE_S)
        assert_exact_cover(group.owned())
    finally:
        group.close()


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


class RdGroup:
    """confluent-kafka members polled in turn from the test's thread; overlap is checked after every poll."""

    def __init__(self, members: list[RdMember], new_member: Callable[[], RdMember] | None = None) -> None:
        self.members = members
        self._new_member = new_member

    def add(self) -> None:
        assert self._new_member is not None
        self.members.append(self._new_member())

    def leave(self, index: int) -> None:
        self.members.pop(index).c.close()

    def owned(self) -> list[set[int]]:
        return [m.owned for m in self.members]

    def step(self) -> None:
        for m in self.members:
            m.poll()
            # Invariant at every step: nobody owns a partition another member owns.
            assert_no_overlap(self.owned())

    def close(self) -> None:
        while self.members:
            self.leave(0)


def poll_until(members: list[RdMember], cond: Callable[[], bool], what: str, timeout: float = SETTLE_S) -> None:
    settle(RdGroup(members), lambda _owned: cond(), what, timeout)


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_confluent_kafka_three_members(broker_factory, strategy: str) -> None:
    broker = broker_factory(OVERRIDES)
    topic, group = unique("t"), unique("g")
    create_topic(broker.bootstrap, topic)
    produce(broker.bootstrap, topic)
    three_members_join_and_leave(RdGroup([], lambda: RdMember(broker.bootstrap, group, topic, strategy)))


# --- members polled in the background: kafka-python, aiokafka -----------------------------------------


class Ownership:
    """What each member owns according to its own rebalance listener, for members polled on other threads.

    Every assignment is checked, under one lock, against what the other members own at that moment
    (an eager member reports its revocation before it rejoins, so a correct group never overlaps).
    Violations are recorded, not raised: the clients catch exceptions from listeners.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owned: dict[int, set[int]] = {}
        self.overlaps: list[str] = []

    def assigned(self, member: int, parts: set[int]) -> None:
        with self._lock:
            others = {m: o & parts for m, o in self._owned.items() if m != member and o & parts}
            if others:
                self.overlaps.append(f"member {member} was assigned {sorted(parts)} while {others} owned them")
            self._owned.setdefault(member, set()).update(parts)

    def revoked(self, member: int, parts: set[int]) -> None:
        with self._lock:
            self._owned.setdefault(member, set()).difference_update(parts)

    def released(self, member: int) -> None:
        """The member stopped consuming for good (about to close and leave the group)."""
        with self._lock:
            self._owned.pop(member, None)

    def snapshot(self, members: list[int]) -> list[set[int]]:
        with self._lock:
            assert not self.overlaps, "\n".join(self.overlaps)
            return [set(self._owned.get(m, ())) for m in members]

    def listener(self, base: type, member: int) -> Any:
        """A ConsumerRebalanceListener (of the client library's ``base`` class) reporting to this registry."""
        ownership = self

        class Listener(base):  # type: ignore[misc, valid-type]
            def on_partitions_revoked(self, revoked: Any) -> None:
                ownership.revoked(member, {tp.partition for tp in revoked})

            def on_partitions_assigned(self, assigned: Any) -> None:
                ownership.assigned(member, {tp.partition for tp in assigned})

        return Listener()


class BackgroundGroup:
    """Members that poll themselves (a thread or a task each) and report ownership through a listener."""

    def __init__(self) -> None:
        self.ownership = Ownership()
        self.members: list[Any] = []  # each has .member_id and .check() (raises if its poll loop failed)
        self._ids = itertools.count()

    def owned(self) -> list[set[int]]:
        for m in self.members:
            m.check()
        return self.ownership.snapshot([m.member_id for m in self.members])

    def step(self) -> None:
        time.sleep(0.02)
        self.owned()  # asserts no assignment so far overlapped another member's

    def close(self) -> None:
        while self.members:
            self.leave(0)

    def leave(self, index: int) -> None:
        raise NotImplementedError


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

    def __init__(self, consumer: Any, member_id: int, on_stop: Callable[[], None]) -> None:
        self.c = consumer
        self.member_id = member_id
        self.error: BaseException | None = None
        self._on_stop = on_stop
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
        except BaseException as e:  # reported by check()
            self.error = e
        finally:
            self._on_stop()  # no longer consuming: its partitions are free before LeaveGroup goes out
            self.c.close()

    def call(self, fn: Callable[[Any], Any]) -> Any:
        fut: Future[Any] = Future()
        self._calls.put((fn, fut))
        return fut.result(SETTLE_S)

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"poll loop failed: {self.error!r}") from self.error

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(SETTLE_S)
        assert not self._thread.is_alive(), "consumer thread did not stop"


class KpGroup(BackgroundGroup):
    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        super().__init__()
        self.bootstrap, self.group, self.topic = bootstrap, group, topic

    def add(self) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer

        member_id = next(self._ids)
        c = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group, auto_offset_reset="earliest",
                          session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300, enable_auto_commit=False,
                          max_poll_interval_ms=SESSION_MS * 5)
        c.subscribe([self.topic], listener=self.ownership.listener(ConsumerRebalanceListener, member_id))
        self.members.append(KpMember(c, member_id, lambda: self.ownership.released(member_id)))

    def leave(self, index: int) -> None:
        self.members.pop(index).stop()


def test_kafka_python_three_members(broker_factory) -> None:
    broker = broker_factory(OVERRIDES)
    topic, group = unique("t"), unique("g")
    create_topic(broker.bootstrap, topic)
    produce(broker.bootstrap, topic)
    kp = KpGroup(broker.bootstrap, group, topic)
    three_members_join_and_leave(kp, after_settle=lambda: kp.members[0].call(lambda c: c.commit()))


# --- aiokafka -----------------------------------------------------------------------------------------


class AioMember:
    def __init__(self, consumer: Any, member_id: int) -> None:
        self.c = consumer
        self.member_id = member_id
        self.error: BaseException | None = None
        self.task: asyncio.Task[None] | None = None

    async def poll_forever(self) -> None:
        try:
            while True:
                await self.c.getmany(timeout_ms=200)
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # reported by check()
            self.error = e

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"poll loop failed: {self.error!r}") from self.error


class AioGroup(BackgroundGroup):
    """aiokafka members on one event loop in a background thread, each with a task calling getmany()."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        super().__init__()
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(SETTLE_S)

    def add(self) -> None:
        from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

        member_id = next(self._ids)

        async def start() -> AioMember:
            c = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group,
                                 auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
                                 heartbeat_interval_ms=300, enable_auto_commit=False)
            c.subscribe([self.topic], listener=self.ownership.listener(ConsumerRebalanceListener, member_id))
            await c.start()
            m = AioMember(c, member_id)
            m.task = asyncio.create_task(m.poll_forever())
            return m

        self.members.append(self.run(start()))

    def leave(self, index: int) -> None:
        m = self.members.pop(index)

        async def stop() -> None:
            assert m.task is not None
            m.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await m.task
            self.ownership.released(m.member_id)  # no longer consuming, before LeaveGroup goes out
            await m.c.stop()

        self.run(stop())

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(SETTLE_S)
            self.loop.close()


def test_aiokafka_three_members(broker_factory) -> None:
    broker = broker_factory(OVERRIDES)
    topic, group = unique("t"), unique("g")
    create_topic(broker.bootstrap, topic)
    produce(broker.bootstrap, topic)
    aio = AioGroup(broker.bootstrap, group, topic)
    three_members_join_and_leave(aio, after_settle=lambda: aio.run(aio.members[1].c.commit()))


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
        # (the last heartbeat may precede the kill by a starved member's stall: allow 3 s for it)
        assert waited >= SESSION_MS / 1000 - 3, f"evicted after {waited:.1f}s, before the session timeout"
    finally:
        remote.kill()
        local.c.close()


def _next_assignment_polling(remote: MemberProcess, members: list[RdMember], timeout: float = SETTLE_S) -> set[int]:
    """The remote member's next printed assignment, polling ``members`` meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.poll()
        try:
            return remote.next_assignment(timeout=0.1)
        except AssertionError:
            continue
    raise AssertionError("member process printed no assignment")


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
        # Keep polling the local member while the remote one settles: a further rebalance (the
        # remote's join landing after the local's first half) waits for the local to rejoin, and
        # an unpolled member never does (seen once in CI: "member process printed no assignment").
        before = _next_assignment_polling(remote, [local])
        while len(before) != PARTITIONS // 2:
            before = _next_assignment_polling(remote, [local])
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
