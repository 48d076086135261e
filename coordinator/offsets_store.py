"""Committed group offsets, and transactional offsets pending their transaction marker.

Each committed offset remembers the __consumer_offsets position of the record that wrote it:
when a transaction commits, its offsets only replace ones written *before* them in the log
(Kafka's rule), so a later plain OffsetCommit is never overwritten by an older transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1  # explicit expiry (OffsetCommit v2-4 retention time), -1 none
    record_offset: int = -1  # position of the record in __consumer_offsets


class OffsetsStore:
    def __init__(self) -> None:
        self.committed: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        # producer id -> group -> partition -> offset
        self.pending_txn: dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]] = {}

    # --- committed -----------------------------------------------------------------------------

    def get(self, group: str, tp: TopicPartition) -> OffsetAndMetadata | None:
        return self.committed.get(group, {}).get(tp)

    def group_offsets(self, group: str) -> dict[TopicPartition, OffsetAndMetadata]:
        return self.committed.get(group, {})

    def has_offsets(self, group: str) -> bool:
        return bool(self.committed.get(group))

    def put(self, group: str, tp: TopicPartition, value: OffsetAndMetadata) -> None:
        self.committed.setdefault(group, {})[tp] = value

    def delete(self, group: str, tp: TopicPartition) -> None:
        offsets = self.committed.get(group)
        if offsets is not None:
            offsets.pop(tp, None)
            if not offsets:
                del self.committed[group]

    def delete_group(self, group: str) -> list[TopicPartition]:
        return list(self.committed.pop(group, {}))

    def groups(self) -> Iterator[str]:
        return iter(list(self.committed))

    # --- transactional -------------------------------------------------------------------------

    def add_pending(self, producer_id: int, group: str, tp: TopicPartition, value: OffsetAndMetadata) -> None:
        self.pending_txn.setdefault(producer_id, {}).setdefault(group, {})[tp] = value

    def has_pending(self, group: str, tp: TopicPartition) -> bool:
        return any(tp in groups.get(group, ()) for groups in self.pending_txn.values())

    def has_pending_group(self, group: str) -> bool:
        return any(group in groups for groups in self.pending_txn.values())

    def complete_txn(self, producer_id: int, committed: bool, in_partition: Callable[[str], bool]) -> int:
        """Materialise (or drop) the producer's pending offsets of the groups ``in_partition``
        selects; returns how many offsets were made visible."""
        groups = self.pending_txn.get(producer_id)
        if not groups:
            return 0
        applied = 0
        for group in [g for g in groups if in_partition(g)]:
            offsets = groups.pop(group)
            if not committed:
                continue
            for tp, value in offsets.items():
                current = self.get(group, tp)
                if current is None or current.record_offset < value.record_offset or value.record_offset < 0:
                    self.put(group, tp, value)
                    applied += 1
        if not groups:
            del self.pending_txn[producer_id]
        return applied
