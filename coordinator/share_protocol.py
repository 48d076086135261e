"""KIP-932 share groups in the group coordinator: ShareGroupHeartbeat, ShareGroupDescribe, the
share-partition initialization bookkeeping and the share-group admin operations
(Describe/Alter/DeleteShareGroupOffsets, DeleteGroups of a share group).

A mixin of GroupCoordinator, as Kafka's GroupMetadataManager share paths:

- a heartbeat creates the group (member epoch 0), adds or updates the member (rack, subscribed
  topic names), bumps the group epoch when a subscription or the subscribed topics' metadata
  changes or newly initialized share-partitions await assignment, then computes a new target
  assignment with the simple assignor (coordinator/share_group.py) over the *initialized*
  partitions only, and moves the member to it (no revocation: partitions are shared). A member
  leaves with epoch -1 or when its session times out (``share.session.timeout.ms`` of the group,
  else ``group.share.session.timeout.ms``);
- share-partitions of subscribed topics that the share coordinator does not hold yet are marked
  initializing (with a timestamp: an attempt older than ``group.share.initialize.retry.interval.ms``
  is retried) and initialized in the background with InitializeShareGroupState (state epoch =
  group epoch, start offset -1: the partition leader resolves ``share.auto.offset.reset``); when
  that succeeds they become initialized, and the next heartbeat assigns them;
- AlterShareGroupOffsets (an empty group) initializes the named partitions at the given start
  offsets; DeleteShareGroupOffsets (an empty group) deletes their state (marked deleting until the
  share coordinator confirmed); DeleteGroups of an empty share group deletes all its share state,
  then the group's records;
- a group of another type refuses share heartbeats (GROUP_ID_NOT_FOUND "Group X is not a share
  group."), as share groups refuse classic joins, consumer heartbeats and offset commits.

Persistence follows the consumer protocol's (per-group lock, records before the answer), with one
difference: a change is made on a copy of the group (``_sg_clone``) and installed only when its
records are written, so a failed write leaves the group as it was.

Deviation from Kafka: a member that heartbeats with epoch 0 while the coordinator still knows it
(it was fenced client-side and rejoins with the same id) rejoins from scratch instead of getting
FENCED_MEMBER_EPOCH until its session expires, as kbroker's consumer protocol does.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from coordinator import share_records as SR
from coordinator.keyed_locks import KeyedLocks
from coordinator.partition_access import append_error_code
from coordinator.share_group import (
    ASSIGNOR_NAME,
    JOIN_EPOCH,
    LEAVE_EPOCH,
    InitTopic,
    ShareGroup,
    ShareMember,
    TopicAssignment,
    assign,
    metadata_hash,
)
from protocol.errors import ErrorCode

log = logging.getLogger("coordinator.group")
E = ErrorCode


@dataclass(slots=True)
class ShareHeartbeatResult:
    error: int
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: TopicAssignment | None = None


@dataclass(slots=True)
class TopicResult:
    """One topic of an Alter/DeleteShareGroupOffsets answer."""

    name: str
    topic_id: uuid.UUID | None
    error: int = E.NONE
    message: str | None = None
    partitions: dict[int, tuple[int, str | None]] | None = None  # partition -> (error, message)


def _filter(assignment: TopicAssignment, topics: Any, names: tuple[str, ...]) -> TopicAssignment:
    """The part of ``assignment`` in the member's subscribed topics."""
    wanted = {info[0] for n in names if (info := topics.get(n)) is not None}
    return {t: ps for t, ps in assignment.items() if t in wanted and ps}


class ShareProtocolMixin:
    groups: dict[str, Any]
    scheduler: Any
    access: Any

    def _cfg(self, name: str, default: Any) -> Any: ...
    def _coordinator_error(self, group_id: str) -> int: ...
    def _typed_group(self, group_id: str, cls: type, kind: str, empty_message: str | None
                     ) -> tuple[int, str | None, Any]: ...
    def _now(self) -> int: ...
    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None: ...
    _cg_locks: KeyedLocks  # (ConsumerProtocolMixin) one change of a group at a time
    def _cg_bounded(self, name: str, lo: int, hi: int) -> int: ...
    def partition_for(self, group_id: str) -> int: ...

    async def _append(self, partition: int, records: list[tuple[bytes, bytes | None]], **kw: Any) -> int: ...

    def _init_share_protocol(self) -> None:
        self.share_session_timeout_ms = self._sg_bounded("session.timeout.ms", 45000, 45000, 60000)
        self.share_heartbeat_interval_ms = self._sg_bounded("heartbeat.interval.ms", 5000, 5000, 15000)
        self.share_max_size = int(self._cfg("group.share.max.size", 200))
        self.share_initialize_retry_ms = int(self._cfg("group.share.initialize.retry.interval.ms", 30000))
        # The group-level configs (IncrementalAlterConfigs on GROUP resources), set by the broker.
        self.group_configs: Callable[[str], dict[str, str]] = lambda _group_id: {}
        self._topic_view_sg: Any = None

    def _sg_bounded(self, base: str, default: int, lo: int, hi: int) -> int:
        value = int(self._cfg(f"group.share.{base}", default))
        low = int(self._cfg(f"group.share.min.{base}", lo))
        high = int(self._cfg(f"group.share.max.{base}", max(hi, low)))
        bounded = min(max(value, low), max(high, low))
        if bounded != value:
            log.warning("group.share.%s=%d is outside [group.share.min.%s=%d, group.share.max.%s=%d]; using %d",
                        base, value, base, low, base, high, bounded)
        return bounded

    def _sg_group_int(self, group_id: str, name: str, default: int) -> int:
        value = self.group_configs(group_id).get(name)
        try:
            return int(value) if value is not None else default
        except ValueError:
            return default

    def share_session_timeout(self, group_id: str) -> int:
        return self._sg_group_int(group_id, "share.session.timeout.ms", self.share_session_timeout_ms)

    def share_heartbeat_interval(self, group_id: str) -> int:
        return self._sg_group_int(group_id, "share.heartbeat.interval.ms", self.share_heartbeat_interval_ms)

    # --- copy-on-write changes -------------------------------------------------------------------

    @staticmethod
    def _sg_clone(group: ShareGroup) -> ShareGroup:
        g = ShareGroup(group.group_id, group.state_timestamp_ms)
        g.group_epoch, g.metadata_hash, g.assignment_epoch = group.group_epoch, group.metadata_hash, group.assignment_epoch
        g.members = {mid: dataclasses.replace(m) for mid, m in group.members.items()}
        g.target = dict(group.target)
        g.initializing, g.initialized, g.deleting = dict(group.initializing), dict(group.initialized), dict(group.deleting)
        g.persisted = group.persisted
        return g

    async def _sg_install(self, before: Any, after: ShareGroup | None, extra: list[tuple[bytes, bytes | None]] = ()
                          ) -> int:
        """Write what changed from ``before`` (the group as it is) to ``after`` (None: deleted) and
        install ``after``; on a failed write nothing changes. Returns the error code."""
        group_id = after.group_id if after is not None else before.group_id
        old = before.persisted if isinstance(before, ShareGroup) else {}
        if after is None:
            new: SR.Image = {}
            records = SR.tombstones(group_id, old)
        else:
            new = SR.image(after)
            records = SR.diff_records(group_id, old, new)
        records = list(extra) + records
        if records:
            try:
                await self._append(self.partition_for(group_id), records)
            except Exception as e:
                log.warning("failed to write share group records of %s: %r", group_id, e)
                self._sg_discard(before, after)
                return append_error_code(e)
        if self._coordinator_error(group_id):
            self._sg_discard(before, after)
            return E.NOT_COORDINATOR
        if after is not None:
            after.persisted = new
            self.groups[group_id] = after
            self._sg_retire(before, after)
        elif self.groups.get(group_id) is before:
            del self.groups[group_id]
            self._sg_retire(before, None)
        return E.NONE

    def _sg_retire(self, before: Any, after: ShareGroup | None) -> None:
        """Cancel the session timers of members that ``after`` no longer has."""
        if not isinstance(before, ShareGroup):
            return
        for mid, m in before.members.items():
            kept = after.members.get(mid) if after is not None else None
            if m.session_timer is not None and (kept is None or kept.session_timer is not m.session_timer):
                m.session_timer.cancel()

    def _sg_discard(self, before: Any, after: ShareGroup | None) -> None:
        """A change was not written: cancel the timers it scheduled."""
        if after is None:
            return
        old = before.members if isinstance(before, ShareGroup) else {}
        for mid, m in after.members.items():
            prev = old.get(mid)
            if m.session_timer is not None and (prev is None or prev.session_timer is not m.session_timer):
                m.session_timer.cancel()

    def _unload_share_group(self, group: ShareGroup) -> None:
        for m in group.members.values():
            if m.session_timer is not None:
                m.session_timer.cancel()
                m.session_timer = None

    # --- heartbeat -----------------------------------------------------------------------------

    async def share_group_heartbeat(self, topics: Any, group_id: str, member_id: str, member_epoch: int, *,
                                    rack_id: str | None = None, subscribed_topic_names: list[str] | None = None,
                                    client_id: str = "", client_host: str = "") -> ShareHeartbeatResult:
        def fail(code: int, message: str | None = None) -> ShareHeartbeatResult:
            if code not in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS):
                log.info("share group %s: heartbeat of member %r at epoch %d refused: %s (%s)", group_id, member_id,
                         member_epoch, ErrorCode(code).name, message)
            return ShareHeartbeatResult(error=code, message=message, member_id=member_id or None,
                                        member_epoch=member_epoch)

        # Kafka's throwIfShareGroupHeartbeatRequestIsInvalid, check for check.
        if not member_id:
            return fail(E.INVALID_REQUEST, "MemberId can't be empty.")
        if not group_id:
            return fail(E.INVALID_REQUEST, "GroupId can't be empty.")
        if rack_id == "":
            return fail(E.INVALID_REQUEST, "RackId can't be empty.")
        if member_epoch == JOIN_EPOCH and not subscribed_topic_names:
            return fail(E.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
        if member_epoch < LEAVE_EPOCH:
            return fail(E.INVALID_REQUEST, "MemberEpoch is invalid.")
        err = self._coordinator_error(group_id)
        if err:
            return fail(err)
        self._topic_view_sg = topics
        init: dict[uuid.UUID, InitTopic] = {}
        async with self._cg_locks.hold(group_id):
            before = self.groups.get(group_id)
            if before is not None and not isinstance(before, ShareGroup):
                return fail(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
            if before is None and member_epoch != JOIN_EPOCH:
                return fail(E.GROUP_ID_NOT_FOUND, f"Share group {group_id} not found.")
            after = self._sg_clone(before) if before is not None else ShareGroup(group_id, self._now())
            result = self._sg_heartbeat(after, topics, member_id, member_epoch, rack_id, subscribed_topic_names,
                                        client_id, client_host)
            if result.error:
                self._sg_discard(before, after)
                log.info("share group %s: heartbeat of member %s at epoch %d refused: %s (%s)", group_id, member_id,
                         member_epoch, ErrorCode(result.error).name, result.message)
                return result
            if member_epoch != LEAVE_EPOCH:
                init = self._sg_to_initialize(after, topics)
            err = await self._sg_install(before, after)
        if err:
            return fail(err)
        if init:
            epoch = after.group_epoch
            self._spawn(self._sg_initialize(group_id, init, {tid: {p: -1 for p in t.partitions} for tid, t in init.items()},
                                            epoch), f"share-init-{group_id}")
        if log.isEnabledFor(logging.DEBUG):
            log.debug("share group %s heartbeat member=%s epoch=%d names=%s -> error=%d epoch=%d assignment=%s",
                      group_id, member_id, member_epoch, subscribed_topic_names, result.error, result.member_epoch,
                      None if result.assignment is None else {str(t): sorted(ps) for t, ps in result.assignment.items()})
        return result

    def _sg_heartbeat(self, group: ShareGroup, topics: Any, member_id: str, member_epoch: int, rack_id: str | None,
                      subscribed: list[str] | None, client_id: str, client_host: str) -> ShareHeartbeatResult:
        gid = group.group_id
        if member_epoch == LEAVE_EPOCH:
            member = group.members.get(member_id)
            if member is None:
                return ShareHeartbeatResult(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {gid}.",
                                            member_id, member_epoch)
            log.info("share group %s member %s left", gid, member_id)
            self._sg_remove_member(group, member, topics)
            return ShareHeartbeatResult(E.NONE, None, member_id, LEAVE_EPOCH, 0)
        member = group.members.get(member_id)
        bump = False
        if member is None:
            if member_epoch != JOIN_EPOCH:
                return ShareHeartbeatResult(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {gid}.",
                                            member_id, member_epoch)
            if len(group.members) >= self.share_max_size:
                return ShareHeartbeatResult(E.GROUP_MAX_SIZE_REACHED, f"The share group has reached its maximum "
                                            f"capacity of {self.share_max_size} members.", member_id, member_epoch)
            member = group.members[member_id] = ShareMember(member_id)
            log.info("share group %s: member %s joins", gid, member_id)
            bump = True
        elif member_epoch == JOIN_EPOCH and member.member_epoch != JOIN_EPOCH:
            log.info("share group %s: member %s rejoins from scratch (epoch %d known)", gid, member_id,
                     member.member_epoch)
            member.member_epoch, member.previous_member_epoch, member.assigned = JOIN_EPOCH, JOIN_EPOCH, {}
            bump = True
        elif member_epoch > member.member_epoch or (member_epoch < member.member_epoch
                                                    and member_epoch != member.previous_member_epoch):
            return ShareHeartbeatResult(
                E.FENCED_MEMBER_EPOCH, f"The share group member has a {'greater' if member_epoch > member.member_epoch else 'smaller'} "
                f"member epoch ({member_epoch}) than the one known by the group coordinator ({member.member_epoch}). "
                "The member must abandon all its partitions and rejoin.", member_id, member_epoch)
        subscription_changed = False
        if rack_id is not None:
            member.rack_id = rack_id
        if subscribed is not None and tuple(sorted(subscribed)) != tuple(sorted(member.subscribed_topic_names)):
            member.subscribed_topic_names = tuple(sorted(subscribed))
            subscription_changed = True
            bump = True
            log.info("share group %s member %s subscribes to %s", gid, member_id, list(member.subscribed_topic_names))
        member.client_id, member.client_host = client_id, client_host
        new_hash = metadata_hash(self._sg_topics(group, topics))
        if new_hash != group.metadata_hash:
            bump = True
        if not bump and self._sg_assignment_pending(group, topics):
            bump = True
        if bump:
            group.group_epoch += 1
            group.metadata_hash = new_hash
            group.state_timestamp_ms = self._now()
        if group.group_epoch > group.assignment_epoch:
            self._sg_compute_target(group, topics)
        before = member.assigned
        target = group.target.get(member_id, {})
        if member.member_epoch != group.assignment_epoch:
            member.previous_member_epoch, member.member_epoch = member.member_epoch, group.assignment_epoch
            member.assigned = _filter(target, topics, member.subscribed_topic_names)
        elif subscription_changed:
            member.assigned = _filter(target, topics, member.subscribed_topic_names)
        self._sg_schedule_session(group, member)
        send = member_epoch == JOIN_EPOCH or subscribed is not None or before != member.assigned
        return ShareHeartbeatResult(E.NONE, None, member_id, member.member_epoch, self.share_heartbeat_interval(gid),
                                    dict(member.assigned) if send else None)

    def _sg_topics(self, group: ShareGroup, topics: Any) -> dict[str, tuple[uuid.UUID, int]]:
        out = {}
        for name in group.subscribed_topic_names():
            info = topics.get(name)
            if info is not None:
                out[name] = info
        return out

    def _sg_assignable(self, group: ShareGroup, topics: Any) -> dict[uuid.UUID, frozenset[int]]:
        """Initialized share-partitions of topics that still exist (partition indexes in range)."""
        meta = self._sg_topics(group, topics)
        by_id = {tid: n for tid, n in meta.values()}
        return {tid: frozenset(p for p in t.partitions if p < by_id[tid])
                for tid, t in group.initialized.items() if tid in by_id}

    def _sg_assignment_pending(self, group: ShareGroup, topics: Any) -> bool:
        """Kafka's initializedAssignmentPending: initialized partitions of subscribed topics that
        the target assignment does not cover yet."""
        if not group.members:
            return False
        assigned: dict[uuid.UUID, set[int]] = {}
        for a in group.target.values():
            for tid, ps in a.items():
                assigned.setdefault(tid, set()).update(ps)
        for tid, ps in self._sg_assignable(group, topics).items():
            if ps and set(ps) != assigned.get(tid, set()):
                return True
        return False

    def _sg_compute_target(self, group: ShareGroup, topics: Any) -> None:
        partitions = self._sg_assignable(group, topics)
        subs = {mid: frozenset(info[0] for n in m.subscribed_topic_names if (info := topics.get(n)) is not None)
                for mid, m in group.members.items()}
        group.target = assign(subs, partitions, group.target)
        group.assignment_epoch = group.group_epoch
        log.info("share group %s epoch %d: new target assignment for %d members over %d partitions", group.group_id,
                 group.group_epoch, len(subs), sum(len(ps) for ps in partitions.values()))

    def _sg_remove_member(self, group: ShareGroup, member: ShareMember, topics: Any) -> None:
        group.members.pop(member.member_id, None)
        group.target.pop(member.member_id, None)
        group.group_epoch += 1
        if topics is not None:
            group.metadata_hash = metadata_hash(self._sg_topics(group, topics))
        group.state_timestamp_ms = self._now()

    def _sg_to_initialize(self, group: ShareGroup, topics: Any) -> dict[uuid.UUID, InitTopic]:
        """Share-partitions of subscribed topics neither initialized nor being initialized (recently):
        marked initializing in ``group``; what to initialize."""
        now = self._now()
        out: dict[uuid.UUID, InitTopic] = {}
        for name, (tid, n) in self._sg_topics(group, topics).items():
            done = set(group.initialized[tid].partitions) if tid in group.initialized else set()
            pending = group.initializing.get(tid)
            if pending is not None and now - pending.timestamp < self.share_initialize_retry_ms:
                done |= pending.partitions
            todo = frozenset(p for p in range(n) if p not in done)
            if todo:
                out[tid] = InitTopic(name, todo, now)
        for tid, t in out.items():
            prev = group.initializing.get(tid)
            group.initializing[tid] = InitTopic(t.name, t.partitions | (prev.partitions if prev else frozenset()), now)
            group.deleting.pop(tid, None)
        return out

    async def _sg_initialize(self, group_id: str, topics: dict[uuid.UUID, InitTopic],
                             offsets: dict[uuid.UUID, dict[int, int]], state_epoch: int
                             ) -> dict[tuple[uuid.UUID, int], tuple[int, str | None]]:
        """InitializeShareGroupState for ``offsets`` (start offset -1: resolved by the partition
        leader), then record the outcome: initialized, or no longer initializing (retried)."""
        request = {tid: {p: (state_epoch, off) for p, off in parts.items()} for tid, parts in offsets.items()}
        try:
            results = await self.access.share_state.initialize(group_id, request)
        except Exception as e:
            log.warning("share group %s: initializing share-partitions failed: %r", group_id, e)
            results = {(tid, p): (int(E.COORDINATOR_NOT_AVAILABLE), str(e)) for tid, ps in offsets.items() for p in ps}
        async with self._cg_locks.hold(group_id):
            before = self.groups.get(group_id)
            if not isinstance(before, ShareGroup):
                return results
            after = self._sg_clone(before)
            for tid, t in topics.items():
                ok = frozenset(p for p in t.partitions if results.get((tid, p), (E.UNKNOWN_SERVER_ERROR,))[0] == E.NONE)
                failed = t.partitions - ok
                pending = after.initializing.get(tid)
                if pending is not None:
                    rest = pending.partitions - t.partitions
                    if rest:
                        after.initializing[tid] = InitTopic(pending.name, rest, pending.timestamp)
                    else:
                        del after.initializing[tid]
                if ok:
                    prev = after.initialized.get(tid)
                    after.initialized[tid] = InitTopic(t.name, ok | (prev.partitions if prev else frozenset()))
                if failed:
                    log.warning("share group %s: share-partitions %s-%s not initialized: %s", group_id, t.name,
                                sorted(failed), {p: results.get((tid, p)) for p in sorted(failed)})
            err = await self._sg_install(before, after)
            if err:
                log.warning("share group %s: could not record initialized share-partitions (error %d)", group_id, err)
        return results

    # --- timers ----------------------------------------------------------------------------------

    def _sg_schedule_session(self, group: ShareGroup, member: ShareMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        gid, mid = group.group_id, member.member_id
        holder: list[Any] = []

        def expire() -> None:
            log.info("share group %s member %s session expired; removing it", gid, mid)
            self._spawn(self._sg_fence_later(gid, mid, holder[0]), f"share-fence-{gid}")

        member.session_timer = self.scheduler.call_later(self.share_session_timeout(gid), expire)
        holder.append(member.session_timer)

    async def _sg_fence_later(self, group_id: str, member_id: str, timer: Any) -> None:
        async with self._cg_locks.hold(group_id):
            before = self.groups.get(group_id)
            if not isinstance(before, ShareGroup):
                return
            member = before.members.get(member_id)
            if member is None or member.session_timer is not timer:
                return  # gone, or it heartbeated while this task waited
            after = self._sg_clone(before)
            after.members[member_id].session_timer = None
            self._sg_remove_member(after, after.members[member_id], self._topic_view_sg)
            err = await self._sg_install(before, after)
            if err:
                log.warning("share group %s: could not write the removal of member %s (error %d); keeping it",
                            group_id, member_id, err)

    # --- describe and admin ------------------------------------------------------------------------

    def share_group_describe(self, group_id: str) -> tuple[int, str | None, ShareGroup | None]:
        return self._typed_group(group_id, ShareGroup, "share", "Group id can't be empty.")

    @property
    def share_assignor_name(self) -> str:
        return ASSIGNOR_NAME

    def _sg_admin_target(self, group_id: str) -> tuple[int, str | None, ShareGroup | None]:
        return self._typed_group(group_id, ShareGroup, "share", None)

    async def describe_share_group_offsets(self, topics: Any, group_id: str, wanted: dict[str, list[int]] | None
                                           ) -> tuple[int, str | None, list[tuple[str, uuid.UUID | None, list[tuple[int, int, int, int, str | None]]]]]:
        """DescribeShareGroupOffsets for one group: (error, message, [(topic, id, [(partition,
        start offset, leader epoch, error, message)])]). ``wanted`` None: every initialized partition."""
        err = self._coordinator_error(group_id) if group_id else E.INVALID_GROUP_ID
        if err:
            return err, None, []
        group = self.groups.get(group_id)
        if group is not None and not isinstance(group, ShareGroup):
            return E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.", []
        request: dict[uuid.UUID, list[int]] = {}
        names: dict[uuid.UUID, str] = {}
        missing: list[tuple[str, uuid.UUID | None, list[tuple[int, int, int, int, str | None]]]] = []
        if wanted is None:
            if group is None:
                return E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", []
            for tid, t in group.initialized.items():
                name = topics.name_of(tid)
                if name is not None:
                    request[tid], names[tid] = sorted(t.partitions), name
        else:
            for name, parts in wanted.items():
                info = topics.get(name)
                if info is None:
                    missing.append((name, None, [(p, -1, -1, E.NONE, None) for p in parts]))
                    continue
                request[info[0]], names[info[0]] = list(parts), name
        results: dict[tuple[uuid.UUID, int], tuple[int, str | None, int, int, int]] = {}
        if request:
            results = await self.access.share_state.read_summary(group_id, request)
        out = list(missing)
        for tid, parts in request.items():
            rows = []
            for p in parts:
                code, _msg, _state_epoch, leader_epoch, start = results.get((tid, p), (E.UNKNOWN_SERVER_ERROR, None, -1,
                                                                                       -1, -1))
                # Kafka answers an uninitialized or failed read as start offset -1, not an error.
                rows.append((p, start if code == E.NONE else -1, leader_epoch if code == E.NONE else -1, E.NONE, None))
            out.append((names[tid], tid, rows))
        return E.NONE, None, out

    async def alter_share_group_offsets(self, topics: Any, group_id: str, offsets: dict[str, dict[int, int]]
                                        ) -> tuple[int, str | None, list[TopicResult]]:
        err, msg, group = self._sg_admin_target(group_id)
        if err:
            return err, msg, []
        results: list[TopicResult] = []
        init: dict[uuid.UUID, InitTopic] = {}
        starts: dict[uuid.UUID, dict[int, int]] = {}
        async with self._cg_locks.hold(group_id):
            before = self.groups.get(group_id)
            if not isinstance(before, ShareGroup):
                return E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", []
            if not before.is_empty:
                return E.NON_EMPTY_GROUP, None, []
            after = self._sg_clone(before)
            now = self._now()
            for name, parts in offsets.items():
                info = topics.get(name)
                if info is None:
                    results.append(TopicResult(name, None, partitions={p: (E.UNKNOWN_TOPIC_OR_PARTITION, None)
                                                                      for p in parts}))
                    continue
                tid, n = info
                res: dict[int, tuple[int, str | None]] = {}
                for p, off in parts.items():
                    if 0 <= p < n:
                        res[p] = (E.NONE, None)
                        starts.setdefault(tid, {})[p] = off
                    else:
                        res[p] = (E.UNKNOWN_TOPIC_OR_PARTITION, None)
                results.append(TopicResult(name, tid, partitions=res))
                if tid in starts:
                    init[tid] = InitTopic(name, frozenset(starts[tid]), now)
                    prev = after.initializing.get(tid)
                    after.initializing[tid] = InitTopic(name, init[tid].partitions | (prev.partitions if prev else
                                                                                       frozenset()), now)
                    after.deleting.pop(tid, None)
            err = await self._sg_install(before, after)
            if err:
                return err, None, []
            epoch = after.group_epoch
        if init:
            outcome = await self._sg_initialize(group_id, init, starts, epoch)
            for r in results:
                if r.topic_id in init and r.partitions is not None:
                    for p in list(r.partitions):
                        code, message = outcome.get((r.topic_id, p), (E.NONE, None))
                        if code != E.NONE and r.partitions[p][0] == E.NONE:
                            r.partitions[p] = (code, message)
        return E.NONE, None, results

    async def delete_share_group_offsets(self, topics: Any, group_id: str, names: list[str]
                                         ) -> tuple[int, str | None, list[TopicResult]]:
        err, msg, group = self._sg_admin_target(group_id)
        if err:
            return err, msg, []
        results: list[TopicResult] = []
        to_delete: dict[uuid.UUID, list[int]] = {}
        async with self._cg_locks.hold(group_id):
            before = self.groups.get(group_id)
            if not isinstance(before, ShareGroup):
                return E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", []
            if not before.is_empty:
                return E.NON_EMPTY_GROUP, None, []
            after = self._sg_clone(before)
            for name in names:
                info = topics.get(name)
                if info is None:
                    results.append(TopicResult(name, None, E.UNKNOWN_TOPIC_OR_PARTITION,
                                               "This server does not host this topic-partition."))
                    continue
                tid, n = info
                if tid in after.initialized:
                    to_delete[tid] = sorted(after.initialized.pop(tid).partitions)
                    after.deleting[tid] = name
                elif tid in after.deleting:
                    to_delete[tid] = list(range(n))
                else:
                    results.append(TopicResult(name, tid, E.UNKNOWN_TOPIC_OR_PARTITION,
                                               "There is no offset information to delete."))
            err = await self._sg_install(before, after)
            if err:
                return err, None, []
        if not to_delete:
            return E.NONE, None, results
        outcome = await self.access.share_state.delete(group_id, to_delete)
        done = []
        for tid, parts in to_delete.items():
            errors = [outcome.get((tid, p), (E.UNKNOWN_SERVER_ERROR, None)) for p in parts]
            bad = next((e for e in errors if e[0] != E.NONE), None)
            name = topics.name_of(tid) or ""
            if bad is None:
                done.append(tid)
                results.append(TopicResult(name, tid))
            else:
                results.append(TopicResult(name, tid, bad[0], bad[1]))
        async with self._cg_locks.hold(group_id):
            before = self.groups.get(group_id)
            if isinstance(before, ShareGroup) and any(tid in before.deleting for tid in done):
                after = self._sg_clone(before)
                for tid in done:
                    after.deleting.pop(tid, None)
                await self._sg_install(before, after)
        return E.NONE, None, results

    async def _delete_share_group(self, group: ShareGroup, topics: Any) -> int:
        """DeleteGroups of a share group (the group lock is held): its share state first, then its records."""
        if not group.is_empty:
            return E.NON_EMPTY_GROUP
        parts = group.known_partitions()
        for tid in group.deleting:
            n = topics.get(topics.name_of(tid) or "") if topics is not None else None
            if n is not None:
                parts.setdefault(tid, set()).update(range(n[1]))
        if parts:
            outcome = await self.access.share_state.delete(group.group_id, {t: sorted(ps) for t, ps in parts.items()})
            bad = next((e for e in outcome.values() if e[0] != E.NONE), None)
            if bad is not None:
                log.warning("share group %s: deleting its share state failed (%s)", group.group_id, bad)
                return bad[0]
        return await self._sg_install(group, None)
