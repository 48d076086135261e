"""Re-registration against a real etcd and real broker processes (broker.session.timeout.ms=3000).

* A broker killed with -9 and restarted at once finds its old registration still bound to the old
  lease: it waits for that lease to expire (bounded by its remaining TTL + a margin) and joins,
  instead of refusing itself as a duplicate node.id.
* A live duplicate (it keeps refreshing its lease) is still refused after that bound.
* etcd paused (SIGSTOP) for longer than the lease TTL: on SIGCONT etcd expires the lease; the broker
  grants a new lease, registers again with a higher broker epoch and serves again.
* etcd paused for a moment while a broker joins (its requests miss their deadline): the broker joins
  again once etcd answers, as Kafka's broker retries its initial registration for
  ``initial.broker.registration.timeout.ms``, instead of exiting (in a container: a restart, and a
  wait for its own previous registration, again and again while etcd was slow).
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.etcd_keys import KeyLayout, get_or_create_cluster_id
from cluster.etcd_session import EtcdSession
from cluster.membership import Membership
from cluster.records import BrokerRegistration
from tests.helpers.broker_proc import BrokerError, BrokerProcess
from tests.helpers.cluster_proc import cluster_broker
from tests.helpers.etcd_proc import EtcdProcess
from tests.helpers.waiting import wait_for

TTL_S = 3.0


async def broker_epoch(etcd: EtcdProcess, node_id: int) -> int | None:
    """The create revision of the broker's registration key (its broker epoch), None when absent."""
    async with EtcdSession(etcd.endpoints, session_timeout_ms=2000, heartbeat_interval_ms=500) as s:
        kv = await s.client.get(KeyLayout(await get_or_create_cluster_id(s.client)).broker(node_id))
        return None if kv is None else kv.create_revision


def produce_one(broker: BrokerProcess, topic: str) -> None:
    """One acks=1 record, acknowledged (retries until the broker leads the partition again)."""
    errors: list[object] = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "1", "message.timeout.ms": 60000})
    p.produce(topic, b"v", on_delivery=lambda err, _msg: errors.append(err))
    assert p.flush(90) == 0
    assert errors == [None]


async def test_killed_broker_restarted_at_once_waits_for_its_old_lease_and_joins(etcd, tmp_path: Path) -> None:
    b = cluster_broker(etcd, tmp_path, 1)
    try:
        b.start(timeout=60)
        first = await broker_epoch(etcd, 1)
        b.kill()
        assert await broker_epoch(etcd, 1) == first  # the old lease still holds the registration
        killed = time.monotonic()
        b.start(timeout=60)  # returns once the listener answers, i.e. after the registration
        joined_after = time.monotonic() - killed
        assert "waiting for the previous registration of node 1 to expire" in b.log_text()
        second = await broker_epoch(etcd, 1)
        assert second is not None and first is not None and second > first
        # Bounded by the old lease (3 s) + margin, plus a slow start: a generous bound, not a speed target.
        assert joined_after < 60
        AdminClient({"bootstrap.servers": b.bootstrap}).create_topics([NewTopic("after-restart", 1, 1)])
        produce_one(b, "after-restart")
    finally:
        b.kill()


def test_live_duplicate_is_still_refused_after_the_wait(etcd, tmp_path: Path) -> None:
    first = cluster_broker(etcd, tmp_path / "a", 1)
    second = cluster_broker(etcd, tmp_path / "b", 1)
    try:
        first.start(timeout=60)
        with pytest.raises(BrokerError):
            second.start(timeout=60)
        log = second.log_text()
        assert "waiting for the previous registration of node 1 to expire" in log
        assert "node.id 1 is already registered by a live broker" in log
        assert first.running
    finally:
        for b in (first, second):
            b.kill()


async def test_broker_registers_again_after_etcd_expired_its_session(etcd: EtcdProcess, tmp_path: Path) -> None:
    b = cluster_broker(etcd, tmp_path, 1)
    try:
        b.start(timeout=60)
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for f in admin.create_topics([NewTopic("survives", 1, 1)]).values():
            f.result(60)
        produce_one(b, "survives")
        first = await broker_epoch(etcd, 1)
        etcd.pause()
        try:
            # The fault itself lasts past the TTL (etcd's clock runs on while it is stopped).
            paused = time.monotonic()
            wait_for(lambda: time.monotonic() - paused > TTL_S + 2.5, "the lease TTL to pass", interval=0.2)
        finally:
            etcd.resume()
        wait_for(lambda: "registered again (broker epoch" in b.log_text(), "the broker to register again", 90)
        assert "etcd session expired: node 1 rejoins under a new lease" in b.log_text()
        second = await broker_epoch(etcd, 1)
        assert first is not None and second is not None and second > first
        produce_one(b, "survives")
        assert b.running
    finally:
        b.kill()


async def test_a_join_that_etcd_stalls_is_tried_again_not_fatal(etcd: EtcdProcess, tmp_path: Path) -> None:
    # Node 1's registration held by a 30 s lease this test owns: the starting broker waits for it
    # (up to that lease's TTL, however slow the machine), a window in which etcd is paused for 5 s,
    # past the broker's request deadline (broker.heartbeat.interval.ms, 2 s with Kafka's default
    # timings, which also leave its first connection room on a loaded machine).
    b = cluster_broker(etcd, tmp_path, 1, **{"broker.session.timeout.ms": "9000",
                                             "broker.heartbeat.interval.ms": "2000"})
    outcome: list[BaseException | None] = []

    def start() -> None:
        try:
            b.start(timeout=120)
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            outcome.append(e)

    starter = threading.Thread(target=start)
    try:
        async with EtcdSession(etcd.endpoints, session_timeout_ms=30000, heartbeat_interval_ms=1000) as holder:
            keys = KeyLayout(await get_or_create_cluster_id(holder.client))
            await Membership(holder, keys).register(BrokerRegistration(1, ()))
            starter.start()
            await _wait_log(b, "waiting for the previous registration of node 1")
            etcd.pause()
            try:
                await asyncio.sleep(5.0)  # the stall itself
            finally:
                etcd.resume()
            await _wait_log(b, "joining again in")  # the join was given up and is tried again
        # The holder's session is closed (its lease revoked): the broker registers and starts.
        await asyncio.to_thread(starter.join, 150)
        assert outcome == [None], f"{outcome}\n{b.log_tail()}"
        log = b.log_text()
        assert "failed a request while joining" in log and "could not start" not in log, b.log_tail()
        AdminClient({"bootstrap.servers": b.bootstrap}).create_topics([NewTopic("after-stall", 1, 1)])
        produce_one(b, "after-stall")
    finally:
        b.kill()
        if starter.is_alive():
            await asyncio.to_thread(starter.join, 150)
        b.kill()


async def _wait_log(b: BrokerProcess, text: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while text not in b.log_text():
        assert time.monotonic() < deadline, f"no {text!r} in the broker log within {timeout} s\n{b.log_tail()}"
        await asyncio.sleep(0.05)
