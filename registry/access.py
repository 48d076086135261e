"""How the registry reaches the ``_schemas`` partition and the other brokers, without importing
the broker (design.md: as the coordinators get coordinator/partition_access.py's interface).

The broker hands an object with this interface to the registry at start-up
(broker/schema_registry_bridge.py). The registry's primary is the leader of ``_schemas``
partition 0: appends go only there (acks=all in a cluster), every broker replays its own replica.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from storage.batch import BatchHeader

TOPIC = "_schemas"


class RegistryAccess(Protocol):
    node_id: int

    async def ensure_topic(self) -> None:
        """Create ``_schemas`` (1 partition, compacted) if it does not exist; idempotent."""

    def partition_identity(self) -> tuple | None:
        """Changes whenever the local replica's history may have been rewritten (topic id, leader
        epoch, whether this broker leads); None when no local replica exists."""

    def is_leader(self) -> bool:
        """This broker leads ``_schemas``-0 (and may append)."""

    def leader(self) -> int | None:
        """Node id of the leader of ``_schemas``-0 (None: unknown or no topic)."""

    def log_start_offset(self) -> int: ...

    def log_end_offset(self) -> int: ...

    def high_watermark(self) -> int: ...

    def iter_batches(self, start_offset: int) -> Iterator[tuple[BatchHeader, bytes]]:
        """The local replica's batches from ``start_offset``."""

    async def wait_for_change(self, timeout_s: float) -> None:
        """Return when the local replica's log or high watermark moves, or after ``timeout_s``."""

    async def append(self, batch: bytes) -> int:
        """Append one batch as the leader; returns the offset after it once the ISR has it.
        Raises an exception carrying ``code`` (a Kafka error code) on failure."""

    def topic_id(self) -> object | None:
        """Identity of the ``_schemas`` topic (changes when it is deleted and created again); None
        when it does not exist."""

    async def fetch_remote(self, offset: int) -> tuple[list[tuple[BatchHeader, bytes]], int] | None:
        """Without a local replica: the batches from ``offset`` and the high watermark, read from
        the leader as a consumer (committed records only); None when no leader answers."""

    async def registry_url(self, node_id: int) -> str | None:
        """The registry URL another broker advertises (``kbroker.schema.registry.advertised.listener``)."""
