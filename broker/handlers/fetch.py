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

Fetch sessions (KIP-227, broker/fetch_sessions.py): created for followers only. A follower's
full fetch with epoch 0 opens a session; its incremental fetches name only what changed and get
only the partitions with news. A consumer's full fetch is answered with session id 0 ("no session
was created"), so it keeps sending full requests (deviation: Kafka gives consumers sessions too).
Unknown session: FETCH_SESSION_ID_NOT_FOUND; wrong epoch: INVALID_FETCH_SESSION_EPOCH.
Deviation in timing: while a partition this broker started leading is not yet in a follower's
session, that follower's long poll lasts at most 20 ms (FetchSessionCache.expect), so its next fetch
can name the partition without waiting out replica.fetch.wait.max.ms.

The response is encoded by protocol.fast_codecs, which passes the segment bytes through as
separate chunks of the socket write instead of copying them into one buffer. Ranges of 64 KiB and
more are not read at all: they stay storage.log.FileSlice references (segment file, position,
length) that broker/connection.py sends with os.sendfile, or copies on TLS listeners (see
docs/benchmarks.md, "Zero-copy fetch").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from broker import dropped_batch
from broker.client_throttle import max_fetch_bytes
from broker.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    CachedPartition,
    FetchSession,
    fetch_replica_id,
    next_epoch,
)
from broker.handlers import AclOperation, RawResponse, RequestContext, ResourceType, api
from broker.partition import Partition
from broker.replication.leader import lag_clock_ms
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
    log_start_offset: int = -1  # a follower's own log start offset


@dataclass(slots=True)
class _Result:
    error: ErrorCode
    hw: int
    lso: int
    log_start: int
    records: bytes | memoryview | FileSlice
    aborted: list | None
    diverging: tuple[int, int] | None = None


def _resolve(ctx: RequestContext, request, may_read: Callable[[str], bool]) -> list[_Item]:
    md = ctx.metadata
    use_ids = ctx.api_version >= 13
    items = []
    for t in request.topics:
        name = _topic_name(md, t, use_ids)
        for p in t.partitions:
            items.append(_item(ctx, may_read, use_ids, name, getattr(t, "topic_id", None), p.partition,
                               p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch,
                               getattr(p, "last_fetched_epoch", -1), getattr(p, "log_start_offset", -1)))
    return items


def _topic_name(md, t, use_ids: bool) -> str | None:
    if use_ids:
        info = md.get_topic_by_id(t.topic_id)
        return info.name if info else None
    return t.topic


def _item(ctx: RequestContext, may_read: Callable[[str], bool], use_ids: bool, name: str | None, topic_id: object,
          index: int, fetch_offset: int, max_bytes: int, leader_epoch: int, last_fetched_epoch: int,
          log_start_offset: int = -1) -> _Item:
    missing = ErrorCode.UNKNOWN_TOPIC_ID if use_ids else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    denied = name is not None and not may_read(name)
    part, code = (ctx.partitions.get_leader(name, index) if name is not None and not denied else
                  (None, ErrorCode.TOPIC_AUTHORIZATION_FAILED if denied else missing))
    item = _Item(name, topic_id, index, fetch_offset, max_bytes, leader_epoch, part,
                 last_fetched_epoch=last_fetched_epoch, log_start_offset=log_start_offset)
    if part is None:
        item.error = missing if name is None else code
    elif leader_epoch >= 0 and leader_epoch != part.leader_epoch:
        item.error = (ErrorCode.FENCED_LEADER_EPOCH if leader_epoch < part.leader_epoch
                      else ErrorCode.UNKNOWN_LEADER_EPOCH)
    return item


def _open_session(ctx: RequestContext, request, replica: int) -> tuple[FetchSession | None, bool, ErrorCode]:
    """(session, incremental, error) for a v7+ fetch, as Kafka's FetchManager.newContext."""
    sid, epoch = request.session_id, request.session_epoch
    cache = ctx.services.fetch_sessions
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full fetch
        if sid != 0:
            cache.remove(sid)
        if epoch == INITIAL_EPOCH and replica >= 0:
            return cache.create(replica), False, ErrorCode.NONE
        return None, False, ErrorCode.NONE
    if sid == 0:
        return None, False, ErrorCode.INVALID_FETCH_SESSION_EPOCH
    session = cache.get(sid)
    if session is None or session.replica != replica:
        return None, False, ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    if session.epoch != epoch:
        return None, False, ErrorCode.INVALID_FETCH_SESSION_EPOCH
    return session, True, ErrorCode.NONE


def _update_session(ctx: RequestContext, request, session: FetchSession) -> None:
    """Apply a request's partitions (added or changed) and forgotten partitions to its session."""
    md = ctx.metadata
    use_ids = ctx.api_version >= 13
    partitions = ctx.partitions
    for f in request.forgotten_topics_data or ():
        name = _topic_name(md, f, use_ids)
        for index in f.partitions:
            session.forget((name, index))
    for t in request.topics:
        name = _topic_name(md, t, use_ids)
        if name is None:
            continue  # answered UNKNOWN_TOPIC_ID by _session_items' extra list, never cached
        topic_id = t.topic_id if use_ids else None
        for p in t.partitions:
            key = (name, p.partition)
            cp = session.update(key, topic_id, p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch,
                                getattr(p, "last_fetched_epoch", -1), getattr(p, "log_start_offset", -1))
            part = partitions.get(*key)
            if part is not None:
                _watch(session, cp, part)


def _session_items(ctx: RequestContext, request, session: FetchSession, incremental: bool,
                   may_read: Callable[[str], bool]) -> list[_Item]:
    """The session partitions to read, in session order: all of them for a full fetch; for an
    incremental one only those the request names and those marked as possibly having news since
    the last answer (FetchSession.dirty, marked by the partitions: appends, a moved high watermark
    or log start, role changes, deletion). The rest are settled (the follower is at the log end
    and was told the current high watermark and log start) and cost nothing per fetch, so a
    session of thousands of idle partitions answers as fast as one of a few: this per-fetch work
    is where a leader's CPU went before."""
    use_ids = ctx.api_version >= 13
    cached = session.partitions
    if incremental:
        wanted = {(t.topic, p.partition) for t in request.topics for p in t.partitions} | session.dirty
        if len(wanted) * 4 < len(cached):  # few: skip the walk in session order
            keys = [k for k in wanted if k in cached]
        else:
            keys = [k for k in cached if k in wanted]
    else:
        keys = list(cached)
    items = []
    for key in keys:
        cp = cached[key]
        it = _item(ctx, may_read, use_ids, cp.topic, cp.topic_id, cp.index, cp.fetch_offset, cp.max_bytes,
                   cp.leader_epoch, cp.last_fetched_epoch, cp.follower_log_start)
        if it.part is not None:
            # A partition named before this broker had it (a follower that learned of a new topic
            # first) is watched from its first read here, so that an append ends this fetch if it
            # parks; watched only after the answer, it stayed parked for replica.fetch.wait.max.ms.
            _watch(session, cp, it.part)
        items.append(it)
    return items


def _watch(session: FetchSession, cp: CachedPartition, part: Partition) -> None:
    """Make ``part`` tell ``session`` of its news; again only when the partition object changed
    (a partition created, or recreated, after the session named it)."""
    if cp.watched is not part:
        part.watch(session)
        cp.watched = part


def _settle(ctx: RequestContext, session: FetchSession, items: list[_Item]) -> None:
    """After an answer: the read partitions with nothing more for the follower leave the dirty set
    (Kafka's quiet partitions of an incremental fetch): it is at the log end, was told the high
    watermark and log start, and is in the ISR (else every fetch looks at it, which retries the ISR
    expansion). The others stay marked, to be looked at again on the next fetch."""
    md = ctx.metadata
    fenced = md.fenced()
    me = ctx.node_id
    replica = session.replica
    dirty = session.dirty
    for it in items:
        key = (it.topic, it.index)
        part = it.part
        cp = session.partitions.get(key)
        if cp is None:
            continue
        if part is None or it.error or fenced:
            dirty.add(key)  # looked at again until it answers normally
            continue
        ls = part.leader_state
        fs = ls.followers.get(replica) if ls is not None else None
        lg = part.log
        leo = lg.log_end_offset
        if (fs is not None and fs.leo == cp.fetch_offset == leo and cp.hw == part.high_watermark
                and cp.log_start == lg.log_start_offset and cp.leader_epoch in (-1, part.leader_epoch)
                and md.leader(*key) == me and replica in md.isr(*key)):
            dirty.discard(key)
        else:
            dirty.add(key)


def _session_response(session: FetchSession, items: list[_Item], results: list[_Result],
                      incremental: bool) -> tuple[list[_Item], list[_Result]]:
    """The partitions to answer with (all of them in a full fetch), updating the cached figures;
    partitions that returned records move to the end of the session's order."""
    keep_items, keep_results, served = [], [], []
    for it, r in zip(items, results, strict=True):
        cp = session.partitions.get((it.topic, it.index))
        size = len(r.records)
        respond = True if cp is None else cp.must_respond(r.error, size, r.diverging is not None, r.hw, r.log_start)
        if respond or not incremental:
            keep_items.append(it)
            keep_results.append(r)
        if size:
            served.append((it.topic, it.index))
    for key in served:
        session.move_to_end(key)
    return keep_items, keep_results


def _may_read(ctx: RequestContext, replica: int) -> Callable[[str], bool]:
    if replica >= 0:
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
        start = it.fetch_offset
        if dropped_batch.ACTIVE and not follower:  # test-only fault
            start, upper = dropped_batch.clip(part.topic, part.index, start, upper)
        try:
            limit = min(it.max_bytes, max(max_bytes - total, 0))
            rr = lg.read(start, limit, max_offset=upper, min_one_batch=total == 0, zero_copy=True)
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
                           for a in lg.collect_aborted_txns(start, upper)]
        total += rr.size
        results.append(_Result(ErrorCode.NONE, hw, lso, lg.log_start_offset, records, aborted))
    return results, total, errors


@api(1, 4, 17)
async def handle_fetch(ctx: RequestContext, request) -> RawResponse:
    v = ctx.api_version
    replica = request.replica_id if v < 15 else fetch_replica_id(request)  # (a field of its own before v15)
    follower = replica >= 0
    session, incremental = None, False
    if v >= 7:
        session, incremental, code = _open_session(ctx, request, replica)
        if code:
            return RawResponse(encode_fetch_response(v, code, 0, []))
    if session is not None:
        _update_session(ctx, request, session)
    may_read = _may_read(ctx, replica)  # once per request: it is asked for every partition, twice

    def resolve() -> list[_Item]:
        if session is None:
            return _resolve(ctx, request, may_read)
        # Partitions whose topic id is unknown are answered (with the error) but never cached.
        extra = [it for it in _resolve(ctx, request, may_read) if it.topic is None] if v >= 13 else []
        return _session_items(ctx, request, session, incremental, may_read) + extra

    items = resolve()
    isolation = request.isolation_level
    # Client quotas bound a consumer's fetch, never a follower's (max_fetch_bytes would say the same).
    max_bytes = request.max_bytes if follower else max_fetch_bytes(ctx.services.quotas, request, ctx.principal,
                                                                   ctx.client_id)
    if follower:
        _record_follower_fetch(ctx, items, replica)
    results, total, errors = _read(items, max_bytes, isolation, follower=follower)
    if total < request.min_bytes and request.max_wait_ms > 0 and not errors:
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + request.max_wait_ms / 1000
        parts = [it.part for it in items if it.part is not None] if session is None else []
        while total < request.min_bytes:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if session is not None and session.expected:
                # A partition this follower is to fetch from here is not in its fetch yet: answer
                # soon, so that its next fetch can name it (FetchSessionCache.expect).
                cap = session.expected_wait_cap_s(lag_clock_ms())
                if cap is not None and cap < remaining:
                    remaining = cap
                    deadline = time.monotonic() + cap
            fut: asyncio.Future[None] = loop.create_future()
            if session is not None:
                # The whole session waits: news of any of its partitions ends the long poll
                # (FetchSession.mark; not a high watermark that moved alone).
                session.waiter = fut
            for p in parts:
                # A follower is not woken by a high watermark that moved alone (Partition.add_waiter).
                p.add_waiter(fut, log_only=follower)
            # The deadline ends the wait like any wake-up (cheaper than asyncio.wait_for, and
            # every parked fetch pays it).
            timer = loop.call_later(remaining, _end_wait, fut)
            try:
                await fut
            finally:
                timer.cancel()
                if session is not None and session.waiter is fut:
                    session.waiter = None
                for p in parts:
                    p.remove_waiter(fut)
            items = resolve()
            results, total, errors = _read(items, max_bytes, isolation, follower=follower)
            if errors:
                break
    if not follower:
        _count_bytes_out(ctx, items, results)
    if session is None:
        return _build_response(ctx, v, items, results, 0)
    session.last_fetch_ms = lag_clock_ms()  # feeds the follower's caught-up time (Partition.tell_sessions)
    read_items = items
    items, results = _session_response(session, items, results, incremental)
    _settle(ctx, session, read_items)
    if incremental:
        session.epoch = next_epoch(session.epoch)
    return _build_response(ctx, v, items, results, session.id)


def _record_follower_fetch(ctx: RequestContext, items: list[_Item], replica: int) -> None:
    """The leader learns each follower's log end offset from its fetch offset (not when the
    fetch diverges: that offset is not part of the leader's log)."""
    rm = ctx.partitions
    for it in items:
        part = it.part
        if it.error or part is None or part.leader_state is None:
            continue
        if it.last_fetched_epoch >= 0 and diverging_epoch(part.log.end_offset_for_epoch, it.last_fetched_epoch,
                                                          it.fetch_offset) is not None:
            continue
        if it.fetch_offset <= part.log.log_end_offset:
            rm.record_follower_fetch(part, replica, it.fetch_offset, it.log_start_offset)


def _end_wait(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _count_bytes_out(ctx: RequestContext, items: list[_Item], results: list[_Result]) -> None:
    """BytesOutPerSec: the record batches sent to consumers (Kafka counts a follower's fetches
    as replication bytes instead, which kbroker does not meter yet)."""
    stats = ctx.partitions.topic_stats
    for it, r in zip(items, results, strict=True):
        if it.part is not None and r.records:
            stats.on_fetch(it.part.topic, len(r.records))


_LEADER_MOVED = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)


def _build_response(ctx: RequestContext, v: int, items: list[_Item], results: list[_Result],
                    session_id: int) -> RawResponse:
    topics: list[tuple[str | None, object, list[FetchPartitionOut]]] = []
    md = ctx.metadata
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
    return RawResponse(encode_fetch_response(v, 0, session_id, topics, node_endpoints=endpoints))
