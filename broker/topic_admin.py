"""Topic creation, deletion and partition increases as a broker carries them out: the metadata
write (one atomic registration), then waiting until this broker's partitions exist (or their files
are gone), with ``kbroker.max.partitions`` checked and held across the write.

Used by CreateTopics / DeleteTopics / CreatePartitions, by auto-creation in Metadata and by the
coordinators creating their internal topics.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from broker.admin_limits import MAX_PARTITIONS_CONFIG, check_broker_partitions
from broker.config import BrokerConfig
from broker.replica_manager import ReplicaManager
from cluster.metadata_store import INTERNAL_TOPICS, MetadataStore, TopicInfo


class TopicAdmin:
    def __init__(self, config: BrokerConfig, metadata: MetadataStore, partitions: ReplicaManager, *,
                 clustered: bool) -> None:
        self.config = config
        self.metadata = metadata
        self.partitions = partitions
        self.clustered = clustered
        self._reserved = 0  # partitions of creations between their limit check and metadata write

    async def create_topic(self, name: str, num_partitions: int, configs: dict[str, str],
                           *, internal: bool = False, replication_factor: int = -1,
                           assignment: dict[int, list[int]] | None = None) -> TopicInfo:
        """Register the topic, then wait until its partitions exist here. The registration is
        one atomic metadata write: if the broker stops before the logs are all created, the
        topic is registered and the next start creates the missing ones. Replication factor
        and assignment matter in cluster mode only (a single node holds every partition)."""
        internal = internal or name in INTERNAL_TOPICS
        placement = ({"replication_factor": replication_factor, "assignment": assignment}
                     if self.clustered else {})
        with self._reserve_partitions(0 if internal else num_partitions):
            info = await self.metadata.create_topic(name, num_partitions, configs, internal=internal, **placement)
        await self.partitions.wait_created(info.name)
        return info

    async def delete_topic(self, name: str) -> TopicInfo:
        """Unregister the topic (it stops being served at once), then wait until its files are
        deleted, in steps off the loop."""
        info = await self.metadata.delete_topic(name)
        await self.partitions.wait_deleted(info.name)
        return info

    async def add_partitions(self, name: str, total: int, *, assignment: list[list[int]] | None = None) -> TopicInfo:
        """Grow the topic to ``total`` partitions; ``assignment`` (the replicas of each new one,
        checked by the caller) matters in cluster mode only (a single node holds every partition)."""
        info = self.metadata.check_partition_increase(name, total)
        placement = {"assignment": assignment} if self.clustered and assignment else {}
        with self._reserve_partitions(0 if info.internal else total - info.num_partitions):
            info = await self.metadata.add_partitions(name, total, **placement)
        await self.partitions.wait_created(info.name)
        return info

    def partition_count(self) -> int:
        """Partitions counted against kbroker.max.partitions: those of non-internal topics, plus
        those of creations checked but not yet registered."""
        return sum(t.num_partitions for t in self.metadata.topics().values() if not t.internal) + self._reserved

    def check_partition_limit(self, adding: int) -> None:
        check_broker_partitions(self.partition_count(), adding, int(self.config.get(MAX_PARTITIONS_CONFIG)))

    @contextlib.contextmanager
    def _reserve_partitions(self, adding: int) -> Iterator[None]:
        """Check kbroker.max.partitions and hold ``adding`` against it until the metadata write
        (which counts them from then on) is done: concurrent creations cannot both pass."""
        if adding:
            self.check_partition_limit(adding)
        self._reserved += adding
        try:
            yield
        finally:
            self._reserved -= adding
