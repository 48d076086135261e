"""The classic group protocol: JoinGroup, SyncGroup, Heartbeat and LeaveGroup, as Kafka runs it.

A mixin of GroupCoordinator (which supplies persistence, the scheduler and the group table).
JoinGroup and SyncGroup park on futures that a later event completes: every member rejoining,
the rebalance timeout, the leader's assignment. Timers (session timeouts, the delayed join, the
pending-sync timeout) are event-loop callbacks, never threads. Static members (KIP-345) keep
their assignment across restarts; a zombie presenting a replaced member id is fenced.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from coordinator.group_metadata import ClassicGroup, ClassicMember, GroupState, JoinResult, SyncResult
from protocol.errors import ErrorCode

log = logging.getLogger("coordinator.group")

# Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: how long a brand-new member may sit in a join.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000

E = ErrorCode
S = GroupState


class ClassicProtocolMixin:
    groups: dict[str, Any]
    scheduler: Any
    initial_rebalance_delay_ms: int
    min_session_timeout_ms: int
    max_session_timeout_ms: int
    max_group_size: int

    # provided by GroupCoordinator
    def _coordinator_error(self, group_id: str) -> int: ...
    async def _store_group(self, group: ClassicGroup, assignments: dict[str, bytes] | None = None) -> int: ...
    def _store_group_later(self, group: ClassicGroup) -> None: ...
    def _maybe_drop_group(self, group: ClassicGroup) -> None: ...
    def _now(self) -> int: ...

    # --- timers ------------------------------------------------------------------------------

    def _after(self, delay_ms: int, fn: Callable[[], None]) -> Any:
        return self.scheduler.call_later(max(0, delay_ms), fn)

    @staticmethod
    def _cancel(timer: Any) -> None:
        if timer is not None:
            timer.cancel()

    def _schedule_heartbeat(self, group: ClassicGroup, member: ClassicMember, timeout_ms: int | None = None) -> None:
        """(Re)start the member's session: it is removed unless it shows life within the timeout."""
        self._cancel(member.heartbeat_timer)
        member.last_heartbeat_ms = self._now()
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.heartbeat_timer = self._after(timeout, lambda: self._on_member_expired(group, member, timeout))

    def _on_member_expired(self, group: ClassicGroup, member: ClassicMember, timeout_ms: int) -> None:
        member.heartbeat_timer = None
        if group.members.get(member.member_id) is not member or self.groups.get(group.group_id) is not group:
            return
        # A member parked in a join (that already had a generation) or waiting for its assignment
        # is alive by definition: the rebalance / sync timeouts bound those waits instead.
        if (member.awaiting_join and not member.is_new) or member.awaiting_sync:
            self._schedule_heartbeat(group, member)
            return
        log.info("member %s of group %s failed to heartbeat within %d ms; removing it", member.member_id,
                 group.group_id, timeout_ms)
        self._remove_member_and_update_group(group, member, "session timeout expired")

    def _schedule_pending_member(self, group: ClassicGroup, member_id: str, timeout_ms: int) -> None:
        self._cancel(group.pending_timers.pop(member_id, None))

        def expire() -> None:
            group.pending_timers.pop(member_id, None)
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                log.info("pending member %s of group %s never joined; forgetting it", member_id, group.group_id)
                if group.is_in(S.PREPARING_REBALANCE):
                    self._check_join_complete(group)

        group.pending_timers[member_id] = self._after(timeout_ms, expire)

    # --- rebalance driving ---------------------------------------------------------------------

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_in(S.COMPLETING_REBALANCE):
            self._reset_and_propagate(group, E.REBALANCE_IN_PROGRESS)
        self._cancel(group.sync_timer)
        group.sync_timer = None
        self._cancel(group.join_timer)
        was_empty = group.is_in(S.EMPTY)
        group.transition_to(S.PREPARING_REBALANCE, self._now())
        log.info("preparing to rebalance group %s in state PreparingRebalance with old generation %d (reason: %s)",
                 group.group_id, group.generation_id, reason)
        if was_empty:
            # Kafka's InitialDelayedJoin: wait for more members; each new one extends the wait
            # (by at most the delay) until the rebalance timeout is used up.
            delay = self.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            group.initial_join = True
            group.join_timer = self._after(delay, lambda: self._on_initial_join_timer(group, delay, remaining))
        else:
            group.initial_join = False
            group.join_timer = self._after(group.rebalance_timeout_ms(), lambda: self._complete_join(group))
            self._check_join_complete(group)

    def _maybe_prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _on_initial_join_timer(self, group: ClassicGroup, delay: int, remaining: int) -> None:
        group.join_timer = None
        if not group.is_in(S.PREPARING_REBALANCE) or self.groups.get(group.group_id) is not group:
            return
        if group.new_member_added and remaining > 0:
            group.new_member_added = False
            step = min(delay, remaining)
            group.join_timer = self._after(step, lambda: self._on_initial_join_timer(group, delay, remaining - step))
            return
        self._complete_join(group)

    def _check_join_complete(self, group: ClassicGroup) -> None:
        if group.is_in(S.PREPARING_REBALANCE) and not group.initial_join and group.all_joined():
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        if not group.is_in(S.PREPARING_REBALANCE) or self.groups.get(group.group_id) is not group:
            return
        self._cancel(group.join_timer)
        group.join_timer = None
        group.initial_join = False
        # Dynamic members that did not rejoin in time are gone; static ones keep their seat.
        for m in group.not_yet_rejoined():
            if m.group_instance_id is None:
                log.info("member %s of group %s did not rejoin in time; removing it", m.member_id, group.group_id)
                self._cancel(m.heartbeat_timer)
                group.remove(m.member_id)
        leader = group.members.get(group.leader_id or "")
        if group.members and (leader is None or not leader.awaiting_join):
            # The leader must be a member that will receive this join response.
            joined = [m for m in group.members.values() if m.awaiting_join]
            group.leader_id = (joined or list(group.members.values()))[0].member_id
        now = self._now()
        group.generation_id += 1
        group.pending_sync.clear()
        if not group.members:
            group.protocol_name = None
            group.transition_to(S.EMPTY, now)
            log.info("group %s with generation %d is now empty", group.group_id, group.generation_id)
            self._store_group_later(group)
            return
        group.protocol_name = group.select_protocol()
        group.transition_to(S.COMPLETING_REBALANCE, now)
        log.info("stabilized group %s generation %d with %d members (protocol %s)", group.group_id,
                 group.generation_id, len(group.members), group.protocol_name)
        leader_members = group.current_member_metadata()
        for m in group.members.values():
            if m.awaiting_join:
                assert m.join_future is not None
                m.join_future.set_result(JoinResult(
                    error=E.NONE, member_id=m.member_id, generation_id=group.generation_id,
                    protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                    leader_id=group.leader_id or "", members=leader_members if group.is_leader(m.member_id) else []))
            m.join_future = None
            m.is_new = False
            group.pending_sync.add(m.member_id)
            self._schedule_heartbeat(group, m)
        generation = group.generation_id
        group.sync_timer = self._after(group.rebalance_timeout_ms(), lambda: self._on_sync_timeout(group, generation))

    def _on_sync_timeout(self, group: ClassicGroup, generation: int) -> None:
        group.sync_timer = None
        if group.generation_id != generation or not group.is_in(S.COMPLETING_REBALANCE, S.STABLE):
            return
        if not group.pending_sync:
            return
        for member_id in list(group.pending_sync):
            member = group.members.get(member_id)
            log.info("member %s of group %s did not sync in time; removing it", member_id, group.group_id)
            if member is not None:
                self._cancel(member.heartbeat_timer)
                group.remove(member_id)
        group.pending_sync.clear()
        self._maybe_prepare_rebalance(group, "members failed to sync within the rebalance timeout")

    def _reset_and_propagate(self, group: ClassicGroup, error: int) -> None:
        for m in group.members.values():
            m.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: int) -> None:
        for m in group.members.values():
            if m.awaiting_sync:
                assert m.sync_future is not None
                m.sync_future.set_result(SyncResult(
                    error=error, protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                    assignment=m.assignment if error == E.NONE else b""))
                m.sync_future = None
                self._schedule_heartbeat(group, m)

    def _remove_member_and_update_group(self, group: ClassicGroup, member: ClassicMember, reason: str) -> None:
        self._cancel(member.heartbeat_timer)
        member.heartbeat_timer = None
        if member.awaiting_join:
            assert member.join_future is not None
            member.join_future.set_result(JoinResult(error=E.UNKNOWN_MEMBER_ID, member_id=member.member_id))
        if member.awaiting_sync:
            assert member.sync_future is not None
            member.sync_future.set_result(SyncResult(error=E.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if group.is_in(S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"removing member {member.member_id} on {reason}")
        elif group.is_in(S.PREPARING_REBALANCE):
            self._check_join_complete(group)

    # --- JoinGroup -------------------------------------------------------------------------------

    async def join_group(self, group_id: str, member_id: str, group_instance_id: str | None, protocol_type: str,
                         protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
                         client_id: str, client_host: str, *, require_known_member_id: bool = True,
                         supports_skip_assignment: bool = False, reason: str | None = None) -> JoinResult:
        def fail(code: int) -> JoinResult:
            return JoinResult(error=code, member_id=member_id)

        if not group_id:
            return fail(E.INVALID_GROUP_ID)
        err = self._coordinator_error(group_id)
        if err:
            return fail(err)
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return fail(E.INVALID_SESSION_TIMEOUT)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms  # JoinGroup v0 has no rebalance timeout
        group = self.groups.get(group_id)
        created = False
        if group is None:
            if member_id:
                return fail(E.UNKNOWN_MEMBER_ID)
            group = ClassicGroup(group_id, self._now())
            self.groups[group_id] = group
            created = True
        elif not isinstance(group, ClassicGroup):
            # A consumer-protocol (KIP-848) group: classic members cannot join it here.
            return fail(E.INCONSISTENT_GROUP_PROTOCOL)
        if not protocol_type or not protocols:
            result = fail(E.INCONSISTENT_GROUP_PROTOCOL)
        elif not self._accept_joining_member(group, member_id):
            result = fail(E.GROUP_MAX_SIZE_REACHED)
        elif not member_id:
            result = await self._join_unknown_member(
                group, group_instance_id, protocol_type, protocols, session_timeout_ms, rebalance_timeout_ms,
                client_id, client_host, require_known_member_id, supports_skip_assignment, reason)
        else:
            result = await self._join_known_member(
                group, member_id, group_instance_id, protocol_type, protocols, session_timeout_ms, rebalance_timeout_ms,
                client_id, client_host, supports_skip_assignment, reason)
        if created and result.error not in (E.NONE, E.MEMBER_ID_REQUIRED):
            self._maybe_drop_group(group)
        return result

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        if group.is_in(S.EMPTY, S.DEAD):
            return True
        if group.is_in(S.PREPARING_REBALANCE):
            return (group.has(member_id) and group.get(member_id).awaiting_join) or \
                group.awaiting_join_count() < self.max_group_size
        return group.has(member_id) or len(group.members) < self.max_group_size

    async def _join_unknown_member(self, group: ClassicGroup, instance_id: str | None, protocol_type: str,
                                   protocols: list[tuple[str, bytes]], session_timeout_ms: int,
                                   rebalance_timeout_ms: int, client_id: str, client_host: str,
                                   require_known_member_id: bool, supports_skip: bool,
                                   reason: str | None) -> JoinResult:
        if group.is_in(S.DEAD):
            return JoinResult(error=E.COORDINATOR_NOT_AVAILABLE, member_id="")
        if not group.supports_protocols(protocol_type, [n for n, _ in protocols]):
            return JoinResult(error=E.INCONSISTENT_GROUP_PROTOCOL, member_id="")
        new_id = group.generate_member_id(client_id, instance_id)
        if instance_id is not None:
            old_id = group.static_member_id(instance_id)
            if old_id is not None:
                return await self._update_static_member_and_rebalance(
                    group, old_id, new_id, instance_id, protocols, session_timeout_ms, rebalance_timeout_ms,
                    supports_skip, reason)
        elif require_known_member_id:
            # KIP-394: hand out the member id first, so a client that times out and retries
            # does not leave defunct members behind.
            group.pending_members.add(new_id)
            self._schedule_pending_member(group, new_id, session_timeout_ms)
            return JoinResult(error=E.MEMBER_ID_REQUIRED, member_id=new_id)
        member = ClassicMember(
            member_id=new_id, group_instance_id=instance_id, client_id=client_id, client_host=client_host,
            rebalance_timeout_ms=rebalance_timeout_ms, session_timeout_ms=session_timeout_ms,
            protocol_type=protocol_type, protocols=[(n, bytes(m)) for n, m in protocols],
            supports_skip_assignment=supports_skip)
        return await self._add_member_and_rebalance(group, member, reason)

    async def _add_member_and_rebalance(self, group: ClassicGroup, member: ClassicMember,
                                        reason: str | None) -> JoinResult:
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_future = future
        member.is_new = True
        if group.is_in(S.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        self._cancel(group.pending_timers.pop(member.member_id, None))
        group.add(member)
        # A new member cannot heartbeat yet, and its socket is parked in the join: bound the wait.
        self._schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"adding new member {member.member_id}"
                                             f"{' with group instance id ' + member.group_instance_id if member.group_instance_id else ''}"
                                             f"; client reason: {reason}")
        self._check_join_complete(group)
        return await future

    async def _update_member_and_rebalance(self, group: ClassicGroup, member: ClassicMember,
                                           protocols: list[tuple[str, bytes]], session_timeout_ms: int,
                                           rebalance_timeout_ms: int, reason: str) -> JoinResult:
        if member.awaiting_join:
            assert member.join_future is not None
            member.join_future.set_result(JoinResult(error=E.REBALANCE_IN_PROGRESS, member_id=member.member_id))
        member.protocols = [(n, bytes(m)) for n, m in protocols]
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_future = future
        self._maybe_prepare_rebalance(group, reason)
        self._check_join_complete(group)
        return await future

    def _current_generation_result(self, group: ClassicGroup, member: ClassicMember, *,
                                   include_members: bool) -> JoinResult:
        return JoinResult(
            error=E.NONE, member_id=member.member_id, generation_id=group.generation_id,
            protocol_type=group.protocol_type, protocol_name=group.protocol_name, leader_id=group.leader_id or "",
            members=group.current_member_metadata() if include_members else [])

    async def _join_known_member(self, group: ClassicGroup, member_id: str, instance_id: str | None,
                                 protocol_type: str, protocols: list[tuple[str, bytes]], session_timeout_ms: int,
                                 rebalance_timeout_ms: int, client_id: str, client_host: str, supports_skip: bool,
                                 reason: str | None) -> JoinResult:
        if group.is_in(S.DEAD):
            return JoinResult(error=E.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        if not group.supports_protocols(protocol_type, [n for n, _ in protocols]):
            return JoinResult(error=E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        if member_id in group.pending_members:
            pending = ClassicMember(
                member_id=member_id, group_instance_id=instance_id, client_id=client_id, client_host=client_host,
                rebalance_timeout_ms=rebalance_timeout_ms, session_timeout_ms=session_timeout_ms,
                protocol_type=protocol_type, protocols=[(n, bytes(m)) for n, m in protocols],
                supports_skip_assignment=supports_skip)
            return await self._add_member_and_rebalance(group, pending, reason)
        if group.is_static_member_fenced(instance_id, member_id):
            return JoinResult(error=E.FENCED_INSTANCE_ID, member_id=member_id)
        if not group.has(member_id) or (instance_id is not None and group.static_member_id(instance_id) is None):
            return JoinResult(error=E.UNKNOWN_MEMBER_ID, member_id=member_id)
        member = group.get(member_id)
        why = f"updating metadata for member {member_id} during {group.state.value}; client reason: {reason}"
        if group.is_in(S.PREPARING_REBALANCE):
            return await self._update_member_and_rebalance(group, member, protocols, session_timeout_ms,
                                                           rebalance_timeout_ms, why)
        if group.is_in(S.COMPLETING_REBALANCE):
            if member.matches(protocols):
                # The member missed the join response (e.g. it timed out): send it again.
                return self._current_generation_result(group, member, include_members=group.is_leader(member_id))
            return await self._update_member_and_rebalance(group, member, protocols, session_timeout_ms,
                                                           rebalance_timeout_ms, why)
        if group.is_in(S.STABLE):
            if group.is_leader(member_id) or not member.matches(protocols):
                # A leader rejoining in Stable wants a fresh assignment (e.g. metadata changed).
                return await self._update_member_and_rebalance(
                    group, member, protocols, session_timeout_ms, rebalance_timeout_ms,
                    f"leader {member_id} re-joining group during Stable; client reason: {reason}"
                    if group.is_leader(member_id) else why)
            self._schedule_heartbeat(group, member)
            return self._current_generation_result(group, member, include_members=False)
        return JoinResult(error=E.UNKNOWN_MEMBER_ID, member_id=member_id)  # Empty

    async def _update_static_member_and_rebalance(self, group: ClassicGroup, old_id: str, new_id: str,
                                                  instance_id: str, protocols: list[tuple[str, bytes]],
                                                  session_timeout_ms: int, rebalance_timeout_ms: int,
                                                  supports_skip: bool, reason: str | None) -> JoinResult:
        """A static member restarted (same group.instance.id, no member id): it takes over its old
        seat under a new member id; the old id is fenced. In Stable, with an unchanged protocol,
        no rebalance happens and the member gets the current generation back."""
        current_leader = group.leader_id
        old = group.get(old_id)
        old_protocols, old_session, old_rebalance = old.protocols, old.session_timeout_ms, old.rebalance_timeout_ms
        for fut_attr, result in (("join_future", JoinResult(error=E.FENCED_INSTANCE_ID, member_id=old_id)),
                                 ("sync_future", SyncResult(error=E.FENCED_INSTANCE_ID))):
            fut = getattr(old, fut_attr)
            if fut is not None and not fut.done():
                fut.set_result(result)
            setattr(old, fut_attr, None)
        member = group.replace_static_member(instance_id, old_id, new_id)
        member.protocols = [(n, bytes(m)) for n, m in protocols]
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.supports_skip_assignment = supports_skip
        self._schedule_heartbeat(group, member)
        why = f"updating metadata for static member {new_id} with instance id {instance_id}; client reason: {reason}"
        if group.is_in(S.STABLE):
            if group.select_protocol() == group.protocol_name:
                log.info("static member %s of group %s rejoined in Stable; no rebalance", instance_id,
                         group.group_id)
                err = await self._store_group(group)
                if err:
                    if group.members.get(new_id) is member:
                        group.replace_static_member(instance_id, new_id, old_id)
                        member.protocols, member.session_timeout_ms = old_protocols, old_session
                        member.rebalance_timeout_ms = old_rebalance
                    return JoinResult(error=E.UNKNOWN_MEMBER_ID, member_id="")
                # The old leader id is returned on purpose: a restarted leader must not compute
                # an assignment that a Stable group would never hand out.
                return JoinResult(
                    error=E.NONE, member_id=new_id, generation_id=group.generation_id,
                    protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                    leader_id=current_leader or "", skip_assignment=supports_skip,
                    members=group.current_member_metadata() if supports_skip and current_leader == old_id else [])
            future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
            member.join_future = future
            self._prepare_rebalance(group, why + " (protocol changes)")
            self._check_join_complete(group)
            return await future
        future = asyncio.get_running_loop().create_future()
        member.join_future = future
        if group.is_in(S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, why)
        self._check_join_complete(group)
        return await future

    # --- SyncGroup -------------------------------------------------------------------------------

    async def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                         protocol_type: str | None, protocol_name: str | None,
                         assignments: dict[str, bytes]) -> SyncResult:
        if not group_id:
            return SyncResult(error=E.INVALID_GROUP_ID)
        err = self._coordinator_error(group_id)
        if err:
            return SyncResult(error=err)
        group = self.groups.get(group_id)
        if group is None or not isinstance(group, ClassicGroup):
            return SyncResult(error=E.UNKNOWN_MEMBER_ID)
        if group.is_in(S.DEAD):
            return SyncResult(error=E.COORDINATOR_NOT_AVAILABLE)
        if group.is_static_member_fenced(group_instance_id, member_id):
            return SyncResult(error=E.FENCED_INSTANCE_ID)
        if not group.has(member_id):
            return SyncResult(error=E.UNKNOWN_MEMBER_ID)
        if generation_id != group.generation_id:
            return SyncResult(error=E.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            return SyncResult(error=E.INCONSISTENT_GROUP_PROTOCOL)
        member = group.get(member_id)
        if group.is_in(S.EMPTY):
            return SyncResult(error=E.UNKNOWN_MEMBER_ID)
        if group.is_in(S.PREPARING_REBALANCE):
            return SyncResult(error=E.REBALANCE_IN_PROGRESS)
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._cancel(group.sync_timer)
            group.sync_timer = None
        if group.is_in(S.STABLE):
            self._schedule_heartbeat(group, member)
            return SyncResult(error=E.NONE, protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                              assignment=member.assignment)
        # CompletingRebalance: wait for the leader's assignment.
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        if member.awaiting_sync:
            assert member.sync_future is not None
            member.sync_future.set_result(SyncResult(error=E.REBALANCE_IN_PROGRESS))
        member.sync_future = future
        if group.is_leader(member_id):
            full = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}
            generation = group.generation_id
            err = await self._store_group(group, full)
            if group.is_in(S.COMPLETING_REBALANCE) and group.generation_id == generation:
                if err:
                    self._reset_and_propagate(group, err)
                    self._prepare_rebalance(group, f"failed to persist group assignment: {ErrorCode(err).name}")
                else:
                    for mid, data in full.items():
                        if mid in group.members:
                            group.members[mid].assignment = data
                    self._propagate_assignment(group, E.NONE)
                    group.transition_to(S.STABLE, self._now())
                    log.info("assignment received from leader %s for group %s generation %d", member_id, group_id,
                             generation)
        return await future

    # --- Heartbeat ---------------------------------------------------------------------------------

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> int:
        if not group_id:
            return E.INVALID_GROUP_ID
        err = self._coordinator_error(group_id)
        if err:
            return err
        group = self.groups.get(group_id)
        if group is None or not isinstance(group, ClassicGroup):
            return E.UNKNOWN_MEMBER_ID
        if group.is_in(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if group.is_static_member_fenced(group_instance_id, member_id):
            return E.FENCED_INSTANCE_ID
        if not group.has(member_id):
            return E.UNKNOWN_MEMBER_ID
        if group.is_in(S.EMPTY):
            return E.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        self._schedule_heartbeat(group, group.get(member_id))
        return E.REBALANCE_IN_PROGRESS if group.is_in(S.PREPARING_REBALANCE) else E.NONE

    # --- LeaveGroup --------------------------------------------------------------------------------

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]],
                    reason: str | None = None) -> tuple[int, list[int]]:
        """(top-level error, one error per (member id, group instance id))."""
        if not group_id:
            return E.INVALID_GROUP_ID, []
        err = self._coordinator_error(group_id)
        if err:
            return err, []
        group = self.groups.get(group_id)
        if group is None or not isinstance(group, ClassicGroup):
            return E.NONE, [E.UNKNOWN_MEMBER_ID] * len(members)
        if group.is_in(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE, []
        out = []
        for member_id, instance_id in members:
            if not member_id and instance_id is not None:
                member_id = group.static_member_id(instance_id) or ""
                if not member_id:
                    out.append(E.UNKNOWN_MEMBER_ID)
                    continue
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                self._cancel(group.pending_timers.pop(member_id, None))
                if group.is_in(S.PREPARING_REBALANCE):
                    self._check_join_complete(group)
                out.append(E.NONE)
            elif group.is_static_member_fenced(instance_id, member_id):
                out.append(E.FENCED_INSTANCE_ID)
            elif not group.has(member_id):
                out.append(E.UNKNOWN_MEMBER_ID)
            else:
                log.info("member %s has left group %s (reason: %s)", member_id, group_id, reason)
                self._remove_member_and_update_group(group, group.get(member_id), f"leave group; client reason: {reason}")
                out.append(E.NONE)
        return E.NONE, out
