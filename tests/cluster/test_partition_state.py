"""Partition state compare-and-swap on the partition epoch (the role of AlterPartition)."""

from __future__ import annotations

import asyncio

from cluster.membership import Membership
from cluster.partition_state import PartitionStateStore
from cluster.records import BrokerRegistration, Endpoint, PartitionState


async def test_two_concurrent_writers_with_the_same_expected_epoch_exactly_one_wins(sessions, keys):
    setup = PartitionStateStore(await sessions(), keys)
    assert await setup.create("t", 0, PartitionState(1, 0, (1, 2, 3), 0))
    assert not await setup.create("t", 0, PartitionState(2, 0, (2,), 0))  # exists already
    writers = [PartitionStateStore(await sessions(), keys) for _ in range(2)]
    for round_ in range(20):
        current = await setup.get("t", 0)
        assert current.partition_epoch == round_
        shrink_a = PartitionState(1, current.leader_epoch, (1, 2), -1)
        shrink_b = PartitionState(1, current.leader_epoch, (1, 3), -1)
        results = await asyncio.gather(writers[0].update("t", 0, round_, shrink_a),
                                       writers[1].update("t", 0, round_, shrink_b))
        assert sorted(results) == [False, True], f"round {round_}: {results}"
        after = await setup.get("t", 0)
        assert after.partition_epoch == round_ + 1
        assert after.isr == (shrink_a if results[0] else shrink_b).isr
        # The loser's view is stale: the same CAS again fails (it must re-read, not retry).
        loser = writers[1] if results[0] else writers[0]
        assert not await loser.update("t", 0, round_, shrink_a)
    assert await setup.all_of("t") == {0: await setup.get("t", 0)}
    assert not await setup.update("t", 9, 0, PartitionState(1, 0, (1,), 0))  # no such partition


async def test_a_stale_broker_epoch_cannot_write(sessions, keys):
    session = await sessions()
    member = Membership(session, keys)
    reg = await member.register(BrokerRegistration(1, (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)))
    store = PartitionStateStore(session, keys)
    await store.create("t", 0, PartitionState(1, 0, (1, 2), 0))
    assert await store.update("t", 0, 0, PartitionState(1, 0, (1,), 0), writer=(1, reg.epoch))
    assert not await store.update("t", 0, 1, PartitionState(1, 0, (1, 2), 0), writer=(1, reg.epoch - 1))
    await member.deregister()
    assert not await store.update("t", 0, 1, PartitionState(1, 0, (1, 2), 0), writer=(1, reg.epoch))
    assert (await store.get("t", 0)).partition_epoch == 1


async def test_a_batch_of_swaps_is_written_all_or_none(sessions, keys):
    store = PartitionStateStore(await sessions(), keys)
    for p in range(5):
        assert await store.create("t", p, PartitionState(1, 0, (1, 2, 3), 0))
    revs = {p: (await store.session.client.get(keys.partition("t", p))).mod_revision for p in range(5)}
    moved = PartitionState(2, 1, (2, 3), -1)
    assert await store.update_batch([("t", p, 0, revs[p], moved) for p in range(3)])
    for p in range(3):
        after = await store.get("t", p)
        assert (after.leader, after.leader_epoch, after.partition_epoch) == (2, 1, 1)
    # Partition 3 moved on after its revision was read: the batch of 3 and 4 writes nothing.
    assert await store.update("t", 3, 0, PartitionState(1, 0, (1, 2), 0))
    assert not await store.update_batch([("t", p, 0, revs[p], moved) for p in (3, 4)])
    assert (await store.get("t", 4)).partition_epoch == 0
    assert (await store.get("t", 3)).isr == (1, 2)
    # Stale revisions of partitions already written cannot be swapped again.
    assert not await store.update_batch([("t", 0, 0, revs[0], moved)])
