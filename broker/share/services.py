"""What the share-group handlers see of the partition side (BrokerServices.share): the share
sessions, the share-partitions this broker leads, the share-state RPC client and this broker's
share coordinator. Built by the broker (broker/broker.py) once the coordinators exist."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.share.persister import SharePersister
    from broker.share.share_partition_manager import SharePartitionManager
    from broker.share.share_sessions import ShareSessionCache
    from coordinator.share_coordinator import ShareCoordinator


@dataclass(eq=False, slots=True)
class ShareServices:
    sessions: ShareSessionCache
    partitions: SharePartitionManager
    persister: SharePersister
    coordinator: ShareCoordinator
