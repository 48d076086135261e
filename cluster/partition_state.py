"""Partition state in etcd (leader, leader epoch, ISR, partition epoch), changed only by compare-and-swap.

This is the role of Kafka's AlterPartition: ``update(topic, p, expected_epoch, new_state)`` writes the
new state only if the stored partition epoch is still ``expected_epoch``, and the written state gets
partition epoch ``expected_epoch + 1``. The swap is one etcd transaction comparing the key's mod
revision with the one read alongside the expected epoch, so of two writers that read the same state
exactly one wins. A writer that loses gets False and must re-read and re-decide: an ISR change that
lost its compare-and-swap is dropped, never retried blindly (design.md section 6). A writer may also
pass its broker epoch, so a broker whose registration was replaced (Kafka's STALE_BROKER_EPOCH) can
never win. ``update_batch`` is the controller's form: many swaps in one etcd transaction, against the
mod revisions its watch cache read along with each expected state, all or none.
"""

from __future__ import annotations

from dataclasses import replace

from .etcd_keys import KeyLayout
from .etcd_session import EtcdSession
from .records import PartitionState


class PartitionStateStore:
    def __init__(self, session: EtcdSession, keys: KeyLayout) -> None:
        self.session = session
        self.keys = keys

    async def get(self, topic: str, partition: int) -> PartitionState | None:
        kv = await self.session.client.get(self.keys.partition(topic, partition))
        return None if kv is None else PartitionState.from_json(kv.value)

    async def all_of(self, topic: str) -> dict[int, PartitionState]:
        result = await self.session.client.get_prefix(self.keys.partitions_of(topic))
        return {self.keys.topic_partition_of(kv.key)[1]: PartitionState.from_json(kv.value) for kv in result}

    async def create(self, topic: str, partition: int, state: PartitionState) -> bool:
        """Write the first state of a new partition (partition epoch 0); False if it already exists."""
        client = self.session.client
        tx = client.transactions
        key = self.keys.partition(topic, partition)
        ok, _ = await client.transaction(compare=[tx.create(key) == 0],
                                         success=[tx.put(key, replace(state, partition_epoch=0).to_json())],
                                         failure=[])
        return ok

    async def update(self, topic: str, partition: int, expected_epoch: int, new_state: PartitionState, *,
                     writer: tuple[int, int] | None = None) -> bool:
        """Compare-and-swap on the partition epoch; True if ``new_state`` (with epoch + 1) was written.

        ``writer`` = (node id, broker epoch): the swap also requires that registration to be the live
        one. False when the partition does not exist, its epoch moved on, or another writer won.
        """
        client = self.session.client
        tx = client.transactions
        key = self.keys.partition(topic, partition)
        kv = await client.get(key)
        if kv is None or PartitionState.from_json(kv.value).partition_epoch != expected_epoch:
            return False
        compare = [tx.mod(key) == kv.mod_revision]
        if writer is not None:
            compare.append(tx.create(self.keys.broker(writer[0])) == writer[1])
        written = replace(new_state, partition_epoch=expected_epoch + 1)
        ok, _ = await client.transaction(compare=compare, success=[tx.put(key, written.to_json())], failure=[])
        return ok

    async def update_batch(self, changes: list[tuple[str, int, int, int, PartitionState]]) -> bool:
        """Many compare-and-swaps in one etcd transaction, all or none: for each
        (topic, partition, expected epoch, mod revision, new state) the key must still be at that
        mod revision (the state read with the expected epoch, e.g. from a watch cache, without a
        read here), and gets ``new_state`` with epoch + 1. False when any of them moved on: the
        caller then swaps them one by one (`update`), each with a fresh read. At most
        etcd_store.TXN_OPS // 2 changes (etcd's --max-txn-ops bounds compares and puts)."""
        client = self.session.client
        tx = client.transactions
        compare = []
        success = []
        for topic, p, expected_epoch, mod_revision, new_state in changes:
            key = self.keys.partition(topic, p)
            compare.append(tx.mod(key) == mod_revision)
            success.append(tx.put(key, replace(new_state, partition_epoch=expected_epoch + 1).to_json()))
        ok, _ = await client.transaction(compare=compare, success=success, failure=[])
        return ok
