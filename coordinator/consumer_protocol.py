"""The KIP-848 consumer group protocol: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

A mixin of GroupCoordinator. The coordinator owns the assignment: a change of membership,
subscriptions or subscribed topics' partition counts bumps the group epoch and the server-side
assignor computes a new target assignment; each member then reconciles toward its target on its
own heartbeats (Kafka's CurrentAssignmentBuilder): partitions it must give up are revoked first
(the member keeps its epoch until it confirms), partitions still owned by another member are
withheld until released, and only then does the member reach the new epoch.

Regex subscriptions (SubscribedTopicRegex, RE2 syntax) are resolved asynchronously as in Kafka's
GroupMetadataManager.maybeUpdateRegularExpressions: a heartbeat that brings a new regex only
schedules its resolution (a task on the event loop, see coordinator/topic_regex.py), so that first
heartbeat is answered with the literal topics' partitions alone; when the resolution lands and
changes the group's subscribed topics, the group epoch is bumped and the members get the new
topics on their next heartbeats. Regexes are resolved again when topics are created or deleted
(on_topics_changed, called from the broker's metadata events).

Persistence (as Kafka's GroupMetadataManager): every change a heartbeat makes is appended to the
group's __consumer_offsets partition as ConsumerGroup* records (coordinator/consumer_records.py:
only the records whose value changed) before the heartbeat is answered. Heartbeats of one group
are serialized (a per-group lock): the state is changed in memory, written, and on a failed
write restored to what it was before the heartbeat, which is then answered with the
coordinator error (NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE). Timer-driven changes (session
expiry, revocation timeout) and regex resolutions take the same path from background tasks. A
coordinator that loads the partition rebuilds the group and gives every member a fresh session
timeout, so groups survive coordinator moves and restarts.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from coordinator import assignors, topic_regex
from coordinator.group_metadata import ClassicGroup, GroupState
from coordinator.keyed_locks import KeyedLocks
from protocol.errors import ErrorCode

log = logging.getLogger("coordinator.group")
E = ErrorCode

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
RECENTLY_LEFT_MAX = 1024  # bound on the members remembered per group after they left

TopicAssignment = dict[uuid.UUID, set[int]]


class TopicView(Protocol):
    """What the coordinator needs to know about topics (the broker's metadata)."""

    def get(self, name: str) -> tuple[uuid.UUID, int] | None: ...
    def name_of(self, topic_id: uuid.UUID) -> str | None: ...
    def names(self) -> list[str]: ...


class MemberState(Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(slots=True, eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300000
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: TopicAssignment = field(default_factory=dict)
    pending_revocation: TopicAssignment = field(default_factory=dict)
    session_timer: Any = None
    rebalance_timer: Any = None
    left_static: bool = False  # a static member that left with epoch -2 and may come back


def _total(a: TopicAssignment) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in a.items() for p in ps}


def _to_map(pairs: set[tuple[uuid.UUID, int]]) -> TopicAssignment:
    out: TopicAssignment = {}
    for t, p in pairs:
        out.setdefault(t, set()).add(p)
    return out


class ConsumerGroup:
    group_type = "consumer"

    def __init__(self, group_id: str, now_ms: int) -> None:
        self.group_id = group_id
        self.state_timestamp_ms = now_ms
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}
        self.target: dict[str, TopicAssignment] = {}
        self.subscription_metadata: dict[str, tuple[uuid.UUID, int]] = {}
        self.assignor_name = "uniform"
        # Resolved regular expressions (regex -> topic names), as of topics version regex_version.
        self.resolved_regex: dict[str, frozenset[str]] = {}
        self.regex_version = -1
        self.regex_task: asyncio.Task[None] | None = None
        self.regex_dirty = False  # something changed while regex_task was running
        # member id -> (rebalance timeout, until when) of members that just left (see _cg_rejoin_fields).
        self.recently_left: dict[str, tuple[int, int]] = {}
        # The group's records as last written to (or replayed from) __consumer_offsets, as
        # coordinator/consumer_records.image computes them: a change is the difference.
        self.persisted: dict[tuple[int, str], tuple[Any, ...]] = {}

    @property
    def is_empty(self) -> bool:
        return not self.members

    @property
    def state_name(self) -> str:
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state != MemberState.STABLE
               for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def member_topics(self, member: ConsumerMember) -> set[str]:
        """The topic names a member subscribes to: its literal names and its resolved regex."""
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            names.update(self.resolved_regex.get(member.subscribed_topic_regex, ()))
        return names

    def regexes(self) -> set[str]:
        return {m.subscribed_topic_regex for m in self.members.values() if m.subscribed_topic_regex}

    def subscribed_topic_names(self) -> set[str]:
        names: set[str] = set()
        for m in self.members.values():
            names |= self.member_topics(m)
        names.update(self.subscription_metadata)
        return names

    def owned_by_others(self, member_id: str) -> set[tuple[uuid.UUID, int]]:
        out: set[tuple[uuid.UUID, int]] = set()
        for mid, m in self.members.items():
            if mid != member_id:
                out |= _total(m.assigned) | _total(m.pending_revocation)
        return out


@dataclass(slots=True)
class HeartbeatResult:
    error: int
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: TopicAssignment | None = None


_MEMBER_FIELDS = ("member_id", "instance_id", "rack_id", "client_id", "client_host", "rebalance_timeout_ms",
                  "subscribed_topic_names", "subscribed_topic_regex", "server_assignor", "member_epoch",
                  "previous_member_epoch", "state", "assigned", "pending_revocation", "left_static")
_GROUP_FIELDS = ("state_timestamp_ms", "group_epoch", "assignment_epoch", "static_members", "target",
                 "subscription_metadata", "assignor_name", "resolved_regex", "regex_version", "recently_left")


# Snapshots copy a group's dicts one level deep and take a member's fields by reference: the
# protocol code replaces a member's assignments and subscribed names, and a group's per-member
# targets, wholesale (never mutates them in place). So a snapshot is cheap, and so is comparing
# the persisted image (coordinator/consumer_records.py), which holds the same references.
_get_member_fields = operator.attrgetter(*_MEMBER_FIELDS)


def _copy(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else value


@dataclass(slots=True)
class _Snapshot:
    """A group's in-memory state before a change, to restore when its write fails."""

    group_id: str
    group: Any  # what self.groups held: None, a ClassicGroup or a ConsumerGroup
    fields: dict[str, Any] | None = None
    members: list[tuple[ConsumerMember, tuple[Any, ...]]] = field(default_factory=list)


class ConsumerProtocolMixin:
    groups: dict[str, Any]
    scheduler: Any

    def _cfg(self, name: str, default: Any) -> Any: ...
    def _coordinator_error(self, group_id: str) -> int: ...
    def _typed_group(self, group_id: str, cls: type, kind: str, empty_message: str | None
                     ) -> tuple[int, str | None, Any]: ...
    def _now(self) -> int: ...
    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None: ...

    async def _cg_persist(self, group_id: str, previous: Any) -> int:
        """Append the records of what changed in the group since its last write (implemented by
        GroupCoordinator); returns an error code."""
        raise NotImplementedError

    def _init_consumer_protocol(self) -> None:
        # Bumped on every topic creation or deletion; a group's regexes resolved at an older
        # version are resolved again.
        self._topics_version = 0
        self._topic_view: TopicView | None = None  # the broker's metadata, as the last heartbeat saw it
        self.consumer_session_timeout_ms = self._cg_bounded("group.consumer.session.timeout.ms", 45000, 60000)
        self.consumer_heartbeat_interval_ms = self._cg_bounded("group.consumer.heartbeat.interval.ms", 5000, 15000)
        self.consumer_max_size = int(self._cfg("group.consumer.max.size", 2**31 - 1))
        names = self._cfg("group.consumer.assignors", ["uniform", "range"])
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",") if n.strip()]
        self.consumer_assignors = [n.rsplit(".", 1)[-1].lower().removesuffix("assignor") or n for n in names] \
            or ["uniform", "range"]
        # One change of a group at a time: change in memory, write, answer (Kafka serializes a
        # partition's writes in its coordinator runtime).
        self._cg_locks = KeyedLocks()

    # --- serialized, persisted changes -----------------------------------------------------------

    def _cg_snapshot(self, group_id: str) -> _Snapshot:
        group = self.groups.get(group_id)
        snap = _Snapshot(group_id, group)
        if isinstance(group, ConsumerGroup):
            snap.fields = {name: _copy(getattr(group, name)) for name in _GROUP_FIELDS}
            snap.members = [(m, _get_member_fields(m)) for m in group.members.values()]
        return snap

    def _cg_restore(self, snap: _Snapshot) -> None:
        """Undo a change whose records could not be written. Timers of the restored members start
        afresh (a member is never fenced for the coordinator's failure)."""
        current = self.groups.get(snap.group_id)
        if current is not snap.group:
            if isinstance(current, ConsumerGroup):
                self._unload_consumer_group(current)
            if snap.group is None:
                self.groups.pop(snap.group_id, None)
            else:
                self.groups[snap.group_id] = snap.group
        group = snap.group
        if not isinstance(group, ConsumerGroup) or snap.fields is None:
            return
        for m in group.members.values():
            self._cg_cancel_timers(m)
        for name, value in snap.fields.items():
            setattr(group, name, value)
        group.members = {}
        for m, values in snap.members:
            self._cg_cancel_timers(m)
            for name, value in zip(_MEMBER_FIELDS, values, strict=True):
                setattr(m, name, value)
            group.members[m.member_id] = m
        for m in group.members.values():
            self._cg_schedule_session(group, m)
            if m.state == MemberState.UNREVOKED_PARTITIONS:
                self._cg_schedule_revocation(group, m)

    async def _cg_change(self, group_id: str, snap: _Snapshot) -> int:
        """Write what changed since ``snap``; on failure restore it. Returns the error code."""
        err = await self._cg_persist(group_id, snap.group)
        if self._coordinator_error(group_id):
            # The partition was unloaded during the write: the group is no longer here to
            # restore, and the member must find its new coordinator.
            return E.NOT_COORDINATOR
        if err:
            self._cg_restore(snap)
        return err

    async def _cg_fence_later(self, group: ConsumerGroup, member: ConsumerMember, why: str) -> None:
        """A timer fenced ``member``: remove it and write the change (a background task)."""
        async with self._cg_locks.hold(group.group_id):
            if self.groups.get(group.group_id) is not group or group.members.get(member.member_id) is not member:
                return
            if why == "session" and member.session_timer is not None:
                return  # it heartbeated while the task waited
            if why == "revocation" and (member.rebalance_timer is not None
                                        or member.state != MemberState.UNREVOKED_PARTITIONS):
                return
            snap = self._cg_snapshot(group.group_id)
            self._cg_remove_member(group, member)
            err = await self._cg_change(group.group_id, snap)
            if err:
                log.warning("consumer group %s: could not write the removal of member %s (error %d); keeping it",
                            group.group_id, member.member_id, err)

    def _cg_bounded(self, name: str, lo: int, hi: int) -> int:
        """A consumer-group timeout within its min/max configs (Kafka's GroupCoordinatorConfig
        refuses to start outside them; kbroker brings the value into range and says so)."""
        value = int(self._cfg(name, lo))
        base = name.removeprefix("group.consumer.")
        low = int(self._cfg(f"group.consumer.min.{base}", lo))
        high = int(self._cfg(f"group.consumer.max.{base}", max(hi, low)))
        bounded = min(max(value, low), max(high, low))
        if bounded != value:
            log.warning("%s=%d is outside [group.consumer.min.%s=%d, group.consumer.max.%s=%d]; using %d", name, value,
                        base, low, base, high, bounded)
        return bounded

    # --- timers ----------------------------------------------------------------------------------

    def _cg_schedule_session(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()

        def expire() -> None:
            member.session_timer = None
            if group.members.get(member.member_id) is member:
                log.info("consumer group %s member %s session expired; fencing it", group.group_id, member.member_id)
                self._spawn(self._cg_fence_later(group, member, "session"), f"fence-{group.group_id}")

        member.session_timer = self.scheduler.call_later(self.consumer_session_timeout_ms, expire)

    def _cg_schedule_revocation(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.rebalance_timer is not None:
            return

        def expire() -> None:
            member.rebalance_timer = None
            if group.members.get(member.member_id) is member and member.state == MemberState.UNREVOKED_PARTITIONS:
                log.info("consumer group %s member %s did not revoke within %d ms; fencing it", group.group_id,
                         member.member_id, member.rebalance_timeout_ms)
                self._spawn(self._cg_fence_later(group, member, "revocation"), f"fence-{group.group_id}")

        member.rebalance_timer = self.scheduler.call_later(member.rebalance_timeout_ms, expire)

    def _cg_cancel_timers(self, member: ConsumerMember) -> None:
        for name in ("session_timer", "rebalance_timer"):
            t = getattr(member, name)
            if t is not None:
                t.cancel()
            setattr(member, name, None)

    def _cg_remove_member(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        self._cg_cancel_timers(member)
        group.members.pop(member.member_id, None)
        group.target.pop(member.member_id, None)
        self._cg_forget_unused_regexes(group)
        if member.instance_id is not None and group.static_members.get(member.instance_id) == member.member_id:
            del group.static_members[member.instance_id]
        group.group_epoch += 1
        group.state_timestamp_ms = self._now()

    def _unload_consumer_group(self, group: ConsumerGroup) -> None:
        for m in group.members.values():
            self._cg_cancel_timers(m)
        if group.regex_task is not None:
            group.regex_task.cancel()
            group.regex_task = None

    # --- regular expressions -----------------------------------------------------------------------

    def on_topics_changed(self) -> None:
        """A topic was created or deleted: resolve every group's regexes again (off this call)."""
        self._topics_version += 1
        for group in list(self.groups.values()):
            if isinstance(group, ConsumerGroup) and group.regexes():
                self._cg_schedule_regex_refresh(group)

    def _cg_forget_unused_regexes(self, group: ConsumerGroup) -> None:
        used = group.regexes()
        for regex in [r for r in group.resolved_regex if r not in used]:
            del group.resolved_regex[regex]

    def _cg_regex_refresh_needed(self, group: ConsumerGroup) -> bool:
        regexes = group.regexes()
        return bool(regexes) and (not regexes <= group.resolved_regex.keys()
                                  or group.regex_version < self._topics_version)

    def _cg_schedule_regex_refresh(self, group: ConsumerGroup) -> None:
        if self._topic_view is None:
            return
        if group.regex_task is not None:
            group.regex_dirty = True  # the running refresh goes round once more
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (a synchronous caller): resolve on the next heartbeat
            return
        group.regex_task = loop.create_task(self._cg_refresh_regexes(group), name=f"regex-{group.group_id}")

    async def _cg_refresh_regexes(self, group: ConsumerGroup) -> None:
        """Kafka's refreshRegularExpressions + handleRegularExpressionsResult, as one task per group
        (at most one at a time; changes during a run make it run again)."""
        try:
            while True:
                group.regex_dirty = False
                view = self._topic_view
                regexes = group.regexes()
                if view is None or not regexes:
                    return
                version = self._topics_version
                resolved = await topic_regex.resolve(regexes, list(view.names()))
                async with self._cg_locks.hold(group.group_id):
                    if self.groups.get(group.group_id) is not group:
                        return  # unloaded or deleted meanwhile
                    snap = self._cg_snapshot(group.group_id)
                    self._cg_apply_resolved(group, resolved, version, view)
                    err = await self._cg_change(group.group_id, snap)
                if err:
                    log.warning("consumer group %s: could not write resolved regular expressions (error %d)",
                                group.group_id, err)
                    return
                if not (group.regex_dirty or self._cg_regex_refresh_needed(group)):
                    return
        finally:
            group.regex_task = None

    def _cg_apply_resolved(self, group: ConsumerGroup, resolved: dict[str, frozenset[str]], version: int,
                           view: TopicView) -> None:
        used = group.regexes()
        bump = False
        for regex, names in resolved.items():
            if regex not in used:
                continue  # no member subscribes to it any more
            if group.resolved_regex.get(regex) != names:
                group.resolved_regex[regex] = names
                bump = True
        self._cg_forget_unused_regexes(group)
        group.regex_version = max(group.regex_version, version)
        metadata = self._cg_subscription_metadata(group, view)
        if metadata != group.subscription_metadata:
            group.subscription_metadata = metadata
            bump = True
        if bump:
            group.group_epoch += 1
            log.info("consumer group %s: regular expressions resolved to %s; group epoch bumped to %d",
                     group.group_id, {r: sorted(n) for r, n in group.resolved_regex.items()}, group.group_epoch)

    # --- offsets validation ----------------------------------------------------------------------

    def _validate_consumer_commit(self, group: ConsumerGroup, member_epoch: int, member_id: str,
                                  instance_id: str | None, transactional: bool) -> int:
        if member_epoch < 0 and not member_id:
            return E.NONE if (group.is_empty or transactional) else E.UNKNOWN_MEMBER_ID
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return E.STALE_MEMBER_EPOCH
        return E.NONE

    def _validate_consumer_fetch(self, group: ConsumerGroup, member_id: str, member_epoch: int) -> int:
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return E.STALE_MEMBER_EPOCH
        return E.NONE

    # --- heartbeat -------------------------------------------------------------------------------

    async def consumer_group_heartbeat(self, topics: TopicView, group_id: str, member_id: str, member_epoch: int,
                                       **kw: Any) -> HeartbeatResult:
        async with self._cg_locks.hold(group_id):
            snap = self._cg_snapshot(group_id)
            result = self._cg_heartbeat(topics, group_id, member_id, member_epoch, **kw)
            # The records of what changed are in the log before the member hears of it.
            err = await self._cg_change(group_id, snap) if group_id else E.NONE
        if err:
            result = HeartbeatResult(error=err, member_id=member_id or None, member_epoch=member_epoch)
        # Every heartbeat's outcome at DEBUG: a refused heartbeat is often fatal to the client, and
        # the request and its answer are what it takes to tell whose fault it was.
        if log.isEnabledFor(logging.DEBUG):
            log.debug("consumer group %s heartbeat member=%s epoch=%d names=%s regex=%r owned=%s rebalance_timeout=%s "
                      "-> error=%d%s epoch=%d assignment=%s", group_id, member_id, member_epoch,
                      kw.get("subscribed_topic_names"), kw.get("subscribed_topic_regex"), kw.get("owned"),
                      kw.get("rebalance_timeout_ms"), result.error,
                      f" ({result.message})" if result.message else "", result.member_epoch,
                      None if result.assignment is None else {str(t): sorted(ps) for t, ps in result.assignment.items()})
        return result

    def _cg_heartbeat(self, topics: TopicView, group_id: str, member_id: str, member_epoch: int, *,
                      instance_id: str | None = None, rack_id: str | None = None,
                      rebalance_timeout_ms: int = -1, subscribed_topic_names: list[str] | None = None,
                      subscribed_topic_regex: str | None = None, server_assignor: str | None = None,
                      owned: list[tuple[uuid.UUID, list[int]]] | None = None, client_id: str = "",
                      client_host: str = "", api_version: int = 1) -> HeartbeatResult:
        def fail(code: int, message: str | None = None) -> HeartbeatResult:
            return HeartbeatResult(error=code, message=message, member_id=member_id or None,
                                   member_epoch=member_epoch)

        # Kafka's GroupMetadataManager.throwIfConsumerGroupHeartbeatRequestIsInvalid, check for
        # check and in its order (the regex is checked where Kafka first sees it, below).
        if api_version >= 1 or member_epoch > 0 or member_epoch == LEAVE_EPOCH:
            if not member_id:
                return fail(E.INVALID_REQUEST, "MemberId can't be empty.")
        if not group_id:
            return fail(E.INVALID_REQUEST, "GroupId can't be empty.")
        if instance_id == "":
            return fail(E.INVALID_REQUEST, "InstanceId can't be empty.")
        if rack_id == "":
            return fail(E.INVALID_REQUEST, "RackId can't be empty.")
        if member_epoch == JOIN_EPOCH and (rebalance_timeout_ms == -1 or owned is None):
            rebalance_timeout_ms, owned = self._cg_rejoin_fields(group_id, member_id, rebalance_timeout_ms, owned)
        if member_epoch == JOIN_EPOCH:
            if rebalance_timeout_ms == -1:
                return fail(E.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
            if owned is None or owned:
                return fail(E.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
            # An empty list of names or an empty regex is accepted: the member belongs to the
            # group without subscribing to anything.
            if subscribed_topic_names is None and subscribed_topic_regex is None:
                return fail(E.INVALID_REQUEST, "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                                               "when (re-)joining.")
            if not member_id:  # v0: the coordinator names the member
                member_id = str(uuid.uuid4())
        elif member_epoch == STATIC_LEAVE_EPOCH:
            if instance_id is None:
                return fail(E.INVALID_REQUEST, "InstanceId can't be null.")
        elif member_epoch < STATIC_LEAVE_EPOCH:
            return fail(E.INVALID_REQUEST, "MemberEpoch is invalid.")
        if server_assignor is not None and server_assignor not in self.consumer_assignors:
            return fail(E.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {server_assignor} is not supported. "
                                                f"Supported assignors: {', '.join(self.consumer_assignors)}.")
        if subscribed_topic_regex and member_epoch >= 0:
            reason = topic_regex.check_regex(subscribed_topic_regex)
            if reason is not None:
                return fail(E.INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex `{subscribed_topic_regex}` is not a "
                                                          f"valid regular expression: {reason}.")
        err = self._coordinator_error(group_id)
        if err:
            return fail(err)

        group = self.groups.get(group_id)
        empty_classic = isinstance(group, ClassicGroup) and group.is_in(GroupState.EMPTY) and not group.members
        if group is None or empty_classic:
            if member_epoch != JOIN_EPOCH:
                # E.g. the group was deleted, or its records expired: the member rejoins.
                return fail(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
            # An empty classic group (or one known only by offsets) becomes a consumer group;
            # its offsets are kept.
            group = ConsumerGroup(group_id, self._now())
            group.assignor_name = self.consumer_assignors[0]
            self.groups[group_id] = group
        elif not isinstance(group, ConsumerGroup):
            log.info("consumer group heartbeat of member %s refused: group %s is a %s group", member_id, group_id,
                     getattr(group, "group_type", "classic"))
            return fail(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")

        if member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._cg_leave(group, member_id, member_epoch, instance_id)

        member = group.members.get(member_id)
        new_member = False
        if member_epoch == JOIN_EPOCH:
            if instance_id is not None and instance_id in group.static_members and \
                    group.static_members[instance_id] != member_id:
                old = group.members[group.static_members[instance_id]]
                if not old.left_static:
                    return fail(E.UNRELEASED_INSTANCE_ID,
                                f"Static member {old.member_id} with instance id {instance_id} is not released.")
                # A restarted static member takes over its predecessor's assignment and epoch.
                self._cg_cancel_timers(old)
                old_id = old.member_id
                del group.members[old_id]
                old.member_id = member_id
                old.left_static = False
                old.member_epoch = old.previous_member_epoch if old.member_epoch < 0 else old.member_epoch
                group.members[member_id] = old
                group.static_members[instance_id] = member_id
                group.target[member_id] = group.target.pop(old_id, {})
                member = old
            elif member is None:
                if len(group.members) >= self.consumer_max_size:
                    return fail(E.GROUP_MAX_SIZE_REACHED, f"The consumer group has reached its maximum capacity "
                                                          f"of {self.consumer_max_size} members.")
                member = ConsumerMember(member_id=member_id, instance_id=instance_id)
                group.members[member_id] = member
                group.recently_left.pop(member_id, None)
                if instance_id is not None:
                    group.static_members[instance_id] = member_id
                new_member = True
            elif member.member_epoch != 0 or _total(member.assigned) or _total(member.pending_revocation):
                # A known member rejoining from scratch (e.g. after it was fenced client-side):
                # it owns nothing any more.
                member.assigned, member.pending_revocation = {}, {}
                member.member_epoch, member.previous_member_epoch = 0, -1
                member.state = MemberState.STABLE
                group.group_epoch += 1
        else:
            if member is None:
                return fail(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
            if member_epoch != member.member_epoch:
                owned_set = {(t, p) for t, ps in (owned or []) for p in ps}
                if not (member_epoch == member.previous_member_epoch and owned is not None
                        and owned_set <= _total(member.assigned)):
                    return fail(E.FENCED_MEMBER_EPOCH, f"The consumer group member has a greater member epoch "
                                                       f"({member.member_epoch}) than the one known by the client "
                                                       f"({member_epoch}).")

        # Update the member's declared state; a subscription change bumps the group epoch.
        self._topic_view = topics
        changed = new_member
        topics_before = group.member_topics(member)
        if subscribed_topic_names is not None and sorted(subscribed_topic_names) != sorted(member.subscribed_topic_names):
            member.subscribed_topic_names = list(subscribed_topic_names)
            changed = True
        # An empty regex means "no regex" (librdkafka sends "" with every full heartbeat).
        if subscribed_topic_regex is not None and (subscribed_topic_regex or None) != member.subscribed_topic_regex:
            member.subscribed_topic_regex = subscribed_topic_regex or None
            self._cg_forget_unused_regexes(group)
            # A regex the group has already resolved counts at once; a new one is resolved off
            # this heartbeat, which therefore answers with the literal topics' partitions only.
            changed = changed or group.member_topics(member) != topics_before
        if self._cg_regex_refresh_needed(group):
            self._cg_schedule_regex_refresh(group)
        if server_assignor is not None and server_assignor != member.server_assignor:
            member.server_assignor = server_assignor
            changed = True
        if rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        if rack_id is not None:
            member.rack_id = rack_id
        member.client_id, member.client_host = client_id, client_host
        # Partition counts of subscribed topics changing (or topics appearing) bumps it too; one
        # heartbeat moves the group by at most one epoch.
        metadata = self._cg_subscription_metadata(group, topics)
        if metadata != group.subscription_metadata:
            group.subscription_metadata = metadata
            changed = True
        if changed:
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch:
            self._cg_compute_target(group, topics)

        before = (member.member_epoch, {t: set(ps) for t, ps in member.assigned.items()})
        owned_map = None if owned is None else {t: set(ps) for t, ps in owned}
        self._cg_reconcile(group, member, owned_map)
        self._cg_schedule_session(group, member)
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            self._cg_schedule_revocation(group, member)
        elif member.rebalance_timer is not None:
            member.rebalance_timer.cancel()
            member.rebalance_timer = None
        after = (member.member_epoch, member.assigned)
        send_assignment = member_epoch == JOIN_EPOCH or before != after or (
            owned_map is not None and _total(owned_map) != _total(member.assigned))
        return HeartbeatResult(error=E.NONE, member_id=member.member_id, member_epoch=member.member_epoch,
                               heartbeat_interval_ms=self.consumer_heartbeat_interval_ms,
                               assignment={t: set(ps) for t, ps in member.assigned.items()} if send_assignment
                               else None)

    def _cg_leave(self, group: ConsumerGroup, member_id: str, epoch: int, instance_id: str | None) -> HeartbeatResult:
        member = group.members.get(member_id)
        if member is None and instance_id is not None:
            mid = group.static_members.get(instance_id)
            member = group.members.get(mid) if mid else None
        if member is None:
            return HeartbeatResult(error=E.UNKNOWN_MEMBER_ID, member_id=member_id, member_epoch=epoch,
                                   message=f"Member {member_id} is not a member of group {group.group_id}.")
        if epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            # A static member going away temporarily keeps its assignment for the session timeout.
            member.left_static = True
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = STATIC_LEAVE_EPOCH
            self._cg_schedule_session(group, member)
        else:
            log.info("consumer group %s member %s left", group.group_id, member.member_id)
            self._cg_remove_member(group, member)
            self._cg_remember_left(group, member)
        return HeartbeatResult(error=E.NONE, member_id=member_id, member_epoch=epoch,
                               heartbeat_interval_ms=0)

    def _cg_remember_left(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        now = self._now()
        left = group.recently_left
        for mid in [mid for mid, (_, until) in left.items() if until <= now]:
            del left[mid]
        while len(left) >= RECENTLY_LEFT_MAX:
            del left[next(iter(left))]
        left[member.member_id] = (member.rebalance_timeout_ms, now + self.consumer_session_timeout_ms)

    def _cg_rejoin_fields(self, group_id: str, member_id: str, rebalance_timeout_ms: int,
                          owned: list[tuple[uuid.UUID, list[int]]] | None
                          ) -> tuple[int, list[tuple[uuid.UUID, list[int]]] | None]:
        """Deviation from Kafka, for a librdkafka race: a consumer that unsubscribes and subscribes
        again at once can send its rejoin (epoch 0, with its subscription) as an incremental
        heartbeat, without RebalanceTimeoutMs and TopicPartitions. Kafka answers INVALID_REQUEST,
        which librdkafka treats as fatal. A member that left within the session timeout is known:
        its rebalance timeout is the one it declared before, and it owns nothing (it left)."""
        group = self.groups.get(group_id)
        known = group.recently_left.get(member_id) if isinstance(group, ConsumerGroup) else None
        if known is None or known[1] <= self._now():
            return rebalance_timeout_ms, owned
        log.debug("consumer group %s member %s rejoins right after leaving with an incremental heartbeat; "
                  "taking its previous rebalance timeout", group_id, member_id)
        return (known[0] if rebalance_timeout_ms == -1 else rebalance_timeout_ms), ([] if owned is None else owned)

    def _cg_subscription_metadata(self, group: ConsumerGroup, topics: TopicView) -> dict[str, tuple[uuid.UUID, int]]:
        out = {}
        names: set[str] = set()
        for m in group.members.values():
            names |= group.member_topics(m)
        for name in sorted(names):
            info = topics.get(name)
            if info is not None:
                out[name] = info
        return out

    def _cg_compute_target(self, group: ConsumerGroup, topics: TopicView) -> None:
        preferred = [m.server_assignor for m in group.members.values() if m.server_assignor]
        if preferred:
            # The most preferred assignor among members wins (Kafka's rule), else the default.
            group.assignor_name = max(sorted(set(preferred)), key=preferred.count)
        elif group.assignor_name not in self.consumer_assignors:
            group.assignor_name = self.consumer_assignors[0]
        specs = []
        for m in group.members.values():
            names = group.member_topics(m)
            subscribed = {group.subscription_metadata[n][0] for n in names if n in group.subscription_metadata}
            specs.append(assignors.MemberSpec(m.member_id, subscribed, group.target.get(m.member_id, {})))
        partitions = {tid: n for tid, n in group.subscription_metadata.values()}
        group.target = assignors.assign(group.assignor_name, specs, partitions)
        group.assignment_epoch = group.group_epoch
        log.info("consumer group %s epoch %d: new target assignment by %s for %d members", group.group_id,
                 group.group_epoch, group.assignor_name, len(specs))

    def _cg_reconcile(self, group: ConsumerGroup, member: ConsumerMember,
                      owned: dict[uuid.UUID, set[int]] | None) -> None:
        """Move the member toward its target: revoke first, then take what others have released."""
        if member.left_static:
            return
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if owned is None or (_total(owned) & _total(member.pending_revocation)):
                return  # still waiting for the member to confirm the revocation
            member.pending_revocation = {}
            member.state = MemberState.STABLE
            member.previous_member_epoch = member.member_epoch
        target_epoch = group.assignment_epoch
        if member.member_epoch == target_epoch and member.state == MemberState.STABLE:
            return
        target = _total(group.target.get(member.member_id, {}))
        current = _total(member.assigned)
        keep = current & target
        revoke = current - target
        if revoke:
            member.assigned = _to_map(keep)
            member.pending_revocation = _to_map(revoke)
            member.state = MemberState.UNREVOKED_PARTITIONS
            return
        taken = group.owned_by_others(member.member_id)
        grant = keep | {tp for tp in target - keep if tp not in taken}
        member.assigned = _to_map(grant)
        if member.member_epoch != target_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = target_epoch
        member.state = MemberState.STABLE if grant == target else MemberState.UNRELEASED_PARTITIONS

    # --- describe --------------------------------------------------------------------------------

    def consumer_group_describe(self, group_id: str) -> tuple[int, str | None, ConsumerGroup | None]:
        return self._typed_group(group_id, ConsumerGroup, "consumer", "Group id can't be empty.")
