"""Topic creation, deletion and partition increases as a broker carries them out: the metadata
write (one atomic registration), then waiting until this broker's partitions exist (or their files
are gone), with ``kbroker.max.partitions`` checked and held across the write.

Used by CreateTopics / DeleteTopics / CreatePartitions, by auto-creation in Metadata and by the
coordinators creating their internal topics.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from broker.admin_limits import MAX_PARTITIONS_CONFIG, check_broker_partitions
from broker.config import BrokerConfig
from broker.replica_manager import ReplicaManager
from cluster.metadata_store import INTERNAL_TOPICS, MetadataStore, NewTopic, TopicInfo
from protocol.errors import KafkaError


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

    async def create_topics(self, topics: list[tuple[str, int, dict[str, str], int, dict[int, list[int]] | None]]
                            ) -> dict[str, TopicInfo | KafkaError]:
        """CreateTopics: (name, partitions, configs, replication factor, assignment) each, registered
        in one metadata change, then awaited until their partitions exist here. Each topic's
        TopicInfo, or the error that refused it (kbroker.max.partitions is checked topic by topic,
        counting the ones before it)."""
        out: dict[str, TopicInfo | KafkaError] = {}
        wanted: list[NewTopic] = []
        adding = 0
        for name, n, configs, rf, assignment in topics:
            internal = name in INTERNAL_TOPICS
            if not internal:
                try:
                    self.check_partition_limit(adding + n)
                except KafkaError as e:
                    out[name] = e
                    continue
                adding += n
            placement = {"replication_factor": rf, "assignment": assignment} if self.clustered else {}
            wanted.append(NewTopic(name, n, configs, internal, placement))
        self._reserved += adding
        try:
            results = await self.metadata.create_topics(wanted) if wanted else []
        finally:
            self._reserved -= adding
        for t, res in zip(wanted, results, strict=True):
            out[t.name] = res
        created = [t.name for t, res in zip(wanted, results, strict=True) if isinstance(res, TopicInfo)]
        waits = await asyncio.gather(*(self.partitions.wait_created(n) for n in created), return_exceptions=True)
        for name, err in zip(created, waits, strict=True):
            if isinstance(err, KafkaError):
                out[name] = err
            elif isinstance(err, BaseException):
                raise err
        return out

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
