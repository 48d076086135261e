"""KIP-890 part 1 across brokers (issue 15): a partition leader asks the transaction coordinator
whether a transactional batch's partition is in the producer's ongoing transaction before
appending it (Kafka's AddPartitionsToTxnManager).

The coordinator is the leader of the transactional id's ``__transaction_state`` partition. When
that is this broker, its coordinator answers directly; otherwise an AddPartitionsToTxn v4 request
with ``verify_only`` goes to it over the inter-broker connection. Answers map as Kafka's
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
    md = broker.metadata
    info = md.get_topic(TXN_TOPIC)
    if info is None:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING  # no transaction can be ongoing without its state topic
    leader = md.leader(TXN_TOPIC, partition_for(transactional_id, info.num_partitions))
    if leader < 0:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if leader == broker.node_id:
        return ErrorCode(broker.verify_txn_partition(transactional_id, producer_id, producer_epoch, topic, partition))
    request = AddPartitionsToTxnRequest(version=VERSION, transactions=[_TXN(
        version=VERSION, transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
        verify_only=True, topics=[_TOPIC(version=VERSION, name=topic, partitions=[partition])])])
    try:
        response = await broker.inter_broker.request(leader, request, VERSION, TIMEOUT_S)
    except (ConnectionError, OSError, TimeoutError) as e:
        log.info("verifying %s-%d for %s with broker %d failed (%r)", topic, partition, transactional_id, leader, e)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if response.error_code:
        return ErrorCode(response.error_code)
    for r in response.results_by_transaction:
        for t in r.topic_results:
            for p in t.results_by_partition:
                if t.name == topic and p.partition_index == partition:
                    return ErrorCode(p.partition_error_code)
    return ErrorCode.COORDINATOR_NOT_AVAILABLE
