"""Group APIs, served by the broker's GroupCoordinator.

- JoinGroup (11) v0-9, SyncGroup (14) v0-5, Heartbeat (12) v0-4, LeaveGroup (13) v0-5: the
  classic rebalance protocol (JoinGroup/SyncGroup park until the rebalance completes).
- OffsetCommit (8) v2-9, OffsetFetch (9) v1-9 (v8+ several groups, v7+ require_stable),
  OffsetDelete (47) v0.
- ListGroups (16) v0-5, DescribeGroups (15) v0-6, DeleteGroups (42) v0-2.
- ConsumerGroupHeartbeat (68) v0-1, ConsumerGroupDescribe (69) v0-1: the KIP-848 consumer
  protocol (wire structs in protocol/consumer_group_api.py).

Partitions of topics that do not exist get UNKNOWN_TOPIC_OR_PARTITION on commit, as in Kafka's
request handling; everything else is decided by the coordinator. DescribeGroups (v3+) and
ConsumerGroupDescribe answer a group's authorized operations when asked and the group was
described without error (KafkaApis), from broker/authorized_operations.py. A DescribeGroups answer
of OFFLOAD_ENTRIES groups and members or more is built and encoded on an executor thread, and a
group listed several times in one request is described once (Kafka still gets one entry per id).

ACLs (as KafkaApis): JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ConsumerGroupHeartbeat and
OffsetCommit need READ on the group (GROUP_AUTHORIZATION_FAILED); OffsetFetch DESCRIBE on the group;
OffsetDelete and DeleteGroups DELETE; DescribeGroups / ConsumerGroupDescribe DESCRIBE per group.
OffsetCommit and OffsetDelete need READ on each topic, OffsetFetch DESCRIBE (a fetch of all offsets
leaves the others out), ConsumerGroupHeartbeat DESCRIBE on each subscribed topic name
(TOPIC_AUTHORIZATION_FAILED). ListGroups lists every group with DESCRIBE on the cluster, otherwise
the groups the principal may DESCRIBE.
"""

from __future__ import annotations

from kafka.protocol.admin import DeleteGroupsResponse, DescribeGroupsResponse, ListGroupsResponse
from kafka.protocol.consumer import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)

from broker.authorized_operations import (
    OMITTED,
    AclOperation,
    ResourceType,
    as_bitfield,
    authorized_operations,
)
from broker.handlers import OFFLOAD_ENTRIES, RawResponse, RequestContext, api, encode_off_loop
from protocol.consumer_group_api import ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatResponse
from protocol.errors import ErrorCode

E = ErrorCode


def _group_ops(ctx: RequestContext, asked: bool, error: int, group_id: str) -> int:
    # KafkaApis sets the field only for groups described without error, and only when asked.
    if asked and error == E.NONE:
        return authorized_operations(ctx, ResourceType.GROUP, group_id)
    return OMITTED


def _group_ok(ctx: RequestContext, op: AclOperation, group_id: str) -> bool:
    return ctx.authorize(op, ResourceType.GROUP, group_id)


def _gc(ctx: RequestContext):
    return ctx.services.group_coordinator


def _client_host(ctx: RequestContext) -> str:
    return "/" + ctx.client_host  # Kafka shows the InetAddress form


# --- classic rebalance protocol -----------------------------------------------------------------


@api(11, 0, 9)
async def handle_join_group(ctx: RequestContext, request) -> JoinGroupResponse:
    v = ctx.api_version
    gc = _gc(ctx)

    def response(error: int, **kw) -> JoinGroupResponse:
        fields = dict(throttle_time_ms=0, error_code=error, generation_id=-1, protocol_type=None,
                      protocol_name=None if v >= 7 else "", leader="", skip_assignment=False,
                      member_id=request.member_id, members=[])
        fields.update(kw)
        if fields["protocol_name"] is None and v < 7:
            fields["protocol_name"] = ""
        return JoinGroupResponse(version=v, **fields)

    if gc is None:
        return response(E.COORDINATOR_NOT_AVAILABLE)
    if not _group_ok(ctx, AclOperation.READ, request.group_id):
        return response(E.GROUP_AUTHORIZATION_FAILED)
    result = await gc.join_group(
        request.group_id, request.member_id, request.group_instance_id if v >= 5 else None,
        request.protocol_type, [(p.name, bytes(p.metadata)) for p in request.protocols],
        request.session_timeout_ms, request.rebalance_timeout_ms if v >= 1 else -1,
        ctx.client_id or "", _client_host(ctx), require_known_member_id=v >= 4,
        supports_skip_assignment=v >= 9, reason=request.reason if v >= 8 else None)
    if result.error not in (E.NONE,):
        return response(result.error, member_id=result.member_id if result.error == E.MEMBER_ID_REQUIRED
                        else request.member_id)
    Member = JoinGroupResponse.JoinGroupResponseMember
    members = [Member(version=v, member_id=mid, group_instance_id=iid, metadata=meta)
               for mid, iid, meta in result.members]
    return response(E.NONE, generation_id=result.generation_id, protocol_type=result.protocol_type,
                    protocol_name=result.protocol_name, leader=result.leader_id,
                    skip_assignment=result.skip_assignment, member_id=result.member_id, members=members)


@api(14, 0, 5)
async def handle_sync_group(ctx: RequestContext, request) -> SyncGroupResponse:
    v = ctx.api_version
    gc = _gc(ctx)
    if gc is None or not _group_ok(ctx, AclOperation.READ, request.group_id):
        return SyncGroupResponse(version=v, throttle_time_ms=0, protocol_type=None, protocol_name=None, assignment=b"",
                                 error_code=E.COORDINATOR_NOT_AVAILABLE if gc is None else E.GROUP_AUTHORIZATION_FAILED)
    result = await gc.sync_group(
        request.group_id, request.generation_id, request.member_id, request.group_instance_id if v >= 3 else None,
        request.protocol_type if v >= 5 else None, request.protocol_name if v >= 5 else None,
        {a.member_id: bytes(a.assignment) for a in request.assignments or []})
    ok = result.error == E.NONE
    return SyncGroupResponse(version=v, throttle_time_ms=0, error_code=result.error,
                             protocol_type=result.protocol_type if ok else None,
                             protocol_name=result.protocol_name if ok else None, assignment=result.assignment)


@api(12, 0, 4)
async def handle_heartbeat(ctx: RequestContext, request) -> HeartbeatResponse:
    v = ctx.api_version
    gc = _gc(ctx)
    code = E.COORDINATOR_NOT_AVAILABLE if gc is None else E.GROUP_AUTHORIZATION_FAILED \
        if not _group_ok(ctx, AclOperation.READ, request.group_id) else gc.heartbeat(
        request.group_id, request.generation_id, request.member_id, request.group_instance_id if v >= 3 else None)
    return HeartbeatResponse(version=v, throttle_time_ms=0, error_code=code)


@api(13, 0, 5)
async def handle_leave_group(ctx: RequestContext, request) -> LeaveGroupResponse:
    v = ctx.api_version
    gc = _gc(ctx)
    if v >= 3:
        members = [(m.member_id, m.group_instance_id) for m in request.members or []]
        reason = next((m.reason for m in request.members or [] if v >= 5 and m.reason), None)
    else:
        members = [(request.member_id, None)]
        reason = None
    if gc is None:
        top, codes = E.COORDINATOR_NOT_AVAILABLE, []
    elif not _group_ok(ctx, AclOperation.READ, request.group_id):
        top, codes = E.GROUP_AUTHORIZATION_FAILED, []
    else:
        top, codes = gc.leave_group(request.group_id, members, reason)
    if v < 3:
        return LeaveGroupResponse(version=v, throttle_time_ms=0, error_code=top or (codes[0] if codes else 0))
    R = LeaveGroupResponse.MemberResponse
    return LeaveGroupResponse(version=v, throttle_time_ms=0, error_code=top, members=[
        R(version=v, member_id=mid, group_instance_id=iid, error_code=code)
        for (mid, iid), code in zip(members, codes, strict=False)])


# --- offsets --------------------------------------------------------------------------------------


def _partition_exists(ctx: RequestContext, topic: str, partition: int) -> bool:
    info = ctx.metadata.get_topic(topic)
    return info is not None and 0 <= partition < info.num_partitions


@api(8, 2, 9)
async def handle_offset_commit(ctx: RequestContext, request) -> OffsetCommitResponse:
    v = ctx.api_version
    gc = _gc(ctx)
    wanted = [(t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch if v >= 6 else -1,
               p.committed_metadata) for t in request.topics for p in t.partitions]
    errors: dict[tuple[str, int], int] = {}
    offsets = {}
    group_ok = _group_ok(ctx, AclOperation.READ, request.group_id)
    readable = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, (w[0] for w in wanted)) if group_ok else set()
    for topic, part, offset, epoch, metadata in wanted:
        if gc is None:
            errors[(topic, part)] = E.COORDINATOR_NOT_AVAILABLE
        elif not group_ok:
            errors[(topic, part)] = E.GROUP_AUTHORIZATION_FAILED
        elif topic not in readable:
            errors[(topic, part)] = E.TOPIC_AUTHORIZATION_FAILED
        elif not _partition_exists(ctx, topic, part):
            errors[(topic, part)] = E.UNKNOWN_TOPIC_OR_PARTITION
        else:
            offsets[(topic, part)] = (offset, epoch, metadata)
    if offsets and gc is not None:
        retention = request.retention_time_ms if 2 <= v <= 4 else -1
        errors.update(await gc.commit_offsets(request.group_id, request.generation_id_or_member_epoch,
                                              request.member_id, request.group_instance_id if v >= 7 else None,
                                              offsets, retention))
    T = OffsetCommitResponse.OffsetCommitResponseTopic
    P = T.OffsetCommitResponsePartition
    by_topic: dict[str, list] = {}
    for topic, part, *_ in wanted:
        by_topic.setdefault(topic, []).append(P(version=v, partition_index=part, error_code=errors[(topic, part)]))
    return OffsetCommitResponse(version=v, throttle_time_ms=0, topics=[
        T(version=v, name=name, partitions=parts) for name, parts in by_topic.items()])


def _fetch_group(gc, group_id: str, topics, require_stable: bool, member_id: str | None = None,
                 member_epoch: int = -1, ctx: RequestContext | None = None
                 ) -> tuple[int, dict[str, list[tuple[int, int, int, str, int]]]]:
    """(group error, topic -> [(partition, offset, leader epoch, metadata, error)])."""
    if topics is None:
        partitions = None
    else:
        partitions = [(t.name, p) for t in topics for p in t.partition_indexes]
    if gc is None:
        return E.COORDINATOR_NOT_AVAILABLE, {}
    if ctx is not None and not _group_ok(ctx, AclOperation.DESCRIBE, group_id):
        err = E.GROUP_AUTHORIZATION_FAILED
        rows = [(tp, -1, -1, "", err) for tp in partitions] if partitions is not None else []
        return err, _by_topic(rows)
    hidden: set[str] = set()
    if ctx is not None and partitions is not None:
        names = {tp[0] for tp in partitions}
        hidden = names - ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        partitions = [tp for tp in partitions if tp[0] not in hidden]
    err, rows = gc.fetch_offsets(group_id, partitions, require_stable=require_stable, member_id=member_id,
                                 member_epoch=member_epoch)
    if ctx is not None and topics is None:  # all offsets: leave out the topics that may not be described
        shown = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, {tp[0] for tp, *_ in rows})
        rows = [r for r in rows if r[0][0] in shown]
    if hidden and not err:
        rows = [*rows, *(((t.name, p), -1, -1, "", E.TOPIC_AUTHORIZATION_FAILED)
                         for t in topics if t.name in hidden for p in t.partition_indexes)]
    if err and partitions is not None:
        # Older versions carry no group-level error: report it on every partition.
        rows = [(tp, -1, -1, "", err) for tp in partitions]
    return err, _by_topic(rows)


def _by_topic(rows) -> dict[str, list[tuple[int, int, int, str, int]]]:
    by_topic: dict[str, list[tuple[int, int, int, str, int]]] = {}
    for (topic, part), offset, epoch, metadata, code in rows:
        by_topic.setdefault(topic, []).append((part, offset, epoch, metadata, code))
    return by_topic


@api(9, 1, 9)
async def handle_offset_fetch(ctx: RequestContext, request) -> OffsetFetchResponse:
    v = ctx.api_version
    gc = _gc(ctx)
    require_stable = bool(request.require_stable) if v >= 7 else False
    if v >= 8:
        G = OffsetFetchResponse.OffsetFetchResponseGroup
        T = G.OffsetFetchResponseTopics
        P = T.OffsetFetchResponsePartitions
        groups = []
        for g in request.groups:
            err, by_topic = _fetch_group(gc, g.group_id, g.topics, require_stable,
                                         g.member_id if v >= 9 else None, g.member_epoch if v >= 9 else -1, ctx)
            topics = [T(version=v, name=name, partitions=[
                P(version=v, partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=m, error_code=c)
                for p, o, e, m, c in rows]) for name, rows in by_topic.items()] if not err else []
            groups.append(G(version=v, group_id=g.group_id, topics=topics, error_code=err))
        return OffsetFetchResponse(version=v, throttle_time_ms=0, groups=groups)
    T = OffsetFetchResponse.OffsetFetchResponseTopic
    P = T.OffsetFetchResponsePartition
    topics_req = request.topics if v >= 2 else (request.topics or [])
    err, by_topic = _fetch_group(gc, request.group_id, topics_req, require_stable, ctx=ctx)
    topics = [T(version=v, name=name, partitions=[
        P(version=v, partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=m, error_code=c)
        for p, o, e, m, c in rows]) for name, rows in by_topic.items()]
    if v < 2 and err:
        topics = [T(version=v, name=t.name, partitions=[
            P(version=v, partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="",
              error_code=err) for p in t.partition_indexes]) for t in topics_req]
    return OffsetFetchResponse(version=v, throttle_time_ms=0, topics=topics, error_code=err)


@api(47, 0, 0)
async def handle_offset_delete(ctx: RequestContext, request) -> OffsetDeleteResponse:
    v = ctx.api_version
    gc = _gc(ctx)
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    if gc is None:
        err, results = E.COORDINATOR_NOT_AVAILABLE, {}
    elif not _group_ok(ctx, AclOperation.DELETE, request.group_id):
        err, results = E.GROUP_AUTHORIZATION_FAILED, {}
    else:
        readable = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, (tp[0] for tp in wanted))
        existing = [tp for tp in wanted if tp[0] in readable and _partition_exists(ctx, *tp)]
        err, results = await gc.delete_offsets(request.group_id, existing)
        for tp in wanted:
            if tp[0] not in readable:
                results.setdefault(tp, E.TOPIC_AUTHORIZATION_FAILED)
        for tp in wanted:
            results.setdefault(tp, E.UNKNOWN_TOPIC_OR_PARTITION)
    T = OffsetDeleteResponse.OffsetDeleteResponseTopic
    P = T.OffsetDeleteResponsePartition
    by_topic: dict[str, list] = {}
    if not err:
        for topic, part in wanted:
            by_topic.setdefault(topic, []).append(P(version=v, partition_index=part, error_code=results[(topic, part)]))
    return OffsetDeleteResponse(version=v, error_code=err, throttle_time_ms=0, topics=[
        T(version=v, name=name, partitions=parts) for name, parts in by_topic.items()])


# --- admin ----------------------------------------------------------------------------------------


@api(16, 0, 5)
async def handle_list_groups(ctx: RequestContext, request) -> ListGroupsResponse:
    v = ctx.api_version
    gc = _gc(ctx)
    if gc is None:
        return ListGroupsResponse(version=v, throttle_time_ms=0, error_code=E.COORDINATOR_NOT_AVAILABLE, groups=[])
    err, listings = gc.list_groups(request.states_filter if v >= 4 else None,
                                   request.types_filter if v >= 5 else None)
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        shown = ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, (g.group_id for g in listings))
        listings = [g for g in listings if g.group_id in shown]
    L = ListGroupsResponse.ListedGroup
    return ListGroupsResponse(version=v, throttle_time_ms=0, error_code=err, groups=[
        L(version=v, group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state, group_type=g.group_type)
        for g in listings])


@api(15, 0, 6)
async def handle_describe_groups(ctx: RequestContext, request) -> DescribeGroupsResponse | RawResponse:
    v = ctx.api_version
    gc = _gc(ctx)
    G = DescribeGroupsResponse.DescribedGroup
    M = G.DescribedGroupMember
    asked = v >= 3 and request.include_authorized_operations
    # Kafka answers one entry per requested id, repeats included; a repeated id is described (and
    # authorized) once, so that a request listing one large group many times costs one description.
    described: dict[str, tuple] = {}
    entries = []
    size = 0
    for group_id in request.groups:
        entry = described.get(group_id)
        if entry is None:
            if gc is None or not _group_ok(ctx, AclOperation.DESCRIBE, group_id):
                d_err = E.COORDINATOR_NOT_AVAILABLE if gc is None else E.GROUP_AUTHORIZATION_FAILED
                state, ptype, proto, members = "", "", "", []
                message = None
            else:
                d = gc.describe_group(group_id)
                d_err, state, ptype, proto, members = d.error, d.state, d.protocol_type, d.protocol, d.members
                message = None
                if d_err == E.GROUP_ID_NOT_FOUND:
                    if v >= 6:
                        message = f"Group {group_id} not found."
                    else:
                        d_err = E.NONE  # older versions describe an unknown group as Dead
            ops = as_bitfield(_group_ops(ctx, asked, d_err, group_id))
            entry = described[group_id] = (group_id, d_err, message, state, ptype, proto, members, ops)
        entries.append(entry)
        size += 1 + len(entry[6])

    def build() -> DescribeGroupsResponse:
        # Reads only `entries`: immutable descriptions taken above (safe on an executor thread).
        # Repeats of an id share one built entry; the encoder writes it once per repeat.
        built: dict[str, DescribeGroupsResponse.DescribedGroup] = {}
        for group_id, d_err, message, state, ptype, proto, members, ops in entries:
            if group_id not in built:
                built[group_id] = G(
                    version=v, error_code=d_err, error_message=message, group_id=group_id, group_state=state,
                    protocol_type=ptype, protocol_data=proto, members=[
                        M(version=v, member_id=m.member_id, group_instance_id=m.group_instance_id,
                          client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                          member_assignment=m.assignment) for m in members],
                    authorized_operations=ops)
        return DescribeGroupsResponse(version=v, throttle_time_ms=0, groups=[built[e[0]] for e in entries])

    if size < OFFLOAD_ENTRIES:
        return build()
    return await encode_off_loop(build, v)


@api(42, 0, 2)
async def handle_delete_groups(ctx: RequestContext, request) -> DeleteGroupsResponse:
    v = ctx.api_version
    gc = _gc(ctx)
    names = list(request.groups_names)
    deletable = ctx.authorized(AclOperation.DELETE, ResourceType.GROUP, names)
    results = dict.fromkeys(names, E.GROUP_AUTHORIZATION_FAILED)
    results.update(dict.fromkeys(deletable, E.COORDINATOR_NOT_AVAILABLE) if gc is None else
                   await gc.delete_groups([n for n in names if n in deletable]) if deletable else {})
    R = DeleteGroupsResponse.DeletableGroupResult
    return DeleteGroupsResponse(version=v, throttle_time_ms=0, results=[
        R(version=v, group_id=n, error_code=results[n]) for n in names])


# --- KIP-848 consumer protocol ------------------------------------------------------------------------


class _TopicView:
    """The coordinator's window on topic metadata (coordinator code never imports the broker)."""

    def __init__(self, ctx: RequestContext) -> None:
        self.md = ctx.metadata

    def get(self, name: str):
        info = self.md.get_topic(name)
        return None if info is None else (info.topic_id, info.num_partitions)

    def name_of(self, topic_id):
        info = self.md.get_topic_by_id(topic_id)
        return None if info is None else info.name

    def names(self) -> list[str]:
        return list(self.md.topics())


@api(68, 0, 1)
async def handle_consumer_group_heartbeat(ctx: RequestContext, request) -> ConsumerGroupHeartbeatResponse:
    v = ctx.api_version
    gc = _gc(ctx)
    R = ConsumerGroupHeartbeatResponse
    if gc is None:
        return R(version=v, throttle_time_ms=0, error_code=E.COORDINATOR_NOT_AVAILABLE, error_message=None,
                 member_id=None, member_epoch=-1, heartbeat_interval_ms=0, assignment=None)
    denied = E.GROUP_AUTHORIZATION_FAILED if not _group_ok(ctx, AclOperation.READ, request.group_id) else \
        E.TOPIC_AUTHORIZATION_FAILED if request.subscribed_topic_names and len(ctx.authorized(
            AclOperation.DESCRIBE, ResourceType.TOPIC, request.subscribed_topic_names)) < \
        len(set(request.subscribed_topic_names)) else E.NONE
    if denied:
        return R(version=v, throttle_time_ms=0, error_code=denied, error_message=None,
                 member_id=None, member_epoch=-1, heartbeat_interval_ms=0, assignment=None)
    owned = None if request.topic_partitions is None else [
        (tp.topic_id, list(tp.partitions)) for tp in request.topic_partitions]
    result = await gc.consumer_group_heartbeat(
        _TopicView(ctx), request.group_id, request.member_id, request.member_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id, rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=request.subscribed_topic_names,
        subscribed_topic_regex=request.subscribed_topic_regex if v >= 1 else None,
        server_assignor=request.server_assignor, owned=owned, client_id=ctx.client_id or "",
        client_host=_client_host(ctx), api_version=v)
    assignment = None
    if result.assignment is not None:
        TP = R.Assignment.TopicPartitions
        assignment = R.Assignment(version=v, topic_partitions=[
            TP(version=v, topic_id=tid, partitions=sorted(ps)) for tid, ps in result.assignment.items() if ps])
    return R(version=v, throttle_time_ms=0, error_code=result.error, error_message=result.message,
             member_id=result.member_id, member_epoch=result.member_epoch,
             heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment)


@api(69, 0, 1)
async def handle_consumer_group_describe(ctx: RequestContext, request) -> ConsumerGroupDescribeResponse:
    v = ctx.api_version
    gc = _gc(ctx)
    R = ConsumerGroupDescribeResponse
    G = R.DescribedGroup
    M = G.Member
    A = M.Assignment
    TP = A.TopicPartitions
    topics = _TopicView(ctx)

    def assignment(a) -> object:
        parts = []
        for tid, ps in sorted(a.items(), key=lambda kv: str(kv[0])):
            name = topics.name_of(tid)
            if name is not None and ps:
                parts.append(TP(version=v, topic_id=tid, topic_name=name, partitions=sorted(ps)))
        return A(version=v, topic_partitions=parts)

    out = []
    for group_id in request.group_ids:
        if gc is None:
            err, msg, group = E.COORDINATOR_NOT_AVAILABLE, None, None
        elif not _group_ok(ctx, AclOperation.DESCRIBE, group_id):
            err, msg, group = E.GROUP_AUTHORIZATION_FAILED, None, None
        else:
            err, msg, group = gc.consumer_group_describe(group_id)
        if group is None:
            out.append(G(version=v, error_code=err, error_message=msg, group_id=group_id, group_state="",
                         group_epoch=-1, assignment_epoch=-1, assignor_name="", members=[],
                         authorized_operations=OMITTED))
            continue
        members = [M(version=v, member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                     member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                     subscribed_topic_names=sorted(m.subscribed_topic_names),
                     subscribed_topic_regex=m.subscribed_topic_regex, assignment=assignment(m.assigned),
                     target_assignment=assignment(group.target.get(m.member_id, {})), member_type=1)
                   for m in group.members.values()]
        out.append(G(version=v, error_code=E.NONE, error_message=None, group_id=group_id,
                     group_state=group.state_name, group_epoch=group.group_epoch,
                     assignment_epoch=group.assignment_epoch, assignor_name=group.assignor_name, members=members,
                     authorized_operations=_group_ops(ctx, request.include_authorized_operations, E.NONE,
                                                      group_id)))
    return R(version=v, throttle_time_ms=0, groups=out)
