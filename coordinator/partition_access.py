"""How coordinators reach partitions, without importing the broker.

The broker hands each coordinator an object with this interface at start-up. On one node it
calls straight into the broker's replica manager (the same path a remote request takes after
decoding); in a cluster it will send requests to partition leaders. ``share_state`` reaches the
share coordinator (KIP-932 share-state RPCs): in-process where this broker leads the key's
``__share_group_state`` partition, over the inter-broker connection otherwise.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from protocol.errors import ErrorCode
from storage.batch import BatchHeader


def append_error_code(e: BaseException) -> int:
    """Kafka's mapping of a failed coordinator write to the error a client should see (the share
    coordinator and the share-group paths; the group coordinator keeps its own copy)."""
    code = getattr(e, "code", None)
    if code is None:
        return ErrorCode.UNKNOWN_SERVER_ERROR
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return int(code)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=1 << 16)
def partition_for(key: str, num_partitions: int) -> int:
    """Kafka's coordinator partition: Utils.abs(key.hashCode) % partitions. Cached: Java's
    String.hashCode in Python costs microseconds, and every group and transaction request asks."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


@dataclass(slots=True)
class TxnMarkerEntry:
    """One WriteTxnMarkers entry: end a producer's transaction on these partitions."""

    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    partitions: dict[str, list[int]] = field(default_factory=dict)  # topic -> partitions
    # WriteTxnMarkers v2: the transaction version the marker is checked under (KIP-890).
    transaction_version: int = 0


# (topic id, partition) -> (error code, error message): one result per share-partition.
SharePartitionErrors = dict[tuple[uuid.UUID, int], tuple[int, str | None]]


class ShareStateAccess(Protocol):
    """The share-state RPCs (InitializeShareGroupState, ReadShareGroupStateSummary,
    DeleteShareGroupState) as the group coordinator uses them; each call may span several share
    coordinators. A share-partition that no coordinator answered gets a retriable error."""

    async def initialize(self, group_id: str, topics: dict[uuid.UUID, dict[int, tuple[int, int]]]
                         ) -> SharePartitionErrors:
        """(state epoch, start offset) per partition of each topic id."""

    async def read_summary(self, group_id: str, topics: dict[uuid.UUID, list[int]]
                           ) -> dict[tuple[uuid.UUID, int], tuple[int, str | None, int, int, int]]:
        """(error, message, state epoch, leader epoch, start offset) per share-partition."""

    async def delete(self, group_id: str, topics: dict[uuid.UUID, list[int]]) -> SharePartitionErrors: ...


class PartitionAccess(Protocol):
    node_id: int
    share_state: ShareStateAccess

    async def ensure_internal_topic(self, name: str, num_partitions: int, configs: dict[str, str]) -> None:
        """Create the internal topic if missing (idempotent)."""

    def partition_exists(self, topic: str, partition: int) -> bool: ...

    async def append(self, topic: str, partition: int, batch: bytes, *, replicated: bool = True) -> int:
        """Append one coordinator-built batch (records or a control batch); returns its base offset.
        ``replicated`` False: return once appended, without waiting for the ISR (for a record whose
        durability the next acknowledged write of the same partition implies). Raises
        protocol.errors.KafkaError-like exceptions carrying ``code`` on failure."""

    def iter_batches(self, topic: str, partition: int, start_offset: int = 0) -> Iterator[tuple[BatchHeader, bytes]]:
        """Every batch of a local partition from ``start_offset``, for replaying coordinator state."""

    def log_end_offset(self, topic: str, partition: int) -> int: ...

    async def write_txn_markers(self, markers: list[TxnMarkerEntry]) -> dict[tuple[int, str, int], int]:
        """Send WriteTxnMarkers to the leaders of the partitions; returns error code per
        (producer_id, topic, partition)."""
