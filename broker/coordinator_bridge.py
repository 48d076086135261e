"""The broker's implementation of coordinator.partition_access.PartitionAccess: how the group and
transaction coordinators reach partitions without importing the broker.

Coordinator records go through the partitions' one append path (origin COORDINATOR, so fetch
waiters wake and producer state is kept) on partitions this broker leads; in a cluster (issue 15)
they are refused with NOT_ENOUGH_REPLICAS while the ISR is below min.insync.replicas and count once
the ISR has them (acks=all, bounded by offsets.commit.timeout.ms). Markers go to each partition's
leader through broker.txn_marker_channel (on a single node, all of them to this broker's own
marker writer, the code a WriteTxnMarkers request reaches). ``share_state`` is the share-state
RPC client (broker/share/persister.py) the group coordinator initializes, reads and deletes
share-partition state with; the broker sets it once the persister exists.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from broker import log_flusher
from broker.config import BrokerConfig
from broker.replica_manager import ReplicaManager
from broker.topic_admin import TopicAdmin
from broker.txn_marker_channel import MarkerChannel
from coordinator.partition_access import TxnMarkerEntry
from protocol.errors import ErrorCode, KafkaError
from storage.batch import BatchHeader


class LocalPartitionAccess:
    def __init__(self, node_id: int, config: BrokerConfig, partitions: ReplicaManager, topics: TopicAdmin,
                 markers: MarkerChannel) -> None:
        self.node_id = node_id
        self.config = config
        self.partitions = partitions
        self.topics = topics
        self.markers = markers
        # coordinator.partition_access.ShareStateAccess: set by the broker (broker/share/persister.py).
        self.share_state: Any = None
        # Kafka's offsets.commit.timeout.ms bounds the replication of a coordinator write.
        self.write_timeout_s = int(config.get("offsets.commit.timeout.ms") or 5000) / 1000

    async def ensure_internal_topic(self, name: str, num_partitions: int, configs: dict[str, str]) -> None:
        if self.topics.metadata.get_topic(name) is None:
            # In a cluster, the internal topics' own replication factors (single node: 1).
            setting = ("transaction.state.log.replication.factor" if name == "__transaction_state"
                       else "share.coordinator.state.topic.replication.factor" if name == "__share_group_state"
                       else "offsets.topic.replication.factor")
            rf = int(self.config.get(setting) or 3)
            try:
                await self.topics.create_topic(name, num_partitions, configs, internal=True, replication_factor=rf)
            except KafkaError as e:
                if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise

    async def delete_records_before(self, topic: str, partition: int, offset: int) -> None:
        """Move a led partition's log start offset up to ``offset`` (at most its high watermark):
        the share coordinator prunes the records of __share_group_state no state needs any more."""
        part, _ = self.partitions.get_leader(topic, partition)
        if part is None:
            return
        target = min(offset, part.high_watermark)
        if target > part.log.log_start_offset:
            part.log.delete_records_before(target)
            if part.leader_state is not None:
                part.wake_waiters()  # followers learn the new log start with their next fetch

    def partition_exists(self, topic: str, partition: int) -> bool:
        return self.partitions.get(topic, partition) is not None

    async def append(self, topic: str, partition: int, batch: bytes, *, replicated: bool = True) -> int:
        rm = self.partitions
        part, missing = rm.get_leader(topic, partition)
        if part is None:
            code = ErrorCode.NOT_LEADER_OR_FOLLOWER if missing == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else missing
            raise KafkaError(code, f"{topic}-{partition} is not led here")
        if part.replicated and (short := rm.hw.min_isr_error(part)):
            raise KafkaError(short, f"{topic}-{partition}: the ISR is below min.insync.replicas")
        offset = rm.appends.append_coordinator(part, bytearray(batch), unwaited=part.replicated and not replicated)
        await log_flusher.flush_due([part])
        if part.replicated and replicated:
            # Coordinator state counts once the ISR has it (Kafka appends it with acks=all).
            code = await rm.hw.wait_replicated(part, part.log.log_end_offset, self.write_timeout_s)
            if code != ErrorCode.NONE:
                raise KafkaError(code, f"{topic}-{partition}: the coordinator write was not replicated ({code.name})")
        return offset

    def iter_batches(self, topic: str, partition: int, start_offset: int = 0) -> Iterator[tuple[BatchHeader, bytes]]:
        part = self.partitions.get(topic, partition)
        if part is None:
            return iter(())
        return part.log.iter_batches(start_offset)

    def log_end_offset(self, topic: str, partition: int) -> int:
        part = self.partitions.get(topic, partition)
        return -1 if part is None else part.log.log_end_offset

    async def write_txn_markers(self, markers: list[TxnMarkerEntry]) -> dict[tuple[int, str, int], int]:
        return await self.markers.write(markers)
