"""The broker's implementation of coordinator.partition_access.PartitionAccess.

Appends go through the replica manager like any produce (so fetch waiters wake and producer
state is kept); WriteTxnMarkers goes through the same handler code a remote WriteTxnMarkers
request reaches. In a cluster (issue 15) appends go only to partitions this broker leads, are
refused with NOT_ENOUGH_REPLICAS while the ISR is below min.insync.replicas and count once the
ISR has them (acks=all, bounded by offsets.commit.timeout.ms); markers go to each partition's
leader through broker.txn_marker_channel.
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
        # Kafka's offsets.commit.timeout.ms bounds the replication of a coordinator write.
        config = getattr(broker, "config", None)
        self.write_timeout_s = int((config.get("offsets.commit.timeout.ms") if config else None) or 5000) / 1000

    async def ensure_internal_topic(self, name: str, num_partitions: int, configs: dict[str, str]) -> None:
        md = self.broker.metadata
        if md.get_topic(name) is None:
            # In a cluster, the internal topics' own replication factors (single node: 1).
            setting = ("transaction.state.log.replication.factor" if name == "__transaction_state"
                       else "offsets.topic.replication.factor")
            rf = int(self.broker.config.get(setting) or 3)
            try:
                await self.broker.create_topic(name, num_partitions, configs, internal=True, replication_factor=rf)
            except KafkaError as e:
                if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise

    def partition_exists(self, topic: str, partition: int) -> bool:
        return self.broker.replica_manager.get(topic, partition) is not None

    async def append(self, topic: str, partition: int, batch: bytes) -> int:
        rm = self.broker.replica_manager
        part, missing = rm.get_leader(topic, partition)
        if part is None:
            code = ErrorCode.NOT_LEADER_OR_FOLLOWER if missing == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else missing
            raise KafkaError(code, f"{topic}-{partition} is not led here")
        if part.replicated and (short := rm.min_isr_error(part)):
            raise KafkaError(short, f"{topic}-{partition}: the ISR is below min.insync.replicas")
        offset = rm.append_control(part, bytearray(batch))
        await rm.flush_due([part])
        if part.replicated:
            # Coordinator state counts once the ISR has it (Kafka appends it with acks=all).
            code = await rm.wait_replicated(part, part.log.log_end_offset, self.write_timeout_s)
            if code != ErrorCode.NONE:
                raise KafkaError(code, f"{topic}-{partition}: the coordinator write was not replicated ({code.name})")
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
        if self.broker.cluster is not None:
            from broker.txn_marker_channel import write_markers

            return await write_markers(self.broker, markers)
        from broker.handlers.txn_markers import write_markers_locally

        return await write_markers_locally(self.broker, markers)
