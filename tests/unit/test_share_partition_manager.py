"""broker.share.share_partition_manager: state writes of one share-partition reach the share
coordinator in an order that never moves the durable start offset back.

Acknowledgements of several members arrive concurrently; the share coordinator (modelled here as
Kafka's merge: a write's start offset replaces the stored one, its batches overlay the stored
ones, in the order writes arrive) must end with the leader's in-memory start offset, and no
durable start offset may ever be lower than one stored before it."""

from __future__ import annotations

import asyncio
import random
import uuid
from types import SimpleNamespace

from broker.share.share_partition import SharePartition
from broker.share.share_partition_manager import ManagedSharePartition, SharePartitionManager, _now_ms
from coordinator.share_state import combine
from protocol.errors import ErrorCode as E

TID = uuid.uuid4()


class ModelCoordinator:
    """Kafka's ShareCoordinatorShard merge; each write takes a random time to arrive."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.start = 0
        self.batches: list[tuple[int, int, int, int]] = []
        self.starts: list[int] = []

    async def write(self, group_id, topic_id, partition, state_epoch, leader_epoch, start_offset, batches):
        await asyncio.sleep(self.rng.random() / 1000)
        if start_offset != -1:
            self.start = start_offset
        self.starts.append(self.start)
        self.batches = combine(self.batches, batches, self.start)
        return E.NONE, None


PART = SimpleNamespace(leader_epoch=0)


def _manager(coordinator: ModelCoordinator) -> SharePartitionManager:
    config = {"group.share.partition.max.record.locks": "2000", "group.share.delivery.count.limit": "5"}
    replicas = SimpleNamespace(get_leader=lambda topic, index: (PART, E.NONE))
    return SharePartitionManager(SimpleNamespace(get=config.get), None, replicas, coordinator)  # type: ignore[arg-type]


def test_concurrent_acknowledgements_never_move_the_durable_start_offset_back() -> None:
    async def run(seed: int) -> None:
        rng = random.Random(seed)
        coord = ModelCoordinator(rng)
        spm = _manager(coord)
        sp = SharePartition(0)
        msp = ManagedSharePartition(("g", "t", 0), TID, PART, 0, 1, sp)
        spm.partitions[msp.key] = msp
        # Three members acquire 10 batches of 10 records each, in turn.
        held: dict[str, list[tuple[int, int]]] = {"m0": [], "m1": [], "m2": []}
        for i in range(10):
            member = f"m{i % 3}"
            got = sp.acquire(member, sp.next_fetch_offset(), [(i * 10, i * 10 + 9)], max_records=10, batch_size=10,
                             lock_ms=60_000, now_ms=_now_ms())
            held[member] += [(a.first_offset, a.last_offset) for a in got]
        # Each member acknowledges its batches one request at a time, the three concurrently.

        async def member_acks(member: str) -> None:
            for first, last in held[member]:
                await asyncio.sleep(rng.random() / 1000)
                res = await spm.acknowledge("g", member, {("t", 0): (TID, [(first, last, [1])])})
                assert res[("t", 0)] == (E.NONE, None)

        await asyncio.gather(*(member_acks(m) for m in held))
        assert sp.start_offset == 100
        assert coord.starts == sorted(coord.starts), coord.starts
        assert coord.start == 100, (coord.start, coord.batches)

    for seed in range(30):
        asyncio.run(run(seed))
