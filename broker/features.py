"""Feature flags (KIP-584) this broker supports, and the finalized level lookups the protocol
paths use. Levels are finalized in the metadata store (``MetadataStore.finalized_features``),
so every broker of a cluster agrees; UpdateFeatures (broker/handlers/features.py) changes them.

``transaction.version`` (Kafka's TransactionVersion): 0 and 1 are the classic protocol (1 only
differs in Kafka by allowing the TV2 request versions to be sent for verification, nothing a
client sees here), 2 is KIP-890 part 2: EndTxn v5 bumps the producer epoch on every commit or
abort, Produce v12 / TxnOffsetCommit v5 add partitions implicitly, and WriteTxnMarkers v2
carries the version of each marker.

``share.version`` (Kafka's ShareVersion): 1 enables share groups (KIP-932); new clusters finalize it
at 1 (Kafka 4.2 does), an upgraded data dir keeps 0 until UpdateFeatures raises it. With 0 (and
``group.share.enable`` false) the share-group APIs answer UNSUPPORTED_VERSION, as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from cluster.metadata_store import MetadataStore

TRANSACTION_VERSION = "transaction.version"
SHARE_VERSION = "share.version"

# name -> (min supported level, max supported level), as ApiVersions advertises them.
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {TRANSACTION_VERSION: (0, 2), SHARE_VERSION: (0, 1)}

# First request versions that mean "this client speaks transaction version 2" (KIP-890).
TV2_END_TXN_VERSION = 5
TV2_PRODUCE_VERSION = 12
TV2_TXN_OFFSET_COMMIT_VERSION = 5


def finalized_level(metadata: MetadataStore, feature: str) -> int:
    return int(metadata.finalized_features().get(feature, 0))


def share_groups_enabled(config: BrokerConfig, metadata: MetadataStore) -> bool:
    """Kafka's isShareGroupProtocolEnabled: the internal switch or share.version >= 1."""
    return bool(config.get("group.share.enable")) or finalized_level(metadata, SHARE_VERSION) >= 1


def transaction_version(metadata: MetadataStore, request_version: int, first_tv2_version: int) -> int:
    """The transaction version a request is handled with: 2 only when the client sent a TV2
    request version *and* the cluster finalized transaction.version >= 2 (Kafka checks both,
    so a downgrade to 1 turns TV2 semantics off even for clients that still send v5/v12)."""
    if request_version >= first_tv2_version and finalized_level(metadata, TRANSACTION_VERSION) >= 2:
        return 2
    return 0
