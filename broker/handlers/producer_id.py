"""InitProducerId (key 22), versions 0-6.

As in Kafka, a request without a transactional id always gets a fresh producer id with epoch 0
from the persisted id-block allocator (ids are never reused, even after kill -9), or, in a cluster
while no id block has arrived from etcd yet, COORDINATOR_LOAD_IN_PROGRESS (retriable, as Kafka's
RPCProducerIdManager answers while its block request is in flight); a producer
id/epoch passed by the client (KIP-360, v3+) is not needed to fence anything for idempotent
producers.

With a transactional id the transaction coordinator assigns the id and epoch: a first call
gets a new producer id; later calls bump the epoch (fencing the previous instance and aborting
its open transaction, answered CONCURRENT_TRANSACTIONS until the abort completes); an exhausted
epoch gets a new producer id; KIP-360 callers passing their id/epoch are accepted when it is the
current or the previous pair, otherwise PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v4).

v6 (KIP-939, two-phase commit): ``enable2Pc`` needs the broker config
``transaction.two.phase.commit.enable`` (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka)
and makes the transaction immune to its timeout; ``keepPreparedTxn`` (only with ``enable2Pc``, else
INVALID_REQUEST) keeps an Ongoing 2PC transaction for the new instance to complete and answers its
id/epoch in ``ongoing_txn_producer_id``/``ongoing_txn_producer_epoch`` (-1 when none was kept).
An enable2Pc request also needs TWO_PHASE_COMMIT on the TransactionalId (Kafka's ACL operation
15; TRANSACTIONAL_ID_AUTHORIZATION_FAILED), checked before the broker config as KafkaApis does.

ACLs (as KafkaApis): a transactional id needs WRITE on it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an
idempotent producer needs IDEMPOTENT_WRITE on the cluster or, KIP-679, WRITE on any topic
(CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from kafka.protocol.producer import InitProducerIdResponse

from broker.handlers import AclOperation, RequestContext, ResourceType, api
from protocol.errors import ErrorCode, KafkaError


def _two_phase_commit_denied(ctx: RequestContext, tid: str) -> bool:
    """KIP-939: enable2Pc needs TWO_PHASE_COMMIT on the TransactionalId as well as WRITE."""
    return not ctx.authorize(AclOperation.TWO_PHASE_COMMIT, ResourceType.TRANSACTIONAL_ID, tid)


def _response(v: int, code: int, pid: int = -1, epoch: int = -1, ongoing_pid: int = -1,
              ongoing_epoch: int = -1) -> InitProducerIdResponse:
    extra = {"ongoing_txn_producer_id": ongoing_pid, "ongoing_txn_producer_epoch": ongoing_epoch} if v >= 6 else {}
    return InitProducerIdResponse(version=v, throttle_time_ms=0, error_code=code, producer_id=pid,
                                  producer_epoch=epoch, **extra)


@api(22, 0, 6)
async def handle_init_producer_id(ctx: RequestContext, request) -> InitProducerIdResponse:
    v = ctx.api_version
    tid = request.transactional_id
    denied = (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
              if tid is not None and not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid) else
              ErrorCode.CLUSTER_AUTHORIZATION_FAILED
              if tid is None and not ctx.authorize_cluster(AclOperation.IDEMPOTENT_WRITE)
              and not ctx.authorize_by_resource_type(AclOperation.WRITE, ResourceType.TOPIC) else None)
    if denied is not None:
        return InitProducerIdResponse(version=v, throttle_time_ms=0, error_code=denied, producer_id=-1,
                                      producer_epoch=-1)
    if request.transactional_id == "":
        return InitProducerIdResponse(version=v, throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                                      producer_id=-1, producer_epoch=-1)
    enable_2pc = v >= 6 and bool(request.enable2_pc)
    keep_prepared = v >= 6 and bool(request.keep_prepared_txn)
    if request.transactional_id is None:
        if enable_2pc or keep_prepared:  # 2PC needs a transactional id (Kafka: INVALID_REQUEST)
            return _response(v, ErrorCode.INVALID_REQUEST)
    else:
        if enable_2pc and _two_phase_commit_denied(ctx, request.transactional_id):
            return _response(v, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        try:
            code, pid, epoch, ongoing_pid, ongoing_epoch = await ctx.services.txn_coordinator.init_producer_id_2pc(
                request.transactional_id, request.transaction_timeout_ms,
                request.producer_id if v >= 3 else -1, request.producer_epoch if v >= 3 else -1,
                enable_2pc=enable_2pc, keep_prepared_txn=keep_prepared)
        except KafkaError as e:  # no producer-id block yet (COORDINATOR_LOAD_IN_PROGRESS)
            return _response(v, e.code)
        if code == ErrorCode.PRODUCER_FENCED and v < 4:
            code = ErrorCode.INVALID_PRODUCER_EPOCH
        return _response(v, code, pid, epoch, ongoing_pid, ongoing_epoch)
    try:
        pid = ctx.services.producer_ids.generate()
    except KafkaError as e:  # cluster mode, no producer-id block from etcd yet: retriable
        return _response(v, e.code)
    return _response(v, ErrorCode.NONE, pid, 0)
