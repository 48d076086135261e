"""What request handlers see of the broker (design.md: "handlers see a narrow interface"): the
metadata view, the partitions, topic administration, the coordinators, the transaction verifier,
the authorizer and quotas, and a few settings. The broker builds one ``BrokerServices`` at start
and every ``RequestContext`` carries it; nothing here reaches back into the broker object, so a
handler can be driven in-process against real parts (tests/helpers/inproc.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.fetch_sessions import FetchSessionCache
    from broker.listener_security import ListenerSecurity
    from broker.replica_manager import ReplicaManager
    from broker.share.services import ShareServices
    from broker.topic_admin import TopicAdmin
    from broker.txn_marker_writer import MarkerWriter
    from broker.txn_verification import TxnVerifier
    from cluster.metadata_store import MetadataStore
    from coordinator.group_coordinator import GroupCoordinator
    from coordinator.producer_id_manager import ProducerIdManager
    from coordinator.txn_coordinator import TransactionCoordinator
    from security.authorizer import Authorizer
    from security.quotas import ClientQuotaManager


class SchemaChecks(Protocol):
    """Produce-path schema validation (broker.schema_registry_bridge.SchemaRegistryBridge)."""

    validated: dict[str, Any]  # topic -> its validation settings, only for topics that validate

    async def check_batch(self, topic: str, settings: Any, records: bytes | bytearray | memoryview
                          ) -> tuple[str, list[tuple[int, str]]] | None: ...


@dataclass(eq=False, slots=True)
class BrokerServices:
    node_id: int
    config: BrokerConfig
    log_dirs: list[Path]
    metadata: MetadataStore
    partitions: ReplicaManager
    topics: TopicAdmin
    txn_coordinator: TransactionCoordinator
    group_coordinator: GroupCoordinator | None
    producer_ids: ProducerIdManager
    verifier: TxnVerifier
    markers: MarkerWriter
    fetch_sessions: FetchSessionCache
    quotas: ClientQuotaManager
    authorizer: Authorizer | None
    # Every listener's TLS context and SASL settings as served now (AlterConfigs reloads key stores).
    listener_security: Callable[[], dict[str, ListenerSecurity]]
    # the Schema Registry (kbroker.schema.registry.listener) and produce-path schema validation
    schemas: SchemaChecks
    # broker.inter_broker.InterBrokerClients in cluster mode (markers to other leaders), else None
    inter_broker: Any = None
    clustered: bool = False
    # KIP-932 share groups: sessions, share-partitions, the share-state client, the share coordinator
    share: ShareServices | None = None
