"""Fetch (key 1), versions 4-17.

Returns whole record batches as stored (segment byte ranges, never re-encoded) from each
requested partition, bounded by ``partition_max_bytes`` and the response ``max_bytes``; the
first partition with data always gets at least one whole batch (so a batch larger than the
limits still makes progress, as in Kafka). read_uncommitted reads up to the high watermark,
read_committed up to the last stable offset and attaches the aborted transactions overlapping
the returned range. When less than ``min_bytes`` is available the request parks for up to
``max_wait_ms`` and is woken by any append to one of its partitions.

Errors per partition: UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID (v13+ topic ids),
OFFSET_OUT_OF_RANGE, FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH for a mismatching
current_leader_epoch. Cluster mode: NOT_LEADER_OR_FOLLOWER for a partition another broker leads,
an offline one, or any while this broker's etcd session is fenced; from v12 with KIP-951's
CurrentLeader (leader id and epoch) and from v16 the leaders' NodeEndpoints.

Replication (cluster mode, issue 14): a fetch with replica_id >= 0 (v15+: replica_state) comes
from a follower. It reads up to the log end offset, not the high watermark, and its fetch offset
is the follower's log end offset, which the leader records (ISR expansion, high watermark). A
fetch carrying last_fetched_epoch (v12+) whose log cannot continue at the fetch offset gets
``diverging_epoch`` (the leader's epoch and its end offset) and no records, as Kafka's
Partition.fetchRecords; an epoch the leader knows nothing of answers OFFSET_OUT_OF_RANGE.

ACLs (as KafkaApis): a consumer needs READ on each topic, a follower (replica id >= 0)
CLUSTER_ACTION on the cluster; denied partitions answer TOPIC_AUTHORIZATION_FAILED and the others
are served.

Fetch sessions (KIP-227): kbroker does not create sessions. A full fetch (session id 0) is
answered with session id 0, which tells the client that no session was created, so it keeps
sending full requests; an incremental fetch naming a session gets FETCH_SESSION_ID_NOT_FOUND.

The response is encoded by protocol.fast_codecs, which passes the segment bytes through as
separate chunks of the socket write instead of copying them into one buffer. Ranges of 64 KiB and
more are not read at all: they stay storage.log.FileSlice references (segment file, position,
length) that broker/server.py sends with os.sendfile, or copies on TLS listeners (see
docs/benchmarks.md, "Zero-copy fetch").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from broker.client_throttle import fetch_replica_id, max_fetch_bytes
from broker.handlers import AclOperation, RawResponse, RequestContext, ResourceType, api
from broker.replica_manager import Partition
from broker.replication.truncation import diverging_epoch
from protocol.errors import ErrorCode
from protocol.fast_codecs import FetchPartitionOut, encode_fetch_response
from storage.log import FileSlice, OffsetOutOfRangeError

READ_COMMITTED = 1


@dataclass(slots=True)
class _Item:
    topic: str | None
    topic_id: object
    index: int
    fetch_offset: int
    max_bytes: int
    leader_epoch: int
    part: Partition | None
    error: ErrorCode = ErrorCode.NONE
    last_fetched_epoch: int = -1


@dataclass(slots=True)
class _Result:
    error: ErrorCode
    hw: int
    lso: int
    log_start: int
    records: bytes | memoryview | FileSlice
    aborted: list | None
    diverging: tuple[int, int] | None = None


def _resolve(ctx: RequestContext, request) -> list[_Item]:
    md = ctx.broker.metadata
    rm = ctx.broker.replica_manager
    use_ids = ctx.api_version >= 13
    may_read = _may_read(ctx, request)
    items = []
    for t in request.topics:
        if use_ids:
            info = md.get_topic_by_id(t.topic_id)
            name = info.name if info else None
            missing = ErrorCode.UNKNOWN_TOPIC_ID
        else:
            name = t.topic
            missing = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        denied = name is not None and not may_read(name)
        for p in t.partitions:
            part, code = (rm.get_leader(name, p.partition) if name is not None and not denied else
                          (None, ErrorCode.TOPIC_AUTHORIZATION_FAILED if denied else missing))
            item = _Item(name, getattr(t, "topic_id", None), p.partition, p.fetch_offset, p.partition_max_bytes,
                         p.current_leader_epoch, part, last_fetched_epoch=getattr(p, "last_fetched_epoch", -1))
            if part is None:
                item.error = missing if name is None else code
            elif p.current_leader_epoch >= 0 and p.current_leader_epoch != part.leader_epoch:
                item.error = (ErrorCode.FENCED_LEADER_EPOCH if p.current_leader_epoch < part.leader_epoch
                              else ErrorCode.UNKNOWN_LEADER_EPOCH)
            items.append(item)
    return items


def _may_read(ctx: RequestContext, request) -> Callable[[str], bool]:
    if fetch_replica_id(request) >= 0:
        follower_ok = ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)
        return lambda _name: follower_ok
    return lambda name: ctx.authorize(AclOperation.READ, ResourceType.TOPIC, name)


def _read(items: list[_Item], max_bytes: int, isolation: int, *,
          follower: bool = False) -> tuple[list[_Result], int, bool]:
    results = []
    total = 0
    errors = False
    for it in items:
        part = it.part
        if it.error or part is None:
            results.append(_Result(it.error, -1, -1, -1, b"", None))
            errors = True
            continue
        lg = part.log
        hw = part.high_watermark
        lso = part.last_stable_offset
        if it.last_fetched_epoch >= 0:
            div = diverging_epoch(lg.end_offset_for_epoch, it.last_fetched_epoch, it.fetch_offset)
            if div == "out_of_range":
                results.append(_Result(ErrorCode.OFFSET_OUT_OF_RANGE, hw, lso, lg.log_start_offset, b"", None))
                errors = True
                continue
            if div is not None:
                results.append(_Result(ErrorCode.NONE, hw, lso, lg.log_start_offset, b"", None, diverging=div))
                errors = True  # answer now: the follower must truncate before fetching on
                continue
        # A follower copies everything the leader has; consumers see only what is committed.
        upper = None if follower else lso if isolation == READ_COMMITTED else hw
        try:
            limit = min(it.max_bytes, max(max_bytes - total, 0))
            rr = lg.read(it.fetch_offset, limit, max_offset=upper, min_one_batch=total == 0, zero_copy=True)
        except OffsetOutOfRangeError:
            results.append(_Result(ErrorCode.OFFSET_OUT_OF_RANGE, hw, lso, lg.log_start_offset, b"", None))
            errors = True
            continue
        records = rr.chunks[0] if len(rr.chunks) == 1 else b"".join(rr.chunks)
        aborted = None
        if isolation == READ_COMMITTED and upper is not None:
            aborted = []
            if rr.size:
                aborted = [(a.producer_id, a.first_offset)
                           for a in lg.collect_aborted_txns(it.fetch_offset, upper)]
        total += rr.size
        results.append(_Result(ErrorCode.NONE, hw, lso, lg.log_start_offset, records, aborted))
    return results, total, errors


@api(1, 4, 17)
async def handle_fetch(ctx: RequestContext, request) -> RawResponse:
    v = ctx.api_version
    if v >= 7 and request.session_id != 0:
        return RawResponse(encode_fetch_response(v, ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, []))
    items = _resolve(ctx, request)
    isolation = request.isolation_level
    max_bytes = max_fetch_bytes(ctx.broker.server.quotas, request, ctx.principal, ctx.client_id)
    replica = fetch_replica_id(request)
    follower = replica >= 0
    if follower:
        _record_follower_fetch(ctx, items, replica)
    results, total, errors = _read(items, max_bytes, isolation, follower=follower)
    if total < request.min_bytes and request.max_wait_ms > 0 and not errors:
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + request.max_wait_ms / 1000
        parts = [it.part for it in items if it.part is not None]
        # A follower also hears of a high watermark that moved (it bounds what its own consumers
        # may read, and a follower that becomes leader starts from it).
        hws = [p.high_watermark for p in parts] if follower else None
        while total < request.min_bytes:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            fut: asyncio.Future[None] = loop.create_future()
            for p in parts:
                p.add_waiter(fut)
            try:
                await asyncio.wait_for(fut, remaining)
            except TimeoutError:
                pass
            finally:
                for p in parts:
                    p.remove_waiter(fut)
            items = _resolve(ctx, request)
            results, total, errors = _read(items, max_bytes, isolation, follower=follower)
            if errors or (hws is not None and hws != [p.high_watermark for p in parts]):
                break
    _count_bytes_out(ctx, request, items, results)
    return _build_response(ctx, v, items, results)


def _record_follower_fetch(ctx: RequestContext, items: list[_Item], replica: int) -> None:
    """The leader learns each follower's log end offset from its fetch offset (not when the
    fetch diverges: that offset is not part of the leader's log)."""
    rm = ctx.broker.replica_manager
    for it in items:
        part = it.part
        if it.error or part is None or part.leader_state is None:
            continue
        if it.last_fetched_epoch >= 0 and diverging_epoch(part.log.end_offset_for_epoch, it.last_fetched_epoch,
                                                          it.fetch_offset) is not None:
            continue
        if it.fetch_offset <= part.log.log_end_offset:
            rm.record_follower_fetch(part, replica, it.fetch_offset)


def _count_bytes_out(ctx: RequestContext, request, items: list[_Item], results: list[_Result]) -> None:
    """BytesOutPerSec: the record batches sent to consumers (Kafka counts a follower's fetches
    as replication bytes instead, which kbroker does not meter yet)."""
    if fetch_replica_id(request) >= 0:
        return
    stats = ctx.broker.replica_manager.topic_stats
    for it, r in zip(items, results, strict=True):
        if it.part is not None and r.records:
            stats.on_fetch(it.part.topic, len(r.records))


_LEADER_MOVED = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)


def _build_response(ctx: RequestContext, v: int, items: list[_Item], results: list[_Result]) -> RawResponse:
    topics: list[tuple[str | None, object, list[FetchPartitionOut]]] = []
    md = ctx.broker.metadata
    leaders: set[int] = set()
    for it, r in zip(items, results, strict=True):
        if not topics or topics[-1][0] != it.topic or (v >= 13 and topics[-1][1] != it.topic_id):
            topics.append((it.topic, it.topic_id, []))
        out = FetchPartitionOut(it.index, r.error, r.hw, r.lso, r.log_start, r.aborted, r.records,
                                diverging_epoch=r.diverging)
        if v >= 12 and r.error in _LEADER_MOVED and it.topic is not None:
            # KIP-951: where the leader is now, so the client need not refresh its metadata first.
            leader = md.leader(it.topic, it.index)
            out.current_leader = (leader, md.leader_epoch(it.topic, it.index))
            if leader >= 0:
                leaders.add(leader)
        topics[-1][2].append(out)
    endpoints = None
    if leaders and v >= 16:
        endpoints = [(node, host, port, rack) for node, host, port, rack in ctx.broker_addresses() if node in leaders]
    return RawResponse(encode_fetch_response(v, 0, 0, topics, node_endpoints=endpoints))
