"""Cluster-wide producer-id blocks: each broker takes blocks of 1000 ids from one etcd key.

Kafka's ProducerIdManager hands out blocks of 1000 (``ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE``);
under ZooKeeper the last block was one znode updated with a conditional write. Here the
``producer_ids`` key holds the last block handed out, and a broker takes the next one with a
compare-and-swap on the key's mod revision (create revision 0 for the very first block). Losing the
swap only means another broker took that block: the allocator re-reads and tries the following one,
a bounded number of times. Ids are therefore unique across brokers and restarts, as long as etcd's
data survives.
"""

from __future__ import annotations

import asyncio
import logging
import os

from .etcd_keys import KeyLayout
from .etcd_session import EtcdSession
from .records import ProducerIdBlock

log = logging.getLogger("cluster.producer_ids")

BLOCK_SIZE = 1000
MAX_PRODUCER_ID = 2**63 - 1


class ProducerIdsExhausted(RuntimeError):
    """No further block fits below Long.MAX_VALUE (Kafka: UnknownServerException, 'exhausted')."""


class ProducerIdAllocator:
    def __init__(self, session: EtcdSession, keys: KeyLayout, *, block_size: int = BLOCK_SIZE,
                 max_attempts: int = 100) -> None:
        self.session = session
        self.keys = keys
        self.block_size = block_size
        self.max_attempts = max_attempts

    async def allocate(self, broker_id: int) -> ProducerIdBlock:
        """The next free block, reserved for ``broker_id``."""
        if (delay_s := _test_delay()) is not None:
            await asyncio.sleep(delay_s)
        client = self.session.client
        tx = client.transactions
        key = self.keys.producer_ids
        for attempt in range(1, self.max_attempts + 1):
            kv = await client.get(key)
            first = 0 if kv is None else ProducerIdBlock.from_json(kv.value).last + 1
            if first > MAX_PRODUCER_ID - self.block_size + 1:
                raise ProducerIdsExhausted(f"producer ids exhausted: the last block ends at {first - 1}")
            block = ProducerIdBlock(broker_id, first, self.block_size)
            guard = tx.create(key) == 0 if kv is None else tx.mod(key) == kv.mod_revision
            ok, _ = await client.transaction(compare=[guard], success=[tx.put(key, block.to_json())], failure=[])
            if ok:
                return block
            log.debug("producer-id block %d..%d taken by another broker (attempt %d)", block.first, block.last,
                      attempt)
        raise RuntimeError(f"no producer-id block after {self.max_attempts} contended attempts")


def _test_delay() -> float | None:
    """Test-only: ``KBROKERTEST_DELAY_POINT=producer_ids.allocate:<ms>`` holds every block
    allocation that long, so a test can ask for an id while none has arrived yet."""
    name, _, ms = os.environ.get("KBROKERTEST_DELAY_POINT", "").rpartition(":")
    return int(ms) / 1000 if name == "producer_ids.allocate" and ms.isdigit() else None
