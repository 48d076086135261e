"""KIP-890 at the partition leader: the one transaction verifier, for a single node and a cluster.

Before a transactional batch that opens a transaction on a partition is appended, the leader asks
the transaction coordinator whether the partition is in the producer's ongoing transaction (part
1, Kafka's AddPartitionsToTxnManager with the verification operation: AddPartitionsToTxn v4
``verify_only``), or, under transaction version 2, has the coordinator add it (part 2, the
addPartition operation of Produce v12 and TxnOffsetCommit v5: AddPartitionsToTxn v5). The
coordinator is the leader of the transactional id's ``__transaction_state`` partition: this
broker's own coordinator is asked directly, another broker over the inter-broker connection; a
request that cannot be delivered or answered counts as NETWORK_EXCEPTION, as in Kafka.

``produce_error`` is Kafka's one translation of those answers into Produce errors
(ReplicaManager.appendRecords): PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH and
INVALID_PRODUCER_ID_MAPPING -> INVALID_TXN_STATE (what producers expect on Produce);
NETWORK_EXCEPTION, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE and NOT_COORDINATOR ->
NOT_ENOUGH_REPLICAS, retriable without a metadata refresh; CONCURRENT_TRANSACTIONS likewise for
Produce versions before 12, and kept from v12 on (it is common while the previous transaction
completes, and TV2 clients retry it).

The append itself is guarded (storage.partition_log's verification guard): a marker written for
the producer between the question and the append voids the answer, so a transaction that ended
meanwhile cannot be reopened by the late batch.
"""

from __future__ import annotations

import logging
from typing import Any

from kafka.protocol.producer.transaction import AddPartitionsToTxnRequest

from cluster.metadata_store import MetadataStore
from coordinator.partition_access import partition_for
from protocol.errors import ErrorCode

log = logging.getLogger("broker.txn_verification")

VERIFY_VERSION = 4
ADD_VERSION = 5
TIMEOUT_S = 30.0
TXN_TOPIC = "__transaction_state"
FIRST_EPOCH_BUMP_PRODUCE_VERSION = 12
_TXN = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
_TOPIC = _TXN.AddPartitionsToTxnTopic

_RETRIABLE = frozenset({ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                        ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})


def produce_error(code: int, produce_version: int) -> tuple[ErrorCode, str | None]:
    """A coordinator answer as the partition's Produce error and message (NONE: append)."""
    code = ErrorCode(code)
    if code == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH, None
    if code in (ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_PRODUCER_ID_MAPPING):
        return ErrorCode.INVALID_TXN_STATE, "Partition was not added to the transaction"
    if code in _RETRIABLE or (code == ErrorCode.CONCURRENT_TRANSACTIONS
                              and produce_version < FIRST_EPOCH_BUMP_PRODUCE_VERSION):
        return ErrorCode.NOT_ENOUGH_REPLICAS, ("Unable to verify the partition has been added to the "
                                               f"transaction. Underlying error: {code.name}")
    return code, None


class TxnVerifier:
    """Asks the coordinator of a transactional id about partitions (see the module docstring).
    ``coordinator`` is this broker's transaction coordinator, set once it exists; ``inter_broker``
    (broker.inter_broker.InterBrokerClients) is None on a single node."""

    def __init__(self, node_id: int, metadata: MetadataStore, inter_broker: Any | None) -> None:
        self.node_id = node_id
        self.metadata = metadata
        self.inter_broker = inter_broker
        self.coordinator: Any = None

    async def ask(self, transactional_id: str, producer_id: int, producer_epoch: int,
                  partitions: list[tuple[str, int]], *, add: bool) -> dict[tuple[str, int], ErrorCode]:
        """Verify (``add`` False) or, under transaction version 2, add (``add`` True) ``partitions``
        with the coordinator of ``transactional_id``. The coordinator's answers, unmapped."""
        md = self.metadata
        info = md.get_topic(TXN_TOPIC)
        if info is None:
            # No transaction can be ongoing without its state topic.
            return dict.fromkeys(partitions, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        leader = md.leader(TXN_TOPIC, partition_for(transactional_id, info.num_partitions))
        if leader < 0:
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if leader == self.node_id:
            coord = self.coordinator
            if coord is None:
                return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            if add:
                code = await coord.add_partitions(transactional_id, producer_id, producer_epoch, partitions,
                                                  txn_version=2)
                return dict.fromkeys(partitions, ErrorCode(code))
            return {tp: ErrorCode(coord.verify_partition(transactional_id, producer_id, producer_epoch, *tp))
                    for tp in partitions}
        if self.inter_broker is None:
            return dict.fromkeys(partitions, ErrorCode.NOT_COORDINATOR)
        return await self._ask_remote(leader, transactional_id, producer_id, producer_epoch, partitions, add)

    async def _ask_remote(self, leader: int, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: list[tuple[str, int]], add: bool) -> dict[tuple[str, int], ErrorCode]:
        version = ADD_VERSION if add else VERIFY_VERSION
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        request = AddPartitionsToTxnRequest(version=version, transactions=[_TXN(
            version=version, transactional_id=transactional_id, producer_id=producer_id,
            producer_epoch=producer_epoch, verify_only=not add,
            topics=[_TOPIC(version=version, name=t, partitions=ps) for t, ps in by_topic.items()])])
        try:
            response = await self.inter_broker.request(leader, request, version, TIMEOUT_S)
        except (ConnectionError, OSError, TimeoutError) as e:
            log.info("asking broker %d about %s for %s failed (%r)", leader, partitions, transactional_id, e)
            return dict.fromkeys(partitions, ErrorCode.NETWORK_EXCEPTION)
        if response.error_code:
            return dict.fromkeys(partitions, ErrorCode(response.error_code))
        out = dict.fromkeys(partitions, ErrorCode.NETWORK_EXCEPTION)  # anything left out: retried
        for r in response.results_by_transaction:
            for t in r.topic_results:
                for p in t.results_by_partition:
                    if (t.name, p.partition_index) in out:
                        out[(t.name, p.partition_index)] = ErrorCode(p.partition_error_code)
        return out

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                     partition: int) -> ErrorCode:
        """The coordinator's own answer to whether ``topic``-``partition`` is in the producer's
        ongoing transaction (TxnOffsetCommit checks its ``__consumer_offsets`` partition with it:
        the group and transaction coordinators are often different brokers)."""
        return (await self.ask(transactional_id, producer_id, producer_epoch, [(topic, partition)],
                               add=False))[(topic, partition)]
