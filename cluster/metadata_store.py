"""The metadata interface every broker component uses, and its data classes.

``MetadataStore`` is what handlers and coordinators use: brokers, topics (ids, partition counts,
configs), replica assignments, partition state (leader, leader epoch, ISR), broker dynamic configs,
finalized features, SCRAM credentials, ACLs and client quotas. Two implementations:
``cluster.local_store.LocalMetadataStore`` (single node, JSON files) and ``cluster.etcd_store.
EtcdMetadataStore`` (cluster mode, etcd); neither imports ``broker/``. New interface methods belong here.
"""

from __future__ import annotations

import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from protocol.errors import ErrorCode, KafkaError
from security import quotas as client_quotas
from security import scram_credentials as scram
from security.authorizer import AclBinding

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
# Feature levels a newly created cluster starts with (see LocalMetadataStore._load).
NEW_CLUSTER_FEATURES = {"transaction.version": 2, "share.version": 1}


def validate_topic_name(name: str | None) -> None:
    """Kafka's topic name rules; raises KafkaError(INVALID_TOPIC_EXCEPTION)."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters")
    if not _LEGAL_TOPIC.match(name):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name '{name}' is illegal, it contains a character other than ASCII "
                         "alphanumerics, '.', '_' and '-'")


def unify_collision_chars(name: str) -> str:
    return name.replace(".", "_")


@dataclass(slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None
    # Advertised address per listener name: Kafka answers each client with the addresses of the
    # listener its request came in on. Empty: host/port serve every listener.
    endpoints: dict[str, tuple[str, int]] = field(default_factory=dict)

    def address(self, listener: str) -> tuple[str, int] | None:
        """Where a client of ``listener`` reaches this broker; None when it has no such listener."""
        if not self.endpoints or not listener:
            return self.host, self.port
        return self.endpoints.get(listener)


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False

    def to_json(self) -> dict:
        return {"name": self.name, "topic_id": str(self.topic_id), "num_partitions": self.num_partitions,
                "configs": self.configs, "internal": self.internal}

    @classmethod
    def from_json(cls, d: dict) -> TopicInfo:
        return cls(d["name"], uuid.UUID(d["topic_id"]), d["num_partitions"], dict(d.get("configs", {})),
                   d.get("internal", False))


@dataclass(slots=True)
class NewTopic:
    """One topic of a CreateTopics request, for ``MetadataStore.create_topics``. ``placement``:
    ``replication_factor`` / ``assignment`` for cluster stores (empty for a single node)."""

    name: str
    num_partitions: int
    configs: dict[str, str]
    internal: bool = False
    placement: dict[str, Any] = field(default_factory=dict)


# Listener signature: (event, topic_info) with event in {"created", "deleted", "partitions", "configs",
# "leaders"}; "leaders" (cluster mode): the leader, leader epoch or ISR of some partition changed.
MetadataListener = Callable[[str, TopicInfo], None]
# Called with the broker-config resource whose dynamic configs changed: None for the cluster-wide
# default (Kafka's BROKER resource ""), else a node id (that broker's own configs).
BrokerConfigListener = Callable[[int | None], None]


class MetadataStore(ABC):
    """Everything a broker needs to know about the cluster."""

    cluster_id: str
    controller_id: int

    def __init__(self) -> None:
        self._listeners: list[MetadataListener] = []
        self._config_listeners: list[BrokerConfigListener] = []

    def add_listener(self, fn: MetadataListener) -> None:
        self._listeners.append(fn)

    def _notify(self, event: str, topic: TopicInfo) -> None:
        for fn in self._listeners:
            fn(event, topic)

    def add_broker_config_listener(self, fn: BrokerConfigListener) -> None:
        """``fn(resource)`` after the dynamic broker configs of ``resource`` changed (every broker's
        store reports every resource; a broker applies the default and its own)."""
        self._config_listeners.append(fn)

    def _notify_broker_configs(self, resource: int | None) -> None:
        for fn in self._config_listeners:
            fn(resource)

    @abstractmethod
    def brokers(self) -> list[BrokerInfo]: ...

    @abstractmethod
    def topics(self) -> dict[str, TopicInfo]: ...

    def get_topic(self, name: str) -> TopicInfo | None:
        return self.topics().get(name)

    @abstractmethod
    def get_topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None: ...

    @abstractmethod
    def leader(self, topic: str, partition: int) -> int: ...

    @abstractmethod
    def leader_epoch(self, topic: str, partition: int) -> int: ...

    def replicas(self, topic: str, partition: int) -> list[int]:
        return [self.leader(topic, partition)]

    def isr(self, topic: str, partition: int) -> list[int]:
        return self.replicas(topic, partition)

    def offline_replicas(self, topic: str, partition: int) -> list[int]:
        """Replicas on brokers that are not live (always none on a single node)."""
        return []

    def fenced(self) -> bool:
        """True while this broker must not act as a leader (cluster mode, see cluster/etcd_store.py)."""
        return False

    @abstractmethod
    async def create_topic(self, name: str, num_partitions: int, configs: dict[str, str],
                           *, internal: bool = False) -> TopicInfo:
        """Cluster stores also take ``replication_factor`` (-1: default.replication.factor) and
        ``assignment`` (partition -> replicas, as CreateTopics' manual assignment)."""

    async def create_topics(self, topics: list[NewTopic]) -> list[TopicInfo | KafkaError]:
        """Register several topics (one CreateTopics request): each one's TopicInfo, or the error
        that refused it alone. Stores that can write them at once override this."""
        out: list[TopicInfo | KafkaError] = []
        for t in topics:
            try:
                out.append(await self.create_topic(t.name, t.num_partitions, t.configs, internal=t.internal,
                                                   **t.placement))
            except KafkaError as e:
                out.append(e)
        return out

    @abstractmethod
    async def delete_topic(self, name: str) -> TopicInfo: ...

    @abstractmethod
    async def add_partitions(self, name: str, total: int) -> TopicInfo:
        """Cluster stores also take ``assignment``: the replicas of each new partition."""

    @abstractmethod
    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicInfo: ...

    # Dynamic broker configs (AlterConfigs on BROKER resources), per resource as Kafka keeps them:
    # ``None`` is the cluster-wide default (resource name ""), a node id that broker's own configs.
    @abstractmethod
    def broker_dynamic_configs(self, resource: int | None) -> dict[str, str]: ...

    @abstractmethod
    async def set_broker_dynamic_configs(self, resource: int | None, configs: dict[str, str]) -> None:
        """Replace the resource's whole dynamic config set; the broker config listeners hear of it."""

    def eligible_leaders(self) -> set[int]:
        """Registered brokers that may lead (Kafka's "active": not fenced, not in controlled shutdown)."""
        return {b.node_id for b in self.brokers()}

    # Finalized feature levels (KIP-584), e.g. ``transaction.version``: a level of 0 means "not
    # finalized" (absent from ApiVersions), as in Kafka. The epoch grows with every change.
    def finalized_features(self) -> dict[str, int]:
        return {}

    def features_epoch(self) -> int:
        return -1

    async def set_finalized_feature(self, name: str, level: int) -> None:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "this metadata store cannot change feature levels")

    # SCRAM credentials (user -> mechanism -> salted/hashed credential), so that every broker of a
    # cluster authenticates against the same ones.
    def scram_credentials(self) -> scram.Credentials:
        return {}

    async def alter_scram_credentials(self, deletions: list[tuple[str, str]],
                                      upserts: list[tuple[str, str, scram.ScramCredential]]) -> None:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "this metadata store cannot store SCRAM credentials")

    def check_collision(self, name: str) -> None:
        unified = unify_collision_chars(name)
        for other in self.topics():
            if other != name and unify_collision_chars(other) == unified:
                raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                 f"Topic '{name}' collides with existing topic: {other}")

    def check_partition_increase(self, name: str, total: int) -> TopicInfo:
        """The topic CreatePartitions would grow to ``total`` partitions, or Kafka's error."""
        info = self.get_topic(name)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
        if total <= info.num_partitions:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                             f"Topic currently has {info.num_partitions} partitions, which is higher than or "
                             f"equal to the requested {total}.")
        return info

    # ACL bindings (security/authorizer.py), so that every broker of a cluster authorizes alike. The
    # sequence returned is immutable and replaced on every change (the authorizer re-indexes on that).
    def acls(self) -> tuple[AclBinding, ...]:
        return ()

    async def alter_acls(self, creations: list[AclBinding], deletions: list[AclBinding]) -> None:
        """Add ``creations`` (already present ones are kept once) and remove ``deletions``, as one change."""
        raise KafkaError(ErrorCode.INVALID_REQUEST, "this metadata store cannot store ACLs")

    # Client quotas (security/quotas.py: entity -> key -> value), so that every broker of a cluster
    # throttles alike. The mapping returned is replaced, never mutated, on every change.
    def client_quotas(self) -> client_quotas.Quotas:
        return {}

    async def alter_client_quotas(self, quotas: client_quotas.Quotas) -> None:
        """Replace the whole quota map (the handler computes it from the current one)."""
        raise KafkaError(ErrorCode.INVALID_REQUEST, "this metadata store cannot store client quotas")

    # Dynamic group configs (IncrementalAlterConfigs on GROUP resources: share.record.lock.duration.ms,
    # share.isolation.level, ...): group id -> name -> value, so that every broker (share-partition
    # leaders, the group coordinator) sees them. Replaced, never mutated, on every change.
    def group_configs(self) -> dict[str, dict[str, str]]:
        return {}

    async def alter_group_configs(self, configs: dict[str, dict[str, str]]) -> None:
        """Replace the whole group config map (the handler computes it from the current one)."""
        raise KafkaError(ErrorCode.INVALID_REQUEST, "this metadata store cannot store group configs")
