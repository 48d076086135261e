"""The client side of the share-state RPCs (Kafka's DefaultStatePersister): what share-partition
leaders and the group coordinator call to reach the share coordinator of each key.

The coordinator of (group, topic id, partition) is the leader of its ``__share_group_state``
partition. Where that is this broker the call goes straight into the local ShareCoordinator;
otherwise it is sent (one key per request, as Kafka's persister does) over the inter-broker
connection as Initialize/Read/Write/Delete/ReadShareGroupStateSummary v0. Retriable answers —
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, no leader, an
unreachable broker — are retried with a backoff for up to ``share.coordinator.write.timeout.ms``
(a coordinator that moved is found again from the metadata); the last error is returned after that.
The state topic is created on first use (FindCoordinator SHARE does the same).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from coordinator.share_coordinator import SHARE_STATE_TOPIC
from protocol.errors import ErrorCode, KafkaError
from protocol.share_group_api import (
    DeleteShareGroupStateRequest,
    InitializeShareGroupStateRequest,
    ReadShareGroupStateRequest,
    ReadShareGroupStateSummaryRequest,
    WriteShareGroupStateRequest,
)

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.inter_broker import InterBrokerClients
    from cluster.metadata_store import MetadataStore
    from coordinator.share_coordinator import ShareCoordinator

log = logging.getLogger("broker.share.persister")
E = ErrorCode

RETRIABLE = frozenset({E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS,
                       E.REQUEST_TIMED_OUT})
Batch = tuple[int, int, int, int]


class SharePersister:
    """``coordinator``: this broker's share coordinator; ``inter_broker``: the connections to the
    other brokers (None on a single node, where every coordinator is local)."""

    def __init__(self, node_id: int, config: BrokerConfig, metadata: MetadataStore, coordinator: ShareCoordinator,
                 inter_broker: InterBrokerClients | None) -> None:
        self.node_id = node_id
        self.metadata = metadata
        self.coordinator = coordinator
        self.inter_broker = inter_broker
        self.timeout_s = int(config.get("share.coordinator.write.timeout.ms") or 5000) / 1000

    async def _leader(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
        coord = self.coordinator
        await coord.ensure_topic()
        return self.metadata.leader(SHARE_STATE_TOPIC, coord.partition_of(group_id, topic_id, partition))

    async def _call(self, group_id: str, topic_id: uuid.UUID, partition: int, local: Any, remote: Any,
                    failed: Any) -> Any:
        """Run one keyed call on its coordinator, retrying retriable errors until the deadline.
        ``local()`` calls the local coordinator, ``remote(node)`` sends the request; both return
        a tuple whose first item is the error code; ``failed(code, message)`` builds the answer
        when the coordinator cannot be reached."""
        deadline = time.monotonic() + self.timeout_s
        delay = 0.05
        while True:
            try:
                leader = await self._leader(group_id, topic_id, partition)
                if leader < 0:
                    out = failed(E.COORDINATOR_NOT_AVAILABLE, "The share coordinator has no leader.")
                elif leader == self.node_id or self.inter_broker is None:
                    out = await local()
                else:
                    out = await remote(leader)
            except KafkaError as e:
                out = failed(E.COORDINATOR_NOT_AVAILABLE if e.code == E.INVALID_REPLICATION_FACTOR else e.code,
                             e.message)
            except (ConnectionError, OSError, TimeoutError) as e:
                out = failed(E.COORDINATOR_NOT_AVAILABLE, f"The share coordinator is not reachable: {e}")
            if out[0] not in RETRIABLE or time.monotonic() + delay > deadline:
                return out
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def _request(self, node: int, request: Any) -> Any:
        assert self.inter_broker is not None
        return await self.inter_broker.request(node, request, 0, self.timeout_s)

    # --- the five RPCs, one key each --------------------------------------------------------------

    async def initialize_one(self, group_id: str, tid: uuid.UUID, p: int, state_epoch: int, start: int
                             ) -> tuple[int, str | None]:
        async def remote(node: int) -> tuple[int, str | None]:
            R = InitializeShareGroupStateRequest
            D = R.InitializeStateData
            resp = await self._request(node, R(version=0, group_id=group_id, topics=[D(
                version=0, topic_id=tid, partitions=[D.PartitionData(version=0, partition=p, state_epoch=state_epoch,
                                                                     start_offset=start)])]))
            r = resp.results[0].partitions[0]
            return r.error_code, r.error_message

        return await self._call(group_id, tid, p, lambda: self.coordinator.initialize(group_id, tid, p, state_epoch,
                                                                                      start),
                                remote, lambda c, m: (c, m))

    async def read(self, group_id: str, tid: uuid.UUID, p: int, leader_epoch: int
                   ) -> tuple[int, str | None, int, int, list[Batch]]:
        async def remote(node: int) -> tuple[int, str | None, int, int, list[Batch]]:
            R = ReadShareGroupStateRequest
            D = R.ReadStateData
            resp = await self._request(node, R(version=0, group_id=group_id, topics=[D(
                version=0, topic_id=tid, partitions=[D.PartitionData(version=0, partition=p, leader_epoch=leader_epoch)])]))
            r = resp.results[0].partitions[0]
            return (r.error_code, r.error_message, r.state_epoch, r.start_offset,
                    [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in r.state_batches])

        return await self._call(group_id, tid, p, lambda: self.coordinator.read(group_id, tid, p, leader_epoch), remote,
                                lambda c, m: (c, m, 0, -1, []))

    async def write(self, group_id: str, tid: uuid.UUID, p: int, state_epoch: int, leader_epoch: int, start: int,
                    batches: list[Batch]) -> tuple[int, str | None]:
        async def remote(node: int) -> tuple[int, str | None]:
            R = WriteShareGroupStateRequest
            D = R.WriteStateData
            P = D.PartitionData
            resp = await self._request(node, R(version=0, group_id=group_id, topics=[D(version=0, topic_id=tid, partitions=[
                P(version=0, partition=p, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start,
                  state_batches=[P.StateBatch(version=0, first_offset=f, last_offset=la, delivery_state=s,
                                              delivery_count=c) for f, la, s, c in batches])])]))
            r = resp.results[0].partitions[0]
            return r.error_code, r.error_message

        return await self._call(group_id, tid, p, lambda: self.coordinator.write(group_id, tid, p, state_epoch,
                                                                                 leader_epoch, start, batches),
                                remote, lambda c, m: (c, m))

    async def delete_one(self, group_id: str, tid: uuid.UUID, p: int) -> tuple[int, str | None]:
        async def remote(node: int) -> tuple[int, str | None]:
            R = DeleteShareGroupStateRequest
            D = R.DeleteStateData
            resp = await self._request(node, R(version=0, group_id=group_id, topics=[D(
                version=0, topic_id=tid, partitions=[D.PartitionData(version=0, partition=p)])]))
            r = resp.results[0].partitions[0]
            return r.error_code, r.error_message

        return await self._call(group_id, tid, p, lambda: self.coordinator.delete(group_id, tid, p), remote,
                                lambda c, m: (c, m))

    async def read_summary_one(self, group_id: str, tid: uuid.UUID, p: int
                               ) -> tuple[int, str | None, int, int, int]:
        async def local() -> tuple[int, str | None, int, int, int]:
            return self.coordinator.read_summary(group_id, tid, p)

        async def remote(node: int) -> tuple[int, str | None, int, int, int]:
            R = ReadShareGroupStateSummaryRequest
            D = R.ReadStateSummaryData
            resp = await self._request(node, R(version=0, group_id=group_id, topics=[D(
                version=0, topic_id=tid, partitions=[D.PartitionData(version=0, partition=p, leader_epoch=-1)])]))
            r = resp.results[0].partitions[0]
            return r.error_code, r.error_message, r.state_epoch, r.leader_epoch, r.start_offset

        return await self._call(group_id, tid, p, local, remote, lambda c, m: (c, m, 0, -1, -1))

    # --- coordinator.partition_access.ShareStateAccess (the group coordinator's view) -------------

    async def initialize(self, group_id: str, topics: dict[uuid.UUID, dict[int, tuple[int, int]]]
                         ) -> dict[tuple[uuid.UUID, int], tuple[int, str | None]]:
        keys = [(tid, p, se, so) for tid, parts in topics.items() for p, (se, so) in parts.items()]
        results = await asyncio.gather(*(self.initialize_one(group_id, tid, p, se, so) for tid, p, se, so in keys))
        return {(tid, p): r for (tid, p, _, _), r in zip(keys, results, strict=True)}

    async def read_summary(self, group_id: str, topics: dict[uuid.UUID, list[int]]
                           ) -> dict[tuple[uuid.UUID, int], tuple[int, str | None, int, int, int]]:
        keys = [(tid, p) for tid, parts in topics.items() for p in parts]
        results = await asyncio.gather(*(self.read_summary_one(group_id, tid, p) for tid, p in keys))
        return dict(zip(keys, results, strict=True))

    async def delete(self, group_id: str, topics: dict[uuid.UUID, list[int]]
                     ) -> dict[tuple[uuid.UUID, int], tuple[int, str | None]]:
        keys = [(tid, p) for tid, parts in topics.items() for p in parts]
        results = await asyncio.gather(*(self.delete_one(group_id, tid, p) for tid, p in keys))
        return dict(zip(keys, results, strict=True))
