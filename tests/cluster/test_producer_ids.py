"""Producer-id blocks allocated cluster-wide through a CAS loop: no overlap across brokers or restarts."""

from __future__ import annotations

import asyncio

from cluster.producer_ids import BLOCK_SIZE, ProducerIdAllocator


async def test_three_concurrent_allocators_never_overlap(sessions, keys):
    allocators = [ProducerIdAllocator(await sessions(), keys) for _ in range(3)]

    async def take(broker_id: int, allocator: ProducerIdAllocator, n: int) -> list:
        return [await allocator.allocate(broker_id) for _ in range(n)]

    per_broker = await asyncio.gather(*(take(i, a, 10) for i, a in enumerate(allocators, start=1)))
    blocks = sorted((b for bs in per_broker for b in bs), key=lambda b: b.first)
    assert len(blocks) == 30
    assert all(b.size == BLOCK_SIZE for b in blocks)
    # Contiguous and disjoint: 0..29999, each id in exactly one block.
    assert [b.first for b in blocks] == [i * BLOCK_SIZE for i in range(30)]
    for bs, broker_id in zip(per_broker, (1, 2, 3), strict=True):
        assert all(b.broker_id == broker_id for b in bs)

    # A "restarted" broker (a new session) continues after the last block handed out.
    restarted = ProducerIdAllocator(await sessions(), keys)
    assert (await restarted.allocate(1)).first == 30 * BLOCK_SIZE
