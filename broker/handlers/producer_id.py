"""InitProducerId (key 22), versions 0-5, for idempotent producers (no transactional id).

As in Kafka, a request without a transactional id always gets a fresh producer id with epoch 0
from the persisted id-block allocator (ids are never reused, even after kill -9); a producer
id/epoch passed by the client (KIP-360, v3+) is not needed to fence anything for idempotent
producers. Requests with a transactional id belong to the transaction coordinator; until it
is served they get COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

from kafka.protocol.producer import InitProducerIdResponse

from broker.handlers import RequestContext, api
from protocol.errors import ErrorCode


@api(22, 0, 5)
async def handle_init_producer_id(ctx: RequestContext, request) -> InitProducerIdResponse:
    v = ctx.api_version
    if request.transactional_id:
        handler = getattr(ctx.broker, "txn_coordinator", None)
        if handler is None:
            return InitProducerIdResponse(version=v, throttle_time_ms=0,
                                          error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, producer_id=-1,
                                          producer_epoch=-1)
        return await handler.handle_init_producer_id(ctx, request)
    pid = ctx.broker.producer_ids.generate()
    return InitProducerIdResponse(version=v, throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=0)
