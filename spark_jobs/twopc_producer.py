"""The Spark 2pc sink's producer: two-phase commit (KIP-939) from the producer side, over the
protocol client.

A ``TwoPhaseProducer`` opens a 2PC transaction (InitProducerId v6 with ``enable2Pc``), writes
transactional batches (AddPartitionsToTxn v3, then Produce v9 with acks=all), and *prepares* it:
``prepare()`` returns the ``PreparedTxnState`` (producer id and epoch; Kafka's
``producer.prepareTransaction()``), which the caller stores with its external coordinator. The
transaction then stays open, untouched by ``transaction.timeout.ms``, until some process
completes it:

    state = await TwoPhaseProducer(bootstrap, "tid").complete_prepared(state, commit=True)

from any process, also after the preparing one died: ``complete_prepared`` initialises with
``keepPreparedTxn`` (the prepared transaction is kept and its id/epoch returned), then commits it
when that id/epoch is the expected one and aborts it otherwise, as Kafka's
``producer.completeTransaction(PreparedTxnState)``.

``SinkProducer`` adds what the sink needs: cached partition leaders and partition counts (Metadata
once per topic, not once per request), Java's murmur2 partitioner for keyed records,
InitProducerId without ``enable2Pc`` for the gate transaction (an ordinary transaction the
coordinator aborts after its timeout), and ``list_open`` (ListTransactions on every broker) so a
restarted driver finds what it left open.

Deviations: one Produce request per ``send`` call (no batching or linger); EndTxn v4 and
AddPartitionsToTxn v3 (transaction version 1 wire forms), which every kbroker serves whatever
``transaction.version`` is finalized.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kafka.partitioner.default import murmur2
from kafka.protocol.admin import ListTransactionsRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
)
from kafka.record.default_records import DefaultRecordBatchBuilder

from protocol.client import ProtocolClient
from protocol.errors import ErrorCode

_RETRIABLE = {ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
              ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR}


class TwoPhaseError(Exception):
    """The broker answered an error that retrying does not cure."""

    def __init__(self, what: str, code: int) -> None:
        try:
            name = ErrorCode(code).name
        except ValueError:
            name = str(code)
        super().__init__(f"{what}: {name}")
        self.code = code


@dataclass(frozen=True, slots=True)
class PreparedTxnState:
    """Kafka's PreparedTxnState: the producer id and epoch of a prepared transaction ("id:epoch")."""

    producer_id: int
    epoch: int

    def __str__(self) -> str:
        return f"{self.producer_id}:{self.epoch}"

    @classmethod
    def parse(cls, text: str) -> PreparedTxnState:
        pid, _, epoch = text.partition(":")
        return cls(int(pid), int(epoch))


def _split(bootstrap: str | tuple[str, int]) -> tuple[str, int]:
    if isinstance(bootstrap, tuple):
        return bootstrap
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


class TwoPhaseProducer:
    def __init__(self, bootstrap: str | tuple[str, int], transactional_id: str, *,
                 retry_deadline_s: float = 60.0) -> None:
        self.bootstrap = _split(bootstrap)
        self.transactional_id = transactional_id
        self.retry_deadline_s = retry_deadline_s
        self.producer_id = -1
        self.epoch = -1
        self.ongoing: PreparedTxnState | None = None  # the prepared transaction kept at start
        self._clients: dict[tuple[str, int], ProtocolClient] = {}
        self._coordinator: ProtocolClient | None = None
        self._added: set[tuple[str, int]] = set()
        self._sequences: dict[tuple[str, int], int] = {}

    # --- connections -------------------------------------------------------------------------

    async def _client(self, addr: tuple[str, int]) -> ProtocolClient:
        client = self._clients.get(addr)
        if client is None or not client.connected:  # new, or lost (a broker restarted): connect again
            if client is not None and self._coordinator is client:
                self._coordinator = None
            client = self._clients[addr] = await ProtocolClient(*addr, client_id="kbroker-2pc").connect()
        return client

    async def close(self) -> None:
        for c in self._clients.values():
            await c.close()
        self._clients.clear()
        self._coordinator = None

    async def __aenter__(self) -> TwoPhaseProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _retrying(self, what: str, call: Any) -> Any:
        """Run ``call()`` (returning (error code, result)) until it is not a retriable error."""
        deadline = time.monotonic() + self.retry_deadline_s
        # Short at first, doubling: the usual retriable answer is CONCURRENT_TRANSACTIONS to the
        # InitProducerId that fences an open transaction (the 2pc gate's, every micro-batch), which
        # the coordinator settles within milliseconds (its abort's markers and Complete state); a
        # first wait of 50 ms was most of the driver's commit.
        backoff = 0.005
        while True:
            try:
                code, result = await call()
            except (ConnectionError, OSError) as e:  # lost connection: find the coordinator again
                if time.monotonic() > deadline:
                    raise TwoPhaseError(f"{what}: {e!r}", ErrorCode.NETWORK_EXCEPTION) from e
                code, result = ErrorCode.NOT_COORDINATOR, None
            if code == ErrorCode.NONE:
                return result
            if code not in _RETRIABLE or time.monotonic() > deadline:
                raise TwoPhaseError(what, code)
            if code == ErrorCode.NOT_COORDINATOR:
                self._coordinator = None
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    async def _coord(self) -> ProtocolClient:
        if self._coordinator is None:
            boot = await self._client(self.bootstrap)

            async def find() -> tuple[int, Any]:
                r = await boot.request(FindCoordinatorRequest(version=3, key=self.transactional_id, key_type=1), 3)
                return r.error_code, (r.host, r.port)
            self._coordinator = await self._client(await self._retrying("FindCoordinator", find))
        return self._coordinator

    async def _leader(self, topic: str, partition: int) -> ProtocolClient:
        boot = await self._client(self.bootstrap)
        md = await boot.request(MetadataRequest(
            version=8, topics=[MetadataRequest.MetadataRequestTopic(version=8, name=topic)],
            allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False), 8)
        nodes = {b.node_id: (b.host, b.port) for b in md.brokers}
        for t in md.topics:
            for p in t.partitions if t.name == topic and not t.error_code else []:
                if p.partition_index == partition and p.leader_id in nodes:
                    return await self._client(nodes[p.leader_id])
        raise TwoPhaseError(f"leader of {topic}-{partition}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

    # --- the transaction ---------------------------------------------------------------------

    async def start(self, *, keep_prepared_txn: bool = False,
                    transaction_timeout_ms: int = 60000) -> PreparedTxnState | None:
        """InitProducerId v6 with enable2Pc. With ``keep_prepared_txn`` an open (prepared)
        transaction of this transactional id is kept and returned; otherwise it is aborted."""
        async def init() -> tuple[int, Any]:
            c = await self._coord()
            r = await c.request(InitProducerIdRequest(
                version=6, transactional_id=self.transactional_id, transaction_timeout_ms=transaction_timeout_ms,
                producer_id=-1, producer_epoch=-1, enable2_pc=True, keep_prepared_txn=keep_prepared_txn), 6)
            return r.error_code, r
        r = await self._retrying("InitProducerId", init)
        self.producer_id, self.epoch = r.producer_id, r.producer_epoch
        self._added.clear()
        self._sequences.clear()
        self.ongoing = (PreparedTxnState(r.ongoing_txn_producer_id, r.ongoing_txn_producer_epoch)
                        if r.ongoing_txn_producer_id >= 0 else None)
        return self.ongoing

    async def send(self, topic: str, partition: int, records: Sequence[tuple[Any, ...]]) -> int:
        """Write ``records`` — (key, value) or (key, value, headers) — to one partition inside the
        transaction, as one batch; the base offset."""
        if self.producer_id < 0:
            raise RuntimeError("start() first")
        tp = (topic, partition)
        await self.add_partitions([tp])
        seq = self._sequences.get(tp, 0)
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True,
                                            producer_id=self.producer_id, producer_epoch=self.epoch,
                                            base_sequence=seq, batch_size=1 << 30)
        now = int(time.time() * 1000)
        for i, rec in enumerate(records):
            builder.append(i, timestamp=now, key=rec[0], value=rec[1], headers=rec[2] if len(rec) > 2 else [])
        batch = bytes(builder.build())
        P = ProduceRequest.TopicProduceData
        req = ProduceRequest(version=9, transactional_id=self.transactional_id, acks=-1, timeout_ms=30000,
                             topic_data=[P(version=9, name=topic, partition_data=[
                                 P.PartitionProduceData(version=9, index=partition, records=batch)])])
        part = (await (await self._leader(topic, partition)).request(req, 9)).responses[0].partition_responses[0]
        if part.error_code:
            raise TwoPhaseError(f"Produce {topic}-{partition}", part.error_code)
        self._sequences[tp] = seq + len(records)
        return part.base_offset

    async def add_partitions(self, tps: Iterable[tuple[str, int]]) -> None:
        """AddPartitionsToTxn for those of ``tps`` not in the transaction yet, in one request."""
        new = sorted(set(tps) - self._added)
        if not new:
            return
        topics: dict[str, list[int]] = {}
        for topic, partition in new:
            topics.setdefault(topic, []).append(partition)

        async def add() -> tuple[int, None]:
            c = await self._coord()
            R = AddPartitionsToTxnRequest
            resp = await c.request(R(
                version=3, v3_and_below_transactional_id=self.transactional_id,
                v3_and_below_producer_id=self.producer_id, v3_and_below_producer_epoch=self.epoch,
                v3_and_below_topics=[R.AddPartitionsToTxnTopic(version=3, name=t, partitions=ps)
                                     for t, ps in topics.items()]), 3)
            codes = [p.partition_error_code for t in resp.results_by_topic_v3_and_below for p in t.results_by_partition]
            return max(codes, key=lambda code: code != 0), None
        await self._retrying(f"AddPartitionsToTxn {', '.join(f'{t}-{p}' for t, p in new)}", add)
        self._added.update(new)

    async def prepare(self) -> PreparedTxnState:
        """Kafka's prepareTransaction: every send was acknowledged (acks=all), so the transaction
        is durable and only waits for commit or abort; returns what completes it later."""
        if self.producer_id < 0:
            raise RuntimeError("start() first")
        return PreparedTxnState(self.producer_id, self.epoch)

    async def _end(self, commit: bool) -> None:
        async def end() -> tuple[int, None]:
            c = await self._coord()
            r = await c.request(EndTxnRequest(version=4, transactional_id=self.transactional_id,
                                              producer_id=self.producer_id, producer_epoch=self.epoch,
                                              committed=commit), 4)
            return r.error_code, None
        await self._retrying("EndTxn", end)
        self._added.clear()

    async def commit(self) -> None:
        await self._end(True)

    async def abort(self) -> None:
        await self._end(False)

    async def complete(self, state: PreparedTxnState) -> bool:
        """Kafka's completeTransaction after ``start(keep_prepared_txn=True)``: commit the kept
        transaction when it is the one ``state`` names, else abort it. True when committed."""
        if self.ongoing is None:
            raise TwoPhaseError(f"no prepared transaction of {self.transactional_id} to complete",
                                ErrorCode.INVALID_TXN_STATE)
        commit = self.ongoing == state
        await self._end(commit)
        self.ongoing = None
        return commit

    async def complete_prepared(self, state: PreparedTxnState, *, commit: bool = True) -> bool:
        """From any process: recover the prepared transaction and commit it (``commit``) when it
        matches ``state``, otherwise abort it. True when it was committed. A transactional id with
        no open transaction (already completed) returns False without touching anything."""
        if await self.start(keep_prepared_txn=True) is None:
            return False
        if not commit:
            await self.abort()
            self.ongoing = None
            return False
        return await self.complete(state)


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
