"""The broker's implementation of coordinator.partition_access.PartitionAccess for one node.

Appends go through the replica manager like any produce (so fetch waiters wake and producer
state is kept); WriteTxnMarkers goes through the same handler code a remote WriteTxnMarkers
request reaches, so a cluster only has to swap the local call for a network request.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from coordinator.partition_access import TxnMarkerEntry
from protocol.errors import ErrorCode, KafkaError
from storage.batch import BatchHeader

if TYPE_CHECKING:
    from broker.broker import Broker


class LocalPartitionAccess:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.node_id = broker.node_id

    async def ensure_internal_topic(self, name: str, num_partitions: int, configs: dict[str, str]) -> None:
        md = self.broker.metadata
        if md.get_topic(name) is None:
            try:
                await self.broker.create_topic(name, num_partitions, configs, internal=True)
            except KafkaError as e:
                if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise

    def partition_exists(self, topic: str, partition: int) -> bool:
        return self.broker.replica_manager.get(topic, partition) is not None

    async def append(self, topic: str, partition: int, batch: bytes) -> int:
        part = self.broker.replica_manager.get(topic, partition)
        if part is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic}-{partition} is not hosted here")
        rm = self.broker.replica_manager
        offset = rm.append_control(part, bytearray(batch))
        await rm.flush_due([part])
        return offset

    def iter_batches(self, topic: str, partition: int, start_offset: int = 0) -> Iterator[tuple[BatchHeader, bytes]]:
        part = self.broker.replica_manager.get(topic, partition)
        if part is None:
            return iter(())
        return part.log.iter_batches(start_offset)

    def log_end_offset(self, topic: str, partition: int) -> int:
        part = self.broker.replica_manager.get(topic, partition)
        return -1 if part is None else part.log.log_end_offset

    async def write_txn_markers(self, markers: list[TxnMarkerEntry]) -> dict[tuple[int, str, int], int]:
        from broker.handlers.txn_markers import write_markers_locally

        return await write_markers_locally(self.broker, markers)
