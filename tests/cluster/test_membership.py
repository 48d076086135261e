"""Broker registration under a lease: a duplicate live node.id is refused; it is accepted after expiry."""

from __future__ import annotations

import asyncio

import pytest

from cluster.membership import DuplicateBrokerError, Membership
from cluster.records import BrokerRegistration, Endpoint
from tests.cluster.support import wait_until


def registration(node_id: int, port: int, rack: str | None = None) -> BrokerRegistration:
    return BrokerRegistration(node_id, (Endpoint("PLAINTEXT", "127.0.0.1", port),), rack)


async def test_duplicate_node_id_refused_while_alive_then_accepted_after_lease_expiry(sessions, keys):
    # TTL 1 s (the test etcd's minimum) so the expiry comes quickly.
    first = Membership(await sessions(session_timeout_ms=1000, heartbeat_interval_ms=200), keys)
    reg = await first.register(registration(1, 9092, rack="r1"))
    assert reg.epoch > 0

    second = Membership(await sessions(session_timeout_ms=1000, heartbeat_interval_ms=200), keys)
    with pytest.raises(DuplicateBrokerError, match="node.id 1 is already registered"):
        await second.register(registration(1, 9093))
    # Keepalives hold the registration for several TTLs: still refused after > 1 TTL.
    await wait_until(lambda: first.session.acks >= 8, "eight keepalives of the first broker")
    with pytest.raises(DuplicateBrokerError):
        await second.register(registration(1, 9093))
    assert (await second.live_brokers())[1].endpoints[0].port == 9092

    # The first broker "crashes": keepalives stop, the lease is not revoked, etcd expires it.
    await first.session.close(revoke=False)

    async def accepted() -> bool:
        try:
            await second.register(registration(1, 9093))
            return True
        except DuplicateBrokerError:
            return False

    await wait_until(accepted, "the registration of node 1 after the first lease expired")
    live = await second.live_brokers()
    assert live[1].endpoints[0].port == 9093
    assert live[1].epoch > reg.epoch  # a new registration, a higher broker epoch


async def test_list_and_watch_live_brokers(sessions, keys):
    watcher = Membership(await sessions(), keys)
    snapshots: list[dict[int, BrokerRegistration]] = []

    async def watch() -> None:
        async for brokers in watcher.watch():
            snapshots.append(brokers)

    task = asyncio.create_task(watch())
    try:
        await wait_until(lambda: len(snapshots) >= 1, "the initial listing")
        assert snapshots[0] == {}
        members = [Membership(await sessions(), keys) for _ in range(3)]
        for node_id, m in enumerate(members, start=1):
            await m.register(registration(node_id, 9090 + node_id, rack=f"r{node_id}"))
        await wait_until(lambda: set(snapshots[-1]) == {1, 2, 3}, "three brokers in the watch")
        assert snapshots[-1][2].rack == "r2" and snapshots[-1][2].endpoints[0].port == 9092
        assert set(await watcher.live_brokers()) == {1, 2, 3}

        await members[1].deregister()  # controlled shutdown of node 2
        await wait_until(lambda: set(snapshots[-1]) == {1, 3}, "node 2 gone from the watch")
        await members[2].session.close(revoke=True)  # lease revoked: its key goes with it
        await wait_until(lambda: set(snapshots[-1]) == {1}, "node 3 gone with its lease")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
