"""Transaction APIs served by the transaction coordinator, and the partition-side admin views.

- AddPartitionsToTxn (24) v0-5: v0-3 from producers; v4+ batched form, including the
  ``verify_only`` form brokers use for KIP-890 verification. Unknown partitions ->
  UNKNOWN_TOPIC_OR_PARTITION and OPERATION_NOT_ATTEMPTED for the rest of the request.
- AddOffsetsToTxn (25) v0-3: adds the group's ``__consumer_offsets`` partition.
- EndTxn (26) v0-5: PrepareCommit/PrepareAbort is written before the answer; markers follow.
  v5 is transaction version 2 (KIP-890 part 2) when ``transaction.version`` is finalized at 2:
  every commit/abort bumps the epoch and the answer carries the producer id and epoch to use
  next (a new producer id at epoch 0 when the epoch is exhausted); the epoch rules of Kafka's
  TV2 endTransaction fence a late EndTxn of the previous transaction (PRODUCER_FENCED).
- TxnOffsetCommit (28) v0-5: offsets are handed to the group coordinator, pending until the
  marker; up to v4 the offsets partition must have been added with AddOffsetsToTxn
  (INVALID_TXN_STATE), which the transactional id's coordinator confirms (in a cluster possibly
  another broker, asked with AddPartitionsToTxn v4 verify_only); v5 under TV2 adds it implicitly,
  as Kafka's addPartition operation (in a cluster through the transactional id's coordinator, on
  whichever broker: AddPartitionsToTxn v5).
- ListTransactions (66) v0-1, DescribeTransactions (65) v0, DescribeProducers (61) v0.

Deviation (latency): an AddPartitionsToTxn / AddOffsetsToTxn that finds the previous transaction
still completing (markers and the Complete state being written) is held up to 100 ms for it to
settle before CONCURRENT_TRANSACTIONS is answered (Kafka answers at once and the client retries
after its backoff, 20 ms or more, which in a cluster was added to every back-to-back transaction).

The four per-transaction answers are protocol.txn_responses' slotted objects, encoded by hand.

PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH to versions older than KIP-588's
(InitProducerId v4, AddPartitionsToTxn v2, AddOffsetsToTxn v2, EndTxn v2, TxnOffsetCommit v3).
With ``transaction.version`` below 2 (UpdateFeatures / ``kbroker features downgrade``), EndTxn
v5 and TxnOffsetCommit v5 get the TV1 behaviour (deviation: Kafka decides by request version
alone; a client only sends them after seeing the feature finalized at 2).

ACLs (as KafkaApis): every producer-side API needs WRITE on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); AddPartitionsToTxn WRITE on each topic (a denied or unknown
partition fails the request: TOPIC_AUTHORIZATION_FAILED / UNKNOWN_TOPIC_OR_PARTITION, the rest
OPERATION_NOT_ATTEMPTED), v4+ (broker to broker) CLUSTER_ACTION on the cluster; AddOffsetsToTxn and
TxnOffsetCommit READ on the group, TxnOffsetCommit READ on each topic. ListTransactions shows and
DescribeTransactions describes only transactional ids the principal may DESCRIBE (and only topics
it may DESCRIBE); DescribeProducers needs READ on each topic.
"""

from __future__ import annotations

from kafka.protocol.admin import (
    DescribeProducersResponse,
    DescribeTransactionsResponse,
    ListTransactionsResponse,
)

from broker.features import TV2_END_TXN_VERSION, TV2_TXN_OFFSET_COMMIT_VERSION, transaction_version
from broker.handlers import AclOperation, RequestContext, ResourceType, api
from protocol.errors import ErrorCode
from protocol.txn_responses import (
    AddOffsetsToTxnResult,
    AddPartitionsToTxnResult,
    EndTxnResult,
    TransactionResult,
    TxnOffsetCommitResult,
    topic_errors,
)


def fenced(code: int, version: int, since: int) -> int:
    if code == ErrorCode.PRODUCER_FENCED and version < since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


def _txn_ok(ctx: RequestContext, tid: str) -> bool:
    return ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid)


def _group_ok(ctx: RequestContext, group_id: str) -> bool:
    return ctx.authorize(AclOperation.READ, ResourceType.GROUP, group_id)


def _coordinator(ctx: RequestContext):
    return ctx.services.txn_coordinator


async def _add_partitions(ctx: RequestContext, tid: str, pid: int, epoch: int, topics, verify_only: bool,
                          v: int) -> dict[tuple[str, int], int]:
    coord = _coordinator(ctx)
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    if not _txn_ok(ctx, tid):
        return dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    writable = ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC, (tp[0] for tp in wanted))
    md = ctx.metadata

    def exists(topic: str, p: int) -> bool:  # in a cluster the coordinator need not host the partition
        info = md.get_topic(topic)
        return info is not None and 0 <= p < info.num_partitions

    failed = {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp[0] not in writable else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
              for tp in wanted if tp[0] not in writable or not exists(*tp)}
    if failed:
        return {tp: failed.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in wanted}
    if verify_only:
        return {tp: coord.verify_partition(tid, pid, epoch, *tp) for tp in wanted}
    # v5 from a broker (not verify-only) is transaction version 2's implicit add (KIP-890 part 2).
    code = fenced(await coord.add_partitions(tid, pid, epoch, wanted, txn_version=2 if v >= 5 else 0), v, 2)
    return dict.fromkeys(wanted, code)


@api(24, 0, 5)
async def handle_add_partitions_to_txn(ctx: RequestContext, request) -> AddPartitionsToTxnResult:
    v = ctx.api_version
    if v <= 3:
        codes = await _add_partitions(ctx, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                                      request.v3_and_below_producer_epoch, request.v3_and_below_topics, False, v)
        return AddPartitionsToTxnResult(results_by_topic_v3_and_below=topic_errors(codes.items()))
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return AddPartitionsToTxnResult(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    results = []
    for t in request.transactions:
        codes = await _add_partitions(ctx, t.transactional_id, t.producer_id, t.producer_epoch, t.topics,
                                      t.verify_only, v)
        results.append(TransactionResult(t.transactional_id, topic_errors(codes.items())))
    return AddPartitionsToTxnResult(results_by_transaction=results)


@api(25, 0, 3)
async def handle_add_offsets_to_txn(ctx: RequestContext, request) -> AddOffsetsToTxnResult:
    v = ctx.api_version
    gc = ctx.services.group_coordinator
    if gc is None:
        return AddOffsetsToTxnResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if not _txn_ok(ctx, request.transactional_id) or not _group_ok(ctx, request.group_id):
        return AddOffsetsToTxnResult(ErrorCode.GROUP_AUTHORIZATION_FAILED if _txn_ok(ctx, request.transactional_id)
                                     else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    await gc.ensure_topic()
    tp = (gc.topic, gc.partition_for(request.group_id))
    code = await _coordinator(ctx).add_partitions(request.transactional_id, request.producer_id,
                                                  request.producer_epoch, [tp])
    return AddOffsetsToTxnResult(fenced(code, v, 2))


@api(26, 0, 5)
async def handle_end_txn(ctx: RequestContext, request) -> EndTxnResult:
    v = ctx.api_version
    if not _txn_ok(ctx, request.transactional_id):
        return EndTxnResult(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    tv = transaction_version(ctx.metadata, v, TV2_END_TXN_VERSION)
    code, pid, epoch = await _coordinator(ctx).end_transaction(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed, tv)
    return EndTxnResult(fenced(code, v, 2), pid, epoch)


@api(28, 0, 5)
async def handle_txn_offset_commit(ctx: RequestContext, request) -> TxnOffsetCommitResult:
    v = ctx.api_version
    gc = ctx.services.group_coordinator
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    denied: dict[tuple[str, int], int] = {}
    if not _txn_ok(ctx, request.transactional_id):
        denied = dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif not _group_ok(ctx, request.group_id):
        denied = dict.fromkeys(wanted, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    else:
        readable = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, (tp[0] for tp in wanted))
        denied = {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED for tp in wanted if tp[0] not in readable}
    if gc is None:
        codes = dict.fromkeys(wanted, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    elif len(denied) == len(wanted) and wanted:
        codes = denied
    else:
        offsets_tp = (gc.topic, gc.partition_for(request.group_id))
        # The transactional id's coordinator may be another broker than this group coordinator.
        add = transaction_version(ctx.metadata, v, TV2_TXN_OFFSET_COMMIT_VERSION) >= 2
        if add:  # TV2: no AddOffsetsToTxn; the offsets partition joins the transaction here.
            await gc.ensure_topic()
        check = (await ctx.services.verifier.ask(request.transactional_id, request.producer_id,
                                                 request.producer_epoch, [offsets_tp], add=add))[offsets_tp]
        if check == ErrorCode.NETWORK_EXCEPTION:  # the coordinator could not be asked: retriable here
            check = ErrorCode.COORDINATOR_NOT_AVAILABLE
        if check == ErrorCode.INVALID_PRODUCER_EPOCH:
            check = ErrorCode.PRODUCER_FENCED
        if check != ErrorCode.NONE:
            codes = dict.fromkeys(wanted, check)
        else:
            offsets = {(t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
                       for t in request.topics for p in t.partitions if (t.name, p.partition_index) not in denied}
            codes = await gc.commit_txn_offsets(
                request.group_id, request.producer_id, request.producer_epoch,
                request.member_id if v >= 3 else "", request.generation_id if v >= 3 else -1,
                request.group_instance_id if v >= 3 else None, offsets)
            codes = {tp: denied.get(tp) or codes[tp] for tp in wanted}
    return TxnOffsetCommitResult(topic_errors((tp, fenced(code, v, 3)) for tp, code in codes.items()))


@api(66, 0, 1)
async def handle_list_transactions(ctx: RequestContext, request) -> ListTransactionsResponse:
    v = ctx.api_version
    from coordinator.txn_metadata import TxnState

    known = {s.wire_name for s in TxnState}
    states = set(request.state_filters or [])
    unknown = sorted(states - known)
    txns = _coordinator(ctx).list(states & known if states else None, set(request.producer_id_filters or []),
                                  request.duration_filter if v >= 1 else -1)
    shown = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, (m.transactional_id for m in txns))
    txns = [m for m in txns if m.transactional_id in shown]
    S = ListTransactionsResponse.TransactionState
    return ListTransactionsResponse(version=v, throttle_time_ms=0, error_code=0, unknown_state_filters=unknown,
                                    transaction_states=[S(version=v, transactional_id=m.transactional_id,
                                                          producer_id=m.producer_id,
                                                          transaction_state=m.state.wire_name) for m in txns])


@api(65, 0, 0)
async def handle_describe_transactions(ctx: RequestContext, request) -> DescribeTransactionsResponse:
    v = ctx.api_version
    S = DescribeTransactionsResponse.TransactionState
    coord = _coordinator(ctx)
    out = []
    for tid in request.transactional_ids:
        allowed = ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid)
        md = coord.txns.get(tid) if allowed else None
        if md is None:
            out.append(S(version=v, transactional_id=tid, error_code=ErrorCode.TRANSACTIONAL_ID_NOT_FOUND if allowed
                         else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                         transaction_state="", transaction_timeout_ms=0, transaction_start_time_ms=-1,
                         producer_id=-1, producer_epoch=-1, topics=[]))
            continue
        by_topic = md.partitions_by_topic()
        shown = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, by_topic)
        topics = [S.TopicData(version=v, topic=t, partitions=ps) for t, ps in by_topic.items() if t in shown]
        out.append(S(version=v, error_code=0, transactional_id=tid, transaction_state=md.state.wire_name,
                     transaction_timeout_ms=md.timeout_ms, transaction_start_time_ms=md.start_ms,
                     producer_id=md.producer_id, producer_epoch=md.producer_epoch, topics=topics))
    return DescribeTransactionsResponse(version=v, throttle_time_ms=0, transaction_states=out)


@api(61, 0, 0)
async def handle_describe_producers(ctx: RequestContext, request) -> DescribeProducersResponse:
    v = ctx.api_version
    T = DescribeProducersResponse.TopicResponse
    P = T.PartitionResponse
    S = P.ProducerState
    rm = ctx.partitions
    topics = []
    readable = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    for t in request.topics:
        parts = []
        for p in t.partition_indexes:
            part, missing = (rm.get_leader(t.name, p) if t.name in readable
                             else (None, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            if part is None or part.producer_state is None:
                parts.append(P(version=v, partition_index=p, error_code=missing if part is None
                               else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               error_message=None, active_producers=[]))
                continue
            active = [S(version=v, producer_id=e.producer_id, producer_epoch=e.producer_epoch,
                        last_sequence=e.last_seq, last_timestamp=e.last_timestamp,
                        coordinator_epoch=e.coordinator_epoch,
                        current_txn_start_offset=-1 if e.current_txn_first_offset is None else e.current_txn_first_offset)
                      for e in part.producer_state.active_producers()]
            parts.append(P(version=v, partition_index=p, error_code=0, error_message=None, active_producers=active))
        topics.append(T(version=v, name=t.name, partitions=parts))
    return DescribeProducersResponse(version=v, throttle_time_ms=0, topics=topics)
