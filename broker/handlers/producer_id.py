"""InitProducerId (key 22), versions 0-5.

As in Kafka, a request without a transactional id always gets a fresh producer id with epoch 0
from the persisted id-block allocator (ids are never reused, even after kill -9); a producer
id/epoch passed by the client (KIP-360, v3+) is not needed to fence anything for idempotent
producers.

With a transactional id the transaction coordinator assigns the id and epoch: a first call
gets a new producer id; later calls bump the epoch (fencing the previous instance and aborting
its open transaction, answered CONCURRENT_TRANSACTIONS until the abort completes); an exhausted
epoch gets a new producer id; KIP-360 callers passing their id/epoch are accepted when it is the
current or the previous pair, otherwise PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v4).

ACLs (as KafkaApis): a transactional id needs WRITE on it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an
idempotent producer needs IDEMPOTENT_WRITE on the cluster or, KIP-679, WRITE on any topic
(CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from kafka.protocol.producer import InitProducerIdResponse

from broker.handlers import AclOperation, RequestContext, ResourceType, api
from protocol.errors import ErrorCode


@api(22, 0, 5)
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
    if request.transactional_id is not None:
        code, pid, epoch = await ctx.broker.txn_coordinator.init_producer_id(
            request.transactional_id, request.transaction_timeout_ms,
            request.producer_id if v >= 3 else -1, request.producer_epoch if v >= 3 else -1)
        if code == ErrorCode.PRODUCER_FENCED and v < 4:
            code = ErrorCode.INVALID_PRODUCER_EPOCH
        return InitProducerIdResponse(version=v, throttle_time_ms=0, error_code=code, producer_id=pid,
                                      producer_epoch=epoch)
    pid = ctx.broker.producer_ids.generate()
    return InitProducerIdResponse(version=v, throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=0)
