"""The Spark 2pc sink's producer: protocol/two_phase.py's TwoPhaseProducer plus what a sink needs.

Adds to TwoPhaseProducer: cached partition leaders and partition counts (Metadata once per topic, not once
per request), Java's murmur2 partitioner for keyed records, InitProducerId without ``enable2Pc`` for
the gate transaction (an ordinary transaction the coordinator aborts after its timeout), and
``list_open`` (ListTransactions on every broker) so a restarted driver finds what it left open.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kafka.partitioner.default import murmur2
from kafka.protocol.admin import ListTransactionsRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest

from protocol.errors import ErrorCode
from protocol.two_phase import PreparedTxnState, TwoPhaseError, TwoPhaseProducer

Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]  # key, value, headers

# Kafka's TransactionState names that hold a partition's last stable offset back.
OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")


def murmur2_partition(key: bytes, partitions: int) -> int:
    """Java's default partitioner for a keyed record (where Spark's Kafka sink would put it)."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class SinkProducer(TwoPhaseProducer):
    def __init__(self, bootstrap: str | tuple[str, int], transactional_id: str, **kw: Any) -> None:
        super().__init__(bootstrap, transactional_id, **kw)
        self._leaders: dict[tuple[str, int], tuple[str, int]] = {}
        self._counts: dict[str, int] = {}

    async def _metadata(self, topic: str) -> None:
        boot = await self._client(self.bootstrap)
        deadline = time.monotonic() + self.retry_deadline_s
        while True:
            md = await boot.request(MetadataRequest(
                version=8, topics=[MetadataRequest.MetadataRequestTopic(version=8, name=topic)],
                allow_auto_topic_creation=True, include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False), 8)
            nodes = {b.node_id: (b.host, b.port) for b in md.brokers}
            t = next((t for t in md.topics if t.name == topic), None)
            if t is not None and not t.error_code and t.partitions and all(
                    p.leader_id in nodes for p in t.partitions):
                self._counts[topic] = len(t.partitions)
                for p in t.partitions:
                    self._leaders[(topic, p.partition_index)] = nodes[p.leader_id]
                return
            code = t.error_code if t is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            # A topic being auto-created has no leader for a moment.
            if time.monotonic() > deadline or code not in (0, ErrorCode.LEADER_NOT_AVAILABLE,
                                                           ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                raise TwoPhaseError(f"metadata of {topic}", code or ErrorCode.LEADER_NOT_AVAILABLE)
            await asyncio.sleep(0.1)

    async def partition_count(self, topic: str) -> int:
        if topic not in self._counts:
            await self._metadata(topic)
        return self._counts[topic]

    async def _leader(self, topic: str, partition: int) -> Any:
        if (topic, partition) not in self._leaders:
            await self._metadata(topic)
            if (topic, partition) not in self._leaders:
                raise TwoPhaseError(f"leader of {topic}-{partition}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return await self._client(self._leaders[(topic, partition)])

    async def start(self, *, keep_prepared_txn: bool = False, transaction_timeout_ms: int = 60000,
                    enable_2pc: bool = True) -> PreparedTxnState | None:
        if enable_2pc:
            return await super().start(keep_prepared_txn=keep_prepared_txn,
                                       transaction_timeout_ms=transaction_timeout_ms)

        async def init() -> tuple[int, Any]:
            c = await self._coord()
            r = await c.request(InitProducerIdRequest(
                version=6, transactional_id=self.transactional_id, transaction_timeout_ms=transaction_timeout_ms,
                producer_id=-1, producer_epoch=-1, enable2_pc=False, keep_prepared_txn=False), 6)
            return r.error_code, r
        r = await self._retrying("InitProducerId", init)
        self.producer_id, self.epoch, self.ongoing = r.producer_id, r.producer_epoch, None
        self._added.clear()
        self._sequences.clear()
        return None

    async def list_open(self, prefix: str) -> list[str]:
        """Transactional ids starting with ``prefix`` whose transaction is open, on every broker."""
        boot = await self._client(self.bootstrap)
        md = await boot.request(MetadataRequest(version=8, topics=[], allow_auto_topic_creation=False,
                                                include_cluster_authorized_operations=False,
                                                include_topic_authorized_operations=False), 8)
        out: list[str] = []
        for b in md.brokers:
            client = await self._client((b.host, b.port))
            resp = await client.request(ListTransactionsRequest(
                version=0, state_filters=list(OPEN_STATES), producer_id_filters=[]), 0)
            if resp.error_code:
                raise TwoPhaseError(f"ListTransactions on broker {b.node_id}", resp.error_code)
            out += [s.transactional_id for s in resp.transaction_states if s.transactional_id.startswith(prefix)]
        return sorted(set(out))
