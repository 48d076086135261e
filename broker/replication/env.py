"""What the replication parts of a broker (fetchers, ISR changes, the high watermark) see of it:
its id and configuration, the metadata store, the cluster node (etcd session, for ISR writes) and a
way to open an inter-broker connection. Handed to them by the replica manager instead of the
broker itself."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from broker.config import BrokerConfig
from broker.inter_broker_security import peer_address
from cluster.metadata_store import MetadataStore
from protocol.client import ProtocolClient


@dataclass(frozen=True, slots=True)
class ReplicaEnv:
    node_id: int
    config: BrokerConfig
    metadata: MetadataStore
    # cluster.node.ClusterNode in cluster mode (etcd session, keys, membership), else None
    cluster: Any = None
    # (host, port, client id) -> a connected client to another broker's inter-broker listener
    connect: Callable[[str, int, str], Awaitable[ProtocolClient]] | None = None

    @property
    def replicated(self) -> bool:
        return self.cluster is not None

    def inter_broker_address(self, node_id: int) -> tuple[str, int] | None:
        return peer_address(self.config, self.metadata, node_id)
