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


def test_init_producer_id_while_the_next_block_is_late_answers_load_in_progress(etcd, tmp_path):
    """Found by a fault campaign: with etcd slow, a broker used up its producer-id block before the
    next one (fetched ahead at 90%) had arrived; generate() raised COORDINATOR_LOAD_IN_PROGRESS,
    which the InitProducerId handler did not catch, so the connection was closed with a traceback
    in the log. It must be answered, retriable, as Kafka's RPCProducerIdManager does."""
    from kafka.protocol.producer import InitProducerIdRequest

    from tests.helpers.cluster_state import checked_cluster, init_producer_id, wait_until
    from tests.helpers.wire import RawConnection

    delay = {"KBROKERTEST_DELAY_POINT": "producer_ids.allocate:4000"}  # every block, the first too
    with checked_cluster(etcd, tmp_path, 1, env={1: delay}) as cluster:
        b = cluster.brokers[1]
        req = InitProducerIdRequest(version=4, transactional_id=None, transaction_timeout_ms=60_000,
                                    producer_id=-1, producer_epoch=-1)
        with RawConnection(b.bootstrap, timeout=30) as conn:
            # One block and one more id, pipelined (well within the 4 s the next block takes).
            corrs = [conn.send(req, 4) for _ in range(BLOCK_SIZE + 1)]
            answers = [conn.receive(req, 4, c) for c in corrs]
            assert [(r.error_code, r.producer_id) for r in answers[:-1]] == [(0, i) for i in range(BLOCK_SIZE)]
            # The block is used up, the next one has not arrived: answered, not a closed connection.
            assert (answers[-1].error_code, answers[-1].producer_id) == (14, -1)  # COORDINATOR_LOAD_IN_PROGRESS
        err, pid, _ = wait_until(lambda: (r := init_producer_id(b))[0] == 0 and r, "the next block", 60)
        assert pid == BLOCK_SIZE
