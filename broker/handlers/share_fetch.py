"""ShareFetch (78) v1 and ShareAcknowledge (79) v1: share consumers fetch records, each acquired
by one member under a lock, and acknowledge them (KIP-932).

A ShareFetch works in the member's share session (broker/share/share_sessions.py: epoch 0 opens
it, -1 ends it, otherwise the epoch must follow; SHARE_SESSION_NOT_FOUND,
INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED after MaxWaitMs, INVALID_REQUEST for
acknowledgements in an opening request — all top-level). Its piggy-backed acknowledgements are
applied and persisted first (AcknowledgeErrorCode per partition), then records are acquired from
the session's partitions (broker/share/share_partition_manager.py), at most MaxRecords in all
(whole batches: a soft limit), MaxBytes shared among the partitions, waiting up to MaxWaitMs for
MinBytes when nothing could be acquired. Records go out as the stored batches; AcquiredRecords
say which offsets of them the member holds and their delivery count. An opening fetch answers
every session partition; later ones only partitions with records, errors or acknowledgement
results. ``AcquisitionLockTimeoutMs`` is the group's lock duration. A request with MaxRecords 0
(acknowledgements only) or epoch -1 acquires nothing; after epoch -1 the session ends and the
member's acquired records are released.

Acknowledgement batches are checked as Kafka's KafkaApis.validateAcknowledgementBatches does
(first offset > last offset, overlapping or unordered batches, no types, a type count that is
neither 1 nor the batch length, a type outside 0-3: INVALID_REQUEST for the partition, nothing
applied), then by the share-partition (offsets past the acquired records: INVALID_REQUEST;
offsets not acquired by this member: INVALID_RECORD_STATE; all or nothing per partition).

Per-partition errors: UNKNOWN_TOPIC_ID (a topic id this broker does not know),
TOPIC_AUTHORIZATION_FAILED, NOT_LEADER_OR_FOLLOWER with CurrentLeader and NodeEndpoints (as
KIP-951), UNKNOWN_TOPIC_OR_PARTITION, COORDINATOR_NOT_AVAILABLE when the share coordinator
cannot be reached. With share groups disabled: UNSUPPORTED_VERSION.

ACLs (as KafkaApis): READ on the group (top-level GROUP_AUTHORIZATION_FAILED), READ on each
topic. Version 0 (Kafka 4.0 early access) is not served, as in Kafka 4.1+; version 2 (KIP-1206
acquire modes, KIP-1222 RENEW) is not served yet.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from broker.features import share_groups_enabled
from broker.handlers import AclOperation, RequestContext, ResourceType, api
from broker.share.services import ShareServices
from broker.share.share_sessions import FINAL_EPOCH, SessionError
from protocol.errors import ErrorCode
from protocol.share_group_api import ShareAcknowledgeResponse, ShareFetchResponse

log = logging.getLogger("broker.share")
E = ErrorCode
_LEADER_MOVED = (E.NOT_LEADER_OR_FOLLOWER, E.FENCED_LEADER_EPOCH)

AckBatches = list[tuple[int, int, list[int]]]


def _share(ctx: RequestContext) -> ShareServices:
    share = ctx.services.share
    assert share is not None, "the broker builds the share services before it serves requests"
    return share


def _validate_batches(batches: Any) -> str | None:
    """Kafka's validateAcknowledgementBatches for one partition: why it is INVALID_REQUEST, or None."""
    prev_end = -1
    for b in batches:
        types = list(b.acknowledge_types or [])
        if b.first_offset > b.last_offset:
            return f"First offset {b.first_offset} is greater than last offset {b.last_offset}."
        if b.first_offset < prev_end:
            return "Acknowledgement batches overlap or are not in order."
        if not types:
            return "Acknowledgement batch without acknowledge types."
        if len(types) > 1 and b.last_offset - b.first_offset != len(types) - 1:
            return "The number of acknowledge types does not match the batch length."
        if any(t < 0 or t > 3 for t in types):
            return f"Invalid acknowledge type in {types}."
        prev_end = b.last_offset
    return None


async def _acknowledge(ctx: RequestContext, group_id: str, member_id: str,
                       requested: list[tuple[uuid.UUID, str | None, int, Any]]) -> dict[tuple[uuid.UUID, int],
                                                                                       tuple[int, str | None]]:
    """Validate and apply acknowledgements: (topic id, topic name or None, partition, batches) ->
    (error, message) per partition."""
    out: dict[tuple[uuid.UUID, int], tuple[int, str | None]] = {}
    names = {name for _, name, _, _ in requested if name is not None}
    allowed = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, names)
    valid: dict[tuple[str, int], tuple[uuid.UUID, AckBatches]] = {}
    for tid, name, index, batches in requested:
        if name is None:
            out[(tid, index)] = (E.UNKNOWN_TOPIC_ID, None)
        elif name not in allowed:
            out[(tid, index)] = (E.TOPIC_AUTHORIZATION_FAILED, None)
        elif (why := _validate_batches(batches)) is not None:
            log.info("share group %s member %s: invalid acknowledgement of %s-%d: %s", group_id, member_id, name,
                     index, why)
            out[(tid, index)] = (E.INVALID_REQUEST, why)
        else:
            valid[(name, index)] = (tid, [(b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in batches])
    if valid:
        results = await _share(ctx).partitions.acknowledge(group_id, member_id, valid)
        for (name, index), res in results.items():
            out[(valid[(name, index)][0], index)] = res
    if log.isEnabledFor(logging.DEBUG):
        log.debug("share group %s member %s acknowledges %s -> %s", group_id, member_id,
                  {f"{n}-{i}": [(b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in bs]
                   for _, n, i, bs in requested}, {f"{t}-{i}": r for (t, i), r in out.items()})
    return out


async def _end_session(ctx: RequestContext, group_id: str, member_id: str) -> None:
    """The member's last request: its session ends and its acquired records are released."""
    share = _share(ctx)
    session = share.sessions.remove((group_id, member_id))
    if session is not None:
        await share.partitions.release(group_id, member_id, list(session.partitions))
    if not share.sessions.group_has_sessions(group_id):
        share.partitions.drop_group(group_id)


def _leader(ctx: RequestContext, name: str | None, index: int) -> tuple[int, int]:
    md = ctx.metadata
    if name is None:
        return -1, -1
    return md.leader(name, index), md.leader_epoch(name, index)


def _endpoints(ctx: RequestContext, leaders: set[int], cls: Any, v: int) -> list[Any]:
    return [cls(version=v, node_id=node, host=host, port=port, rack=rack)
            for node, host, port, rack in ctx.broker_addresses() if node in leaders]


@api(78, 1, 1)
async def handle_share_fetch(ctx: RequestContext, request) -> ShareFetchResponse:
    v = ctx.api_version
    R = ShareFetchResponse
    T = R.ShareFetchableTopicResponse
    P = T.PartitionData
    share = _share(ctx)
    group_id, member_id, epoch = request.group_id, request.member_id, request.share_session_epoch

    def top(code: int, message: str | None = None) -> ShareFetchResponse:
        return R(version=v, throttle_time_ms=0, error_code=code, error_message=message, acquisition_lock_timeout_ms=0,
                 responses=[], node_endpoints=[])

    if not share_groups_enabled(ctx.config, ctx.metadata):
        return top(E.UNSUPPORTED_VERSION, "Share groups are not enabled (share.version 0).")
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, group_id or ""):
        return top(E.GROUP_AUTHORIZATION_FAILED)
    if not group_id or not member_id:
        return top(E.INVALID_REQUEST, "GroupId and MemberId must be set.")
    md = ctx.metadata
    add: dict[tuple[str, int], object] = {}
    unknown: list[tuple[uuid.UUID, int]] = []
    acks: list[tuple[uuid.UUID, str | None, int, Any]] = []
    for t in request.topics:
        info = md.get_topic_by_id(t.topic_id)
        for p in t.partitions:
            if info is None:
                unknown.append((t.topic_id, p.partition_index))
            else:
                add[(info.name, p.partition_index)] = t.topic_id
            if p.acknowledgement_batches:
                acks.append((t.topic_id, info.name if info else None, p.partition_index, p.acknowledgement_batches))
    forget = []
    for f in request.forgotten_topics_data or ():
        info = md.get_topic_by_id(f.topic_id)
        if info is not None:
            forget.extend((info.name, p) for p in f.partitions)
    try:
        session = share.sessions.fetch_context(group_id, member_id, epoch, add, forget, bool(acks),
                                                      ctx.connection_id)
    except SessionError as e:
        log.info("share group %s member %s: ShareFetch epoch %d refused (%s: %s)", group_id, member_id, epoch,
                 e.code.name, e.message)
        if e.code == E.SHARE_SESSION_LIMIT_REACHED:
            await asyncio.sleep(max(request.max_wait_ms, 0) / 1000)
        return top(e.code, e.message)
    full = epoch == 0
    ack_results = await _acknowledge(ctx, group_id, member_id, acks) if acks else {}
    fetched: dict[tuple[str, int], Any] = {}
    denied: set[tuple[str, int]] = set()
    if epoch != FINAL_EPOCH:
        names = {name for name, _ in session.partitions}
        allowed = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, names)
        items = []
        for (name, index), tid in session.partitions.items():
            if name in allowed:
                items.append((name, tid, index))
            else:
                denied.add((name, index))
        if items and request.max_records > 0:
            fetched = await share.partitions.fetch(
                group_id, member_id, items, max_records=request.max_records, batch_size=max(request.batch_size, 1),
                max_bytes=min(request.max_bytes if request.max_bytes > 0 else 2**31 - 1,
                              int(ctx.config.get("fetch.max.bytes") or 2**31 - 1)),
                min_bytes=request.min_bytes, max_wait_ms=request.max_wait_ms)
        elif items and full:
            fetched = {(name, index): None for name, _, index in items}
    # One entry per partition: (topic id, name, index) -> [fetch error, message, records, acquired, ack error, ack msg]
    rows: dict[tuple[Any, int], list[Any]] = {}
    names_by_id: dict[Any, str | None] = {}
    for (name, index), tid in session.partitions.items():
        names_by_id[tid] = name
        res = fetched.get((name, index))
        if (name, index) in denied:
            rows[(tid, index)] = [E.TOPIC_AUTHORIZATION_FAILED, None, b"", [], E.NONE, None]
        elif res is not None and (res.error or res.acquired):
            rows[(tid, index)] = [res.error, res.message, res.records, res.acquired, E.NONE, None]
        elif full and epoch != FINAL_EPOCH:
            rows[(tid, index)] = [E.NONE, None, b"", [], E.NONE, None]
    for tid, index in unknown:
        rows[(tid, index)] = [E.UNKNOWN_TOPIC_ID, None, b"", [], E.NONE, None]
    for (tid, index), (code, message) in ack_results.items():
        row = rows.setdefault((tid, index), [E.NONE, None, b"", [], E.NONE, None])
        row[4], row[5] = code, message
        names_by_id.setdefault(tid, md.get_topic_by_id(tid).name if md.get_topic_by_id(tid) else None)
    if epoch == FINAL_EPOCH:
        await _end_session(ctx, group_id, member_id)
    _count_requests(share, rows, names_by_id, ack_results)
    leaders: set[int] = set()
    by_topic: dict[Any, list[Any]] = {}
    for (tid, index), (code, message, records, acquired, ack_code, ack_message) in rows.items():
        leader = (-1, -1)
        if code in _LEADER_MOVED or ack_code in _LEADER_MOVED:
            leader = _leader(ctx, names_by_id.get(tid), index)
            if leader[0] >= 0:
                leaders.add(leader[0])
        by_topic.setdefault(tid, []).append(P(
            version=v, partition_index=index, error_code=code, error_message=message, acknowledge_error_code=ack_code,
            acknowledge_error_message=ack_message,
            current_leader=P.LeaderIdAndEpoch(version=v, leader_id=leader[0], leader_epoch=leader[1]),
            records=records, acquired_records=[
                P.AcquiredRecords(version=v, first_offset=a.first_offset, last_offset=a.last_offset,
                                  delivery_count=a.delivery_count) for a in acquired]))
    return R(version=v, throttle_time_ms=0, error_code=E.NONE, error_message=None,
             acquisition_lock_timeout_ms=share.partitions.lock_duration_ms(group_id),
             responses=[T(version=v, topic_id=tid, partitions=parts) for tid, parts in by_topic.items()],
             node_endpoints=_endpoints(ctx, leaders, R.NodeEndpoint, v))


def _count_requests(share: ShareServices, rows: dict[tuple[Any, int], list[Any]], names_by_id: dict[Any, str | None],
                    ack_results: dict[tuple[Any, int], tuple[int, str | None]]) -> None:
    """Kafka's Total/Failed ShareFetch and ShareAcknowledgement request meters (per topic)."""
    fetch: dict[str, bool] = {}
    acks: dict[str, bool] = {}
    for (tid, index), row in rows.items():
        if (name := names_by_id.get(tid)) is None:
            continue
        fetch[name] = fetch.get(name, False) or row[0] != E.NONE
        if (tid, index) in ack_results:
            acks[name] = acks.get(name, False) or row[4] != E.NONE
    stats = share.partitions.stats
    stats.count(stats.fetch_requests, fetch)
    stats.count(stats.ack_requests, acks)


@api(79, 1, 1)
async def handle_share_acknowledge(ctx: RequestContext, request) -> ShareAcknowledgeResponse:
    v = ctx.api_version
    R = ShareAcknowledgeResponse
    T = R.ShareAcknowledgeTopicResponse
    P = T.PartitionData
    share = _share(ctx)
    group_id, member_id, epoch = request.group_id, request.member_id, request.share_session_epoch

    def top(code: int, message: str | None = None) -> ShareAcknowledgeResponse:
        return R(version=v, throttle_time_ms=0, error_code=code, error_message=message, responses=[],
                 node_endpoints=[])

    if not share_groups_enabled(ctx.config, ctx.metadata):
        return top(E.UNSUPPORTED_VERSION, "Share groups are not enabled (share.version 0).")
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, group_id or ""):
        return top(E.GROUP_AUTHORIZATION_FAILED)
    if not group_id or not member_id:
        return top(E.INVALID_REQUEST, "GroupId and MemberId must be set.")
    try:
        share.sessions.acknowledge_context(group_id, member_id, epoch)
    except SessionError as e:
        log.info("share group %s member %s: ShareAcknowledge epoch %d refused (%s: %s)", group_id, member_id, epoch,
                 e.code.name, e.message)
        return top(e.code, e.message)
    md = ctx.metadata
    requested = []
    names_by_id: dict[Any, str | None] = {}
    for t in request.topics:
        info = md.get_topic_by_id(t.topic_id)
        names_by_id[t.topic_id] = info.name if info else None
        for p in t.partitions:
            requested.append((t.topic_id, names_by_id[t.topic_id], p.partition_index, p.acknowledgement_batches or []))
    results = await _acknowledge(ctx, group_id, member_id, requested)
    if epoch == FINAL_EPOCH:
        await _end_session(ctx, group_id, member_id)
    failed: dict[str, bool] = {}
    for (tid, _index), (code, _message) in results.items():
        if (name := names_by_id.get(tid)) is not None:
            failed[name] = failed.get(name, False) or code != E.NONE
    share.partitions.stats.count(share.partitions.stats.ack_requests, failed)
    leaders: set[int] = set()
    by_topic: dict[Any, list[Any]] = {}
    for (tid, index), (code, message) in results.items():
        leader = (-1, -1)
        if code in _LEADER_MOVED:
            leader = _leader(ctx, names_by_id.get(tid), index)
            if leader[0] >= 0:
                leaders.add(leader[0])
        by_topic.setdefault(tid, []).append(P(
            version=v, partition_index=index, error_code=code, error_message=message,
            current_leader=P.LeaderIdAndEpoch(version=v, leader_id=leader[0], leader_epoch=leader[1])))
    return R(version=v, throttle_time_ms=0, error_code=E.NONE, error_message=None,
             responses=[T(version=v, topic_id=tid, partitions=parts) for tid, parts in by_topic.items()],
             node_endpoints=_endpoints(ctx, leaders, R.NodeEndpoint, v))
