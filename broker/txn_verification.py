"""KIP-890 part 1 across brokers (issue 15): a partition leader asks the transaction coordinator
whether a transactional batch's partition is in the producer's ongoing transaction before
appending it (Kafka's AddPartitionsToTxnManager).

The coordinator is the leader of the transactional id's ``__transaction_state`` partition. When
that is this broker, its coordinator answers directly; otherwise an AddPartitionsToTxn v4 request
with ``verify_only`` goes to it over the inter-broker connection. Under transaction version 2 the
same path adds partitions (AddPartitionsToTxn v5, not verify-only: Produce v12's and TxnOffsetCommit
v5's implicit add, as Kafka's AddPartitionsToTxnManager with the addPartition operation). Answers map as Kafka's
AddPartitionsToTxnManager does for Produce: INVALID_PRODUCER_ID_MAPPING -> INVALID_TXN_STATE,
PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH, and a coordinator that is not reachable, moving or
loading -> NOT_ENOUGH_REPLICAS (retriable for every producer version).

Deviation: Kafka also keeps a verification guard in the producer state so that a transaction
that ends between the check and the append is caught; kbroker checks and appends in the same
loop turn after the answer arrives, which leaves that window open.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kafka.protocol.producer.transaction import AddPartitionsToTxnRequest

from coordinator.partition_access import partition_for
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger("broker.txn_verification")

VERSION = 4
TIMEOUT_S = 30.0
TXN_TOPIC = "__transaction_state"
_TXN = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
_TOPIC = _TXN.AddPartitionsToTxnTopic

_RETRIABLE = (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
              ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.REQUEST_TIMED_OUT)


def produce_error(code: int) -> ErrorCode:
    code = ErrorCode(code)
    if code == ErrorCode.INVALID_PRODUCER_ID_MAPPING:
        return ErrorCode.INVALID_TXN_STATE
    if code == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code in _RETRIABLE:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    return code


async def verify(broker: Broker, transactional_id: str, producer_id: int, producer_epoch: int,
                 topic: str, partition: int) -> ErrorCode:
    """The Produce error for a transactional batch to ``topic``-``partition`` (NONE: append it)."""
    return produce_error(await coordinator_answer(broker, transactional_id, producer_id, producer_epoch,
                                                  topic, partition))


async def coordinator_answer(broker: Broker, transactional_id: str, producer_id: int, producer_epoch: int,
                             topic: str, partition: int) -> ErrorCode:
    """The transaction coordinator's own answer (not yet mapped for Produce) to whether
    ``topic``-``partition`` is in the producer's ongoing transaction, asked of whichever broker
    coordinates ``transactional_id``; COORDINATOR_NOT_AVAILABLE when it is unknown or unreachable.
    TxnOffsetCommit checks its ``__consumer_offsets`` partition with it: the group coordinator and
    the transaction coordinator are often different brokers."""
    codes = await ask_coordinator(broker, transactional_id, producer_id, producer_epoch, [(topic, partition)],
                                  add=False)
    return codes[(topic, partition)]


async def ask_coordinator(broker: Broker, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: list[tuple[str, int]], *, add: bool) -> dict[tuple[str, int], ErrorCode]:
    """Verify (``add`` False: AddPartitionsToTxn v4 ``verify_only``) or, under transaction version
    2, add (``add`` True: v5, Kafka's addPartition operation for Produce v12 and TxnOffsetCommit v5)
    ``partitions`` with the coordinator of ``transactional_id``: this broker's own coordinator, or
    another broker over the inter-broker connection. The coordinator's answers, unmapped."""
    md = broker.metadata
    info = md.get_topic(TXN_TOPIC)
    if info is None:
        # No transaction can be ongoing without its state topic.
        return dict.fromkeys(partitions, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    leader = md.leader(TXN_TOPIC, partition_for(transactional_id, info.num_partitions))
    if leader < 0:
        return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if leader == broker.node_id:
        coord = broker.txn_coordinator
        if add:
            code = await coord.add_partitions(transactional_id, producer_id, producer_epoch, partitions,
                                              txn_version=2)
            return dict.fromkeys(partitions, ErrorCode(code))
        return {tp: ErrorCode(coord.verify_partition(transactional_id, producer_id, producer_epoch, *tp))
                for tp in partitions}
    version = 5 if add else VERSION
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    request = AddPartitionsToTxnRequest(version=version, transactions=[_TXN(
        version=version, transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
        verify_only=not add, topics=[_TOPIC(version=version, name=t, partitions=ps) for t, ps in by_topic.items()])])
    try:
        response = await broker.inter_broker.request(leader, request, version, TIMEOUT_S)
    except (ConnectionError, OSError, TimeoutError) as e:
        log.info("asking broker %d about %s for %s failed (%r)", leader, partitions, transactional_id, e)
        return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if response.error_code:
        return dict.fromkeys(partitions, ErrorCode(response.error_code))
    out = dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)  # anything left out: retried
    for r in response.results_by_transaction:
        for t in r.topic_results:
            for p in t.results_by_partition:
                if (t.name, p.partition_index) in out:
                    out[(t.name, p.partition_index)] = ErrorCode(p.partition_error_code)
    return out
