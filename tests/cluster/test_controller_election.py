"""Controller election on a lease-bound key: one winner, failover on revoke or expiry, rising epochs."""

from __future__ import annotations

import asyncio

from cluster.controller_election import ControllerElection
from tests.cluster.support import wait_until


def controllers(elections: list[ControllerElection]) -> list[ControllerElection]:
    return [e for e in elections if e.is_controller()]


async def test_one_winner_among_three_then_failover_on_revoke_and_on_expiry(sessions, keys):
    elections = [ControllerElection(await sessions(session_timeout_ms=1000, heartbeat_interval_ms=200), keys, node_id)
                 for node_id in (1, 2, 3)]
    most = 0

    async def sample() -> None:
        nonlocal most
        while True:
            most = max(most, len(controllers(elections)))
            await asyncio.sleep(0.002)

    sampler = asyncio.create_task(sample())
    try:
        for e in elections:
            e.start()
        await wait_until(lambda: len(controllers(elections)) == 1, "a controller among 3 contenders")
        first = controllers(elections)[0]
        recorded = await first.current()
        assert recorded is not None and (recorded.node_id, recorded.epoch) == (first.node_id, first.epoch)
        # The losers have settled (they watch the key): still exactly one controller.
        await wait_until(lambda: all(e.session.acks >= 3 for e in elections), "a few keepalives")
        assert controllers(elections) == [first]

        # Failover 1: the controller's lease is revoked (its key goes at once).
        await first.session.close(revoke=True)
        assert not first.is_controller()
        others = [e for e in elections if e is not first]
        await wait_until(lambda: len(controllers(others)) == 1, "a new controller after the revoke")
        second = controllers(others)[0]
        assert second.epoch > recorded.epoch
        assert (await second.current()).node_id == second.node_id

        # Failover 2: the new controller "crashes" (no revoke); etcd expires its lease after the TTL.
        second_epoch = second.epoch
        await second.session.close(revoke=False)
        last = [e for e in others if e is not second][0]
        await wait_until(last.is_controller, "the last broker becoming controller after the lease expiry")
        info = await last.current()
        assert info.node_id == last.node_id and info.epoch == last.epoch > second_epoch
        assert most == 1  # never two controllers at once, as seen by the brokers themselves
    finally:
        sampler.cancel()
        await asyncio.gather(*(e.stop(resign=False) for e in elections))


async def test_resign_hands_over_and_the_old_epoch_cannot_delete_the_new_key(sessions, keys):
    a = ControllerElection(await sessions(), keys, 1)
    b = ControllerElection(await sessions(), keys, 2)
    a.start()
    await wait_until(a.is_controller, "node 1 controller")
    b.start()
    old_epoch = a.epoch
    await a.stop(resign=True)
    await wait_until(b.is_controller, "node 2 controller after node 1 resigned")
    assert b.epoch > old_epoch
    # A late resign with the stale epoch must not remove the new controller's key.
    a._won_epoch = old_epoch
    await a.stop(resign=True)
    assert (await b.current()).node_id == 2
    await b.stop()


async def test_controller_keeps_its_key_across_a_broken_watch(sessions, keys, etcd):
    """Found by the fault campaign (kill of the etcd leader): the controller's watch on its own key
    broke, its next campaign found the key existing (still its own, its lease alive) and took that
    for a loss; it then waited for the key to be deleted, which its own live lease prevented, and the
    cluster had no controller (no failover) until that broker's session ended."""
    a = ControllerElection(await sessions(session_timeout_ms=8000, heartbeat_interval_ms=200), keys, 1)
    b = ControllerElection(await sessions(session_timeout_ms=8000, heartbeat_interval_ms=200), keys, 2)
    a.start()
    await wait_until(a.is_controller, "node 1 controller")
    b.start()
    epoch, acks = a.epoch, a.session.acks
    etcd.restart(kill=True)  # every stream breaks; the leases survive (well within their TTL)
    # Ten keepalives after the restart: the election (retrying every 0.5 s) has campaigned again.
    await wait_until(lambda: a.session.acks >= acks + 10, "node 1's keepalives answered again", timeout=30)
    await wait_until(lambda: a.is_controller() or b.is_controller(), "a controller after the etcd restart",
                     timeout=15)
    assert a.is_controller() and a.epoch == epoch and not b.is_controller()
    assert (await a.current()).node_id == 1
    await asyncio.gather(a.stop(), b.stop())


class _StuckTeardownElection(ControllerElection):
    """A campaign whose watch teardown never returns once cancelled, as the fault campaign saw a
    cancelled campaign wait on aetcd's watcher for minutes (the controller paused past its lease)."""

    async def _wait_deleted(self, mod_revision: int) -> None:
        try:
            await super()._wait_deleted(mod_revision)
        finally:
            await asyncio.Event().wait()  # never set: only a second cancellation ends it


async def test_stop_does_not_wait_forever_for_a_campaign_stuck_in_its_teardown(sessions, keys):
    """Found by `make chaos` (seed 1, pause of the controller): a broker whose session expired
    rejoins only after stopping its campaign, and that stop waited on the stuck teardown; the
    broker stayed out of the cluster until it was shut down. stop() now goes on after its bound."""
    a = _StuckTeardownElection(await sessions(), keys, 1, stop_wait_s=0.5)
    a.start()
    await wait_until(a.is_controller, "node 1 controller")
    task = a._task
    assert task is not None
    await asyncio.wait_for(a.stop(resign=True), 30)  # was: forever
    assert not task.done()  # still stuck: left behind, not waited for
    assert not a.is_controller()
    b = ControllerElection(await sessions(), keys, 2)
    b.start()
    await wait_until(b.is_controller, "node 2 controller after node 1 resigned")
    task.cancel()  # what ends it for the test's teardown
    await asyncio.wait({task}, timeout=10)
    await b.stop()
