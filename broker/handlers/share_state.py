"""The share-state RPCs, served by the share coordinator (coordinator/share_coordinator.py):
InitializeShareGroupState (83), ReadShareGroupState (84), WriteShareGroupState (85),
DeleteShareGroupState (86), ReadShareGroupStateSummary (87), each v0.

Brokers send them to each other (broker/share/persister.py): a share-partition leader reads and
writes the state of its share-partitions, the group coordinator initializes, summarizes and
deletes it. Each (group, topic, partition) is answered by the coordinator of its key: a key whose
``__share_group_state`` partition is not led here answers NOT_COORDINATOR, one still loading
COORDINATOR_LOAD_IN_PROGRESS, and the rest as ShareCoordinatorShard does (FENCED_LEADER_EPOCH,
FENCED_STATE_EPOCH, INVALID_REQUEST for an uninitialized key, UNKNOWN_TOPIC_OR_PARTITION).

ACLs (as KafkaApis): CLUSTER_ACTION on the cluster, else every partition answers
CLUSTER_AUTHORIZATION_FAILED. Kafka sends one key per request; several are answered too.
"""

from __future__ import annotations

import asyncio
from typing import Any

from broker.handlers import AclOperation, RequestContext, api
from protocol.errors import ErrorCode
from protocol.share_group_api import (
    DeleteShareGroupStateResponse,
    InitializeShareGroupStateResponse,
    ReadShareGroupStateResponse,
    ReadShareGroupStateSummaryResponse,
    WriteShareGroupStateResponse,
)

E = ErrorCode


def _coordinator(ctx: RequestContext) -> Any:
    return ctx.services.share.coordinator if ctx.services.share is not None else None


def _denied(ctx: RequestContext) -> bool:
    return not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)


async def _each(ctx: RequestContext, request: Any, call: Any) -> list[tuple[Any, list[tuple[Any, Any]]]]:
    """[(topic id, [(partition data, result)])], with CLUSTER_AUTHORIZATION_FAILED when denied."""
    denied = _denied(ctx)
    coord = _coordinator(ctx)
    out = []
    for t in request.topics:
        jobs = []
        for p in t.partitions:
            if denied:
                jobs.append(_const((E.CLUSTER_AUTHORIZATION_FAILED, None)))
            elif coord is None:
                jobs.append(_const((E.COORDINATOR_NOT_AVAILABLE, None)))
            else:
                jobs.append(call(coord, t.topic_id, p))
        results = await asyncio.gather(*jobs)
        out.append((t.topic_id, list(zip(t.partitions, results, strict=True))))
    return out


async def _const(value: Any) -> Any:
    return value


@api(83, 0, 0)
async def handle_initialize_share_group_state(ctx: RequestContext, request) -> InitializeShareGroupStateResponse:
    R = InitializeShareGroupStateResponse
    T = R.InitializeStateResult
    rows = await _each(ctx, request, lambda c, tid, p: c.initialize(request.group_id, tid, p.partition, p.state_epoch,
                                                                    p.start_offset))
    return R(version=0, results=[T(version=0, topic_id=tid, partitions=[
        T.PartitionResult(version=0, partition=p.partition, error_code=r[0], error_message=r[1])
        for p, r in parts]) for tid, parts in rows])


@api(84, 0, 0)
async def handle_read_share_group_state(ctx: RequestContext, request) -> ReadShareGroupStateResponse:
    R = ReadShareGroupStateResponse
    T = R.ReadStateResult
    P = T.PartitionResult

    rows = await _each(ctx, request, lambda c, tid, p: c.read(request.group_id, tid, p.partition, p.leader_epoch))
    out = []
    for tid, parts in rows:
        res = []
        for p, r in parts:
            code, msg = r[0], r[1]
            state_epoch, start, batches = (r[2], r[3], r[4]) if len(r) == 5 else (0, -1, [])
            res.append(P(version=0, partition=p.partition, error_code=code, error_message=msg, state_epoch=state_epoch,
                         start_offset=start, state_batches=[
                             P.StateBatch(version=0, first_offset=f, last_offset=la, delivery_state=s, delivery_count=n)
                             for f, la, s, n in batches]))
        out.append(T(version=0, topic_id=tid, partitions=res))
    return R(version=0, results=out)


@api(85, 0, 0)
async def handle_write_share_group_state(ctx: RequestContext, request) -> WriteShareGroupStateResponse:
    R = WriteShareGroupStateResponse
    T = R.WriteStateResult
    rows = await _each(ctx, request, lambda c, tid, p: c.write(
        request.group_id, tid, p.partition, p.state_epoch, p.leader_epoch, p.start_offset,
        [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches]))
    return R(version=0, results=[T(version=0, topic_id=tid, partitions=[
        T.PartitionResult(version=0, partition=p.partition, error_code=r[0], error_message=r[1])
        for p, r in parts]) for tid, parts in rows])


@api(86, 0, 0)
async def handle_delete_share_group_state(ctx: RequestContext, request) -> DeleteShareGroupStateResponse:
    R = DeleteShareGroupStateResponse
    T = R.DeleteStateResult
    rows = await _each(ctx, request, lambda c, tid, p: c.delete(request.group_id, tid, p.partition))
    return R(version=0, results=[T(version=0, topic_id=tid, partitions=[
        T.PartitionResult(version=0, partition=p.partition, error_code=r[0], error_message=r[1])
        for p, r in parts]) for tid, parts in rows])


@api(87, 0, 0)
async def handle_read_share_group_state_summary(ctx: RequestContext, request) -> ReadShareGroupStateSummaryResponse:
    R = ReadShareGroupStateSummaryResponse
    T = R.ReadStateSummaryResult

    async def call(c: Any, tid: Any, p: Any) -> Any:
        return c.read_summary(request.group_id, tid, p.partition)

    rows = await _each(ctx, request, call)
    out = []
    for tid, parts in rows:
        res = []
        for p, r in parts:
            code, msg = r[0], r[1]
            state_epoch, leader_epoch, start = (r[2], r[3], r[4]) if len(r) == 5 else (0, -1, -1)
            res.append(T.PartitionResult(version=0, partition=p.partition, error_code=code, error_message=msg,
                                         state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start))
        out.append(T(version=0, topic_id=tid, partitions=res))
    return R(version=0, results=out)
