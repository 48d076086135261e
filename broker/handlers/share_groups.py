"""Share-group APIs served by the group coordinator (KIP-932; coordinator/share_protocol.py):

- ShareGroupHeartbeat (76) v1: membership and assignment of share consumers;
- ShareGroupDescribe (77) v1: members, their assignments, epochs, the ``simple`` assignor;
- DescribeShareGroupOffsets (90) v0: each share-partition's start offset (the share coordinator's
  ReadShareGroupStateSummary; -1 when it has none), for the named topics or (Topics null) every
  initialized share-partition of the group;
- AlterShareGroupOffsets (91) v0: set start offsets of an empty group (reset-offsets);
- DeleteShareGroupOffsets (92) v0: forget the state of topics for an empty group.

Version 0 of the first two (Kafka 4.0 early access) is not served, as in Kafka 4.1+. With share
groups disabled (``share.version`` 0 and ``group.share.enable`` false) every one answers
UNSUPPORTED_VERSION.

ACLs (as KafkaApis): ShareGroupHeartbeat READ on the group (GROUP_AUTHORIZATION_FAILED) and
DESCRIBE on each subscribed topic (TOPIC_AUTHORIZATION_FAILED); ShareGroupDescribe DESCRIBE per
group, and a group whose assignment names a topic the client may not DESCRIBE answers
TOPIC_AUTHORIZATION_FAILED; DescribeShareGroupOffsets DESCRIBE on the group, DESCRIBE per topic
(denied topics answer TOPIC_AUTHORIZATION_FAILED per partition, and are left out of an "all
topics" answer); AlterShareGroupOffsets READ on the group and READ per topic;
DeleteShareGroupOffsets DELETE on the group and READ per topic.
"""

from __future__ import annotations

import uuid
from typing import Any

from broker.authorized_operations import OMITTED, AclOperation, ResourceType, authorized_operations
from broker.features import share_groups_enabled
from broker.handlers import RequestContext, api
from coordinator.share_group import ASSIGNOR_NAME
from protocol.errors import ErrorCode
from protocol.share_group_api import (
    AlterShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponse,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatResponse,
)

E = ErrorCode


class TopicView:
    """The coordinator's window on topic metadata (coordinator code never imports the broker)."""

    def __init__(self, ctx: RequestContext) -> None:
        self.md = ctx.metadata

    def get(self, name: str) -> tuple[uuid.UUID, int] | None:
        info = self.md.get_topic(name)
        return None if info is None else (info.topic_id, info.num_partitions)

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        info = self.md.get_topic_by_id(topic_id)
        return None if info is None else info.name

    def names(self) -> list[str]:
        return list(self.md.topics())


def _gc(ctx: RequestContext) -> Any:
    return ctx.services.group_coordinator


def _client_host(ctx: RequestContext) -> str:
    return "/" + ctx.client_host


@api(76, 1, 1)
async def handle_share_group_heartbeat(ctx: RequestContext, request) -> ShareGroupHeartbeatResponse:
    v = ctx.api_version
    R = ShareGroupHeartbeatResponse

    def fail(code: int, message: str | None = None) -> ShareGroupHeartbeatResponse:
        return R(version=v, throttle_time_ms=0, error_code=code, error_message=message, member_id=None,
                 member_epoch=-1, heartbeat_interval_ms=0, assignment=None)

    gc = _gc(ctx)
    if not share_groups_enabled(ctx.config, ctx.metadata):
        return fail(E.UNSUPPORTED_VERSION, "Share groups are not enabled (share.version 0).")
    if gc is None:
        return fail(E.COORDINATOR_NOT_AVAILABLE)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return fail(E.GROUP_AUTHORIZATION_FAILED)
    names = request.subscribed_topic_names
    if names and len(ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, names)) < len(set(names)):
        return fail(E.TOPIC_AUTHORIZATION_FAILED)
    result = await gc.share_group_heartbeat(
        TopicView(ctx), request.group_id, request.member_id, request.member_epoch, rack_id=request.rack_id,
        subscribed_topic_names=None if names is None else list(names), client_id=ctx.client_id or "",
        client_host=_client_host(ctx))
    assignment = None
    if result.assignment is not None:
        TP = R.Assignment.TopicPartitions
        assignment = R.Assignment(version=v, topic_partitions=[
            TP(version=v, topic_id=tid, partitions=sorted(ps))
            for tid, ps in sorted(result.assignment.items(), key=lambda kv: str(kv[0])) if ps])
    return R(version=v, throttle_time_ms=0, error_code=result.error, error_message=result.message,
             member_id=result.member_id, member_epoch=result.member_epoch,
             heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment)


@api(77, 1, 1)
async def handle_share_group_describe(ctx: RequestContext, request) -> ShareGroupDescribeResponse:
    v = ctx.api_version
    R = ShareGroupDescribeResponse
    G = R.DescribedGroup
    M = G.Member
    A = M.Assignment
    TP = A.TopicPartitions
    gc = _gc(ctx)
    topics = TopicView(ctx)
    enabled = share_groups_enabled(ctx.config, ctx.metadata)

    def failed(group_id: str, code: int, message: str | None = None) -> Any:
        return G(version=v, error_code=code, error_message=message, group_id=group_id, group_state="",
                 group_epoch=-1, assignment_epoch=-1, assignor_name="", members=[], authorized_operations=OMITTED)

    out = []
    for group_id in request.group_ids:
        if not enabled:
            out.append(failed(group_id, E.UNSUPPORTED_VERSION))
            continue
        if gc is None:
            out.append(failed(group_id, E.COORDINATOR_NOT_AVAILABLE))
            continue
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            out.append(failed(group_id, E.GROUP_AUTHORIZATION_FAILED))
            continue
        err, msg, group = gc.share_group_describe(group_id)
        if group is None:
            out.append(failed(group_id, err, msg))
            continue
        named: set[str] = set()
        members = []
        for m in group.members.values():
            parts = []
            for tid, ps in sorted(m.assigned.items(), key=lambda kv: str(kv[0])):
                name = topics.name_of(tid)
                if name is not None and ps:
                    named.add(name)
                    parts.append(TP(version=v, topic_id=tid, topic_name=name, partitions=sorted(ps)))
            members.append(M(version=v, member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                             client_id=m.client_id, client_host=m.client_host,
                             subscribed_topic_names=sorted(m.subscribed_topic_names),
                             assignment=A(version=v, topic_partitions=parts)))
        if named and len(ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, named)) < len(named):
            out.append(failed(group_id, E.TOPIC_AUTHORIZATION_FAILED,
                              "The group has described topic(s) that the client is not authorized to describe."))
            continue
        ops = (authorized_operations(ctx, ResourceType.GROUP, group_id) if request.include_authorized_operations
               else OMITTED)
        out.append(G(version=v, error_code=E.NONE, error_message=None, group_id=group_id,
                     group_state=group.state_name, group_epoch=group.group_epoch,
                     assignment_epoch=group.assignment_epoch, assignor_name=ASSIGNOR_NAME, members=members,
                     authorized_operations=ops))
    return R(version=v, throttle_time_ms=0, groups=out)


@api(90, 0, 0)
async def handle_describe_share_group_offsets(ctx: RequestContext, request) -> DescribeShareGroupOffsetsResponse:
    v = ctx.api_version
    R = DescribeShareGroupOffsetsResponse
    G = R.DescribeShareGroupOffsetsResponseGroup
    T = G.DescribeShareGroupOffsetsResponseTopic
    P = T.DescribeShareGroupOffsetsResponsePartition
    gc = _gc(ctx)
    topics = TopicView(ctx)
    out = []
    for g in request.groups:
        code = (E.UNSUPPORTED_VERSION if not share_groups_enabled(ctx.config, ctx.metadata) else
                E.COORDINATOR_NOT_AVAILABLE if gc is None else
                E.GROUP_AUTHORIZATION_FAILED if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP,
                                                                  g.group_id) else E.NONE)
        if code:
            out.append(G(version=v, group_id=g.group_id, topics=[], error_code=code, error_message=None))
            continue
        denied_rows = []
        wanted: dict[str, list[int]] | None = None
        if g.topics is not None:
            allowed = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, (t.topic_name for t in g.topics))
            wanted = {}
            for t in g.topics:
                if t.topic_name in allowed:
                    wanted.setdefault(t.topic_name, []).extend(t.partitions)
                else:
                    info = topics.get(t.topic_name)
                    denied_rows.append(T(version=v, topic_name=t.topic_name,
                                         topic_id=info[0] if info else uuid.UUID(int=0), partitions=[
                        P(version=v, partition_index=p, start_offset=-1, leader_epoch=-1,
                          error_code=E.TOPIC_AUTHORIZATION_FAILED, error_message=None) for p in t.partitions]))
        err, msg, rows = await gc.describe_share_group_offsets(topics, g.group_id, wanted)
        if err:
            out.append(G(version=v, group_id=g.group_id, topics=[], error_code=err, error_message=msg))
            continue
        if wanted is None:
            allowed = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, (name for name, _, _ in rows))
            rows = [r for r in rows if r[0] in allowed]
        tops = [T(version=v, topic_name=name, topic_id=tid or uuid.UUID(int=0), partitions=[
            P(version=v, partition_index=p, start_offset=start, leader_epoch=epoch, error_code=code,
              error_message=message) for p, start, epoch, code, message in parts]) for name, tid, parts in rows]
        out.append(G(version=v, group_id=g.group_id, topics=tops + denied_rows, error_code=E.NONE, error_message=None))
    return R(version=v, throttle_time_ms=0, groups=out)


@api(91, 0, 0)
async def handle_alter_share_group_offsets(ctx: RequestContext, request) -> AlterShareGroupOffsetsResponse:
    v = ctx.api_version
    R = AlterShareGroupOffsetsResponse
    T = R.AlterShareGroupOffsetsResponseTopic
    P = T.AlterShareGroupOffsetsResponsePartition
    gc = _gc(ctx)
    code = (E.UNSUPPORTED_VERSION if not share_groups_enabled(ctx.config, ctx.metadata) else
            E.COORDINATOR_NOT_AVAILABLE if gc is None else
            E.GROUP_AUTHORIZATION_FAILED if not ctx.authorize(AclOperation.READ, ResourceType.GROUP,
                                                              request.group_id) else E.NONE)
    if code:
        return R(version=v, throttle_time_ms=0, error_code=code, error_message=None, responses=[])
    topics = TopicView(ctx)
    allowed = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, (t.topic_name for t in request.topics))
    offsets: dict[str, dict[int, int]] = {}
    refused = []
    for t in request.topics:
        if t.topic_name in allowed:
            offsets.setdefault(t.topic_name, {}).update({p.partition_index: p.start_offset for p in t.partitions})
        else:
            info = topics.get(t.topic_name)
            refused.append(T(version=v, topic_name=t.topic_name, topic_id=info[0] if info else uuid.UUID(int=0),
                             partitions=[P(version=v, partition_index=p.partition_index,
                                           error_code=E.TOPIC_AUTHORIZATION_FAILED, error_message=None)
                                         for p in t.partitions]))
    err, msg, results = await gc.alter_share_group_offsets(topics, request.group_id, offsets) if offsets else \
        (E.NONE, None, [])
    if err:
        return R(version=v, throttle_time_ms=0, error_code=err, error_message=msg, responses=[])
    responses = [T(version=v, topic_name=r.name, topic_id=r.topic_id or uuid.UUID(int=0), partitions=[
        P(version=v, partition_index=p, error_code=c, error_message=m) for p, (c, m) in sorted((r.partitions or {}).items())])
        for r in results]
    return R(version=v, throttle_time_ms=0, error_code=E.NONE, error_message=None, responses=responses + refused)


@api(92, 0, 0)
async def handle_delete_share_group_offsets(ctx: RequestContext, request) -> DeleteShareGroupOffsetsResponse:
    v = ctx.api_version
    R = DeleteShareGroupOffsetsResponse
    T = R.DeleteShareGroupOffsetsResponseTopic
    gc = _gc(ctx)
    code = (E.UNSUPPORTED_VERSION if not share_groups_enabled(ctx.config, ctx.metadata) else
            E.COORDINATOR_NOT_AVAILABLE if gc is None else
            E.GROUP_AUTHORIZATION_FAILED if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP,
                                                              request.group_id) else E.NONE)
    if code:
        return R(version=v, throttle_time_ms=0, error_code=code, error_message=None, responses=[])
    topics = TopicView(ctx)
    names = [t.topic_name for t in request.topics]
    allowed = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, names)
    refused = []
    for name in names:
        if name not in allowed:
            info = topics.get(name)
            refused.append(T(version=v, topic_name=name, topic_id=info[0] if info else uuid.UUID(int=0),
                             error_code=E.TOPIC_AUTHORIZATION_FAILED, error_message=None))
    wanted = [n for n in names if n in allowed]
    err, msg, results = await gc.delete_share_group_offsets(topics, request.group_id, wanted) if wanted else \
        (E.NONE, None, [])
    if err:
        return R(version=v, throttle_time_ms=0, error_code=err, error_message=msg, responses=[])
    responses = [T(version=v, topic_name=r.name, topic_id=r.topic_id or uuid.UUID(int=0), error_code=r.error,
                   error_message=r.message) for r in results]
    return R(version=v, throttle_time_ms=0, error_code=E.NONE, error_message=None, responses=responses + refused)
