"""Transaction markers sent to the partition leaders (Kafka's TransactionMarkerChannelManager).

The transaction coordinator asks for markers on a set of partitions and retries those that did not
succeed until they do (TransactionCoordinator._complete). This module groups the partitions by
their current leader: markers for partitions this broker leads are written locally
(broker.txn_marker_writer, the same code a WriteTxnMarkers request reaches; on a single node that
is every partition), the others are sent as one WriteTxnMarkers v2 request per
leader over the inter-broker connection. A partition without a leader, an unreachable leader or
a leader that answers NOT_LEADER_OR_FOLLOWER reports a retriable code, so the coordinator's next
attempt follows the leadership change. A deleted topic answers UNKNOWN_TOPIC_OR_PARTITION, which
the coordinator drops, as Kafka does for partitions that no longer exist.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kafka.protocol.producer.transaction import WriteTxnMarkersRequest

from broker.txn_marker_writer import MarkerWriter
from cluster.metadata_store import MetadataStore
from coordinator.partition_access import TxnMarkerEntry
from protocol.errors import ErrorCode

log = logging.getLogger("broker.txn_marker_channel")

WRITE_TXN_MARKERS_VERSION = 2
REQUEST_TIMEOUT_S = 30.0

_M = WriteTxnMarkersRequest.WritableTxnMarker
_T = _M.WritableTxnMarkerTopic


def _split(entry: TxnMarkerEntry, topic_parts: dict[str, list[int]]) -> TxnMarkerEntry:
    return TxnMarkerEntry(entry.producer_id, entry.producer_epoch, entry.committed, entry.coordinator_epoch,
                          topic_parts, transaction_version=entry.transaction_version)


class MarkerChannel:
    """``inter_broker``: broker.inter_broker.InterBrokerClients (None on a single node)."""

    def __init__(self, node_id: int, metadata: MetadataStore, local: MarkerWriter, inter_broker: Any | None) -> None:
        self.node_id = node_id
        self.metadata = metadata
        self.local = local
        self.inter_broker = inter_broker

    async def write(self, markers: list[TxnMarkerEntry]) -> dict[tuple[int, str, int], int]:
        """Write ``markers`` on each partition's leader; a code per (producer id, topic, partition)."""
        md = self.metadata
        out: dict[tuple[int, str, int], int] = {}
        local: list[TxnMarkerEntry] = []
        remote: dict[int, list[TxnMarkerEntry]] = {}
        for m in markers:
            by_leader: dict[int, dict[str, list[int]]] = {}
            for topic, parts in m.partitions.items():
                info = md.get_topic(topic)
                for p in parts:
                    if info is None or not 0 <= p < info.num_partitions:
                        out[(m.producer_id, topic, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        continue
                    leader = md.leader(topic, p)
                    if leader < 0:
                        out[(m.producer_id, topic, p)] = ErrorCode.NOT_LEADER_OR_FOLLOWER  # offline: retried
                        continue
                    by_leader.setdefault(leader, {}).setdefault(topic, []).append(p)
            for leader, topic_parts in by_leader.items():
                entry = _split(m, topic_parts)
                (local if leader == self.node_id else remote.setdefault(leader, [])).append(entry)
        if not remote:
            # All leaders are here (always, on one node): written in this loop pass, before any
            # other request is handled, so the coordinator's Complete state follows at once.
            if local:
                out.update(await self.local.write_all(local))
            return out
        jobs = [self._send(leader, entries) for leader, entries in remote.items()]
        if local:
            jobs.append(self.local.write_all(local))
        for result in await asyncio.gather(*jobs):
            out.update(result)
        return out

    async def _send(self, leader: int, entries: list[TxnMarkerEntry]) -> dict[tuple[int, str, int], int]:
        v = WRITE_TXN_MARKERS_VERSION
        request = WriteTxnMarkersRequest(version=v, markers=[
            _M(version=v, producer_id=e.producer_id, producer_epoch=e.producer_epoch, transaction_result=e.committed,
               topics=[_T(version=v, name=t, partition_indexes=ps) for t, ps in e.partitions.items()],
               coordinator_epoch=e.coordinator_epoch, transaction_version=e.transaction_version)
            for e in entries])
        try:
            if self.inter_broker is None:
                raise ConnectionError("no inter-broker connections on a single node")
            response = await self.inter_broker.request(leader, request, v, REQUEST_TIMEOUT_S)
        except (ConnectionError, OSError, TimeoutError) as e:
            log.info("markers to broker %d not delivered (%r); the coordinator retries", leader, e)
            return {(e_.producer_id, t, p): ErrorCode.NOT_LEADER_OR_FOLLOWER
                    for e_ in entries for t, ps in e_.partitions.items() for p in ps}
        out: dict[tuple[int, str, int], int] = {}
        for r in response.markers:
            for t in r.topics:
                for p in t.partitions:
                    out[(r.producer_id, t.name, p.partition_index)] = p.error_code
        for e_ in entries:  # anything the answer left out is retried
            for t, ps in e_.partitions.items():
                for p in ps:
                    out.setdefault((e_.producer_id, t, p), ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return out
