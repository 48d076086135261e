"""Classic-protocol group state: members, generation, protocol selection and the state machine.

Pure data and rules, no I/O and no timers (the GroupCoordinator owns those): Kafka's states
Empty → PreparingRebalance → CompletingRebalance → Stable (→ Dead), the legal transitions
between them, member bookkeeping (static members by group.instance.id, members that got a
MEMBER_ID_REQUIRED and have not joined yet, members still owing a SyncGroup), leader choice
and the vote that picks the group protocol.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from storage.internal_records import decode_subscription

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# state -> states it may be entered from (Kafka's validPreviousStates)
_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.DEAD: frozenset(GroupState),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}


class IllegalStateTransition(RuntimeError):
    pass


@dataclass(slots=True)
class JoinResult:
    """What a parked JoinGroup answers with."""

    error: int
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)  # (id, instance id, metadata)


@dataclass(slots=True)
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(slots=True, eq=False)
class ClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # in the member's order of preference
    assignment: bytes = b""
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[SyncResult] | None = None
    is_new: bool = False  # joined during the current rebalance, has no generation yet
    supports_skip_assignment: bool = False  # JoinGroup v9+
    heartbeat_timer: Any = None
    last_heartbeat_ms: int = 0

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None and not self.join_future.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_future is not None and not self.sync_future.done()

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    def vote(self, candidates: set[str]) -> str:
        for name in self.protocol_names():
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


class ClassicGroup:
    """A group using the classic (JoinGroup/SyncGroup) protocol, or a bare offsets holder."""

    group_type = "classic"

    def __init__(self, group_id: str, now_ms: int, state: GroupState = GroupState.EMPTY) -> None:
        self.group_id = group_id
        self.state = state
        self.state_timestamp_ms = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, ClassicMember] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: set[str] = set()  # got MEMBER_ID_REQUIRED, not joined yet
        self.pending_sync: set[str] = set()  # owe a SyncGroup for the current generation
        self.new_member_added = False
        self.join_timer: Any = None
        self.initial_join = False  # the pending join is Kafka's InitialDelayedJoin (never completes early)
        self.sync_timer: Any = None
        self.pending_timers: dict[str, Any] = {}  # timers of pending members

    # --- state ---------------------------------------------------------------------------------

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalStateTransition(
                f"group {self.group_id} should be in one of {sorted(s.value for s in _VALID_PREVIOUS[state])} "
                f"before moving to {state.value}, but is {self.state.value}")
        self.state = state
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY)

    @property
    def is_empty(self) -> bool:
        return not self.members

    # --- members -------------------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> ClassicMember:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def is_static_member_fenced(self, instance_id: str | None, member_id: str) -> bool:
        """A known instance id presented with a member id that is no longer its own."""
        known = self.static_member_id(instance_id)
        return known is not None and known != member_id

    def add(self, member: ClassicMember) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> ClassicMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            # Prefer a member that already rejoined, so a rebalance in progress keeps a leader.
            pool = [m for m in self.members.values() if m.awaiting_join] or list(self.members.values())
            self.leader_id = pool[0].member_id if pool else None
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> ClassicMember:
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    def generate_member_id(self, client_id: str, instance_id: str | None) -> str:
        return f"{instance_id if instance_id is not None else client_id}-{uuid.uuid4()}"

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join)

    def not_yet_rejoined(self) -> list[ClassicMember]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # --- protocols -----------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        sets = [set(m.protocol_names()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports_protocols(self, protocol_type: str, protocols: list[str]) -> bool:
        if self.is_empty:
            return bool(protocol_type) and bool(protocols)
        return protocol_type == self.protocol_type and bool(set(protocols) & self.candidate_protocols())

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol among those all members support;
        the most voted wins (ties go to the earliest member's preference, deterministically)."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"no protocol is supported by every member of group {self.group_id}")
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        for m in self.members.values():
            for name in m.protocol_names():
                if votes.get(name) == best:
                    return name
        raise AssertionError("unreachable")

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name)) for m in self.members.values()]

    def subscribed_topics(self) -> set[str] | None:
        """Topics the consumer-protocol members subscribe to; None when unknown (another protocol
        type, or a subscription that does not decode)."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            try:
                topics.update(decode_subscription(m.metadata(self.protocol_name))["topics"] or [])
            except (KeyError, ValueError, UnicodeDecodeError):
                return None
        return topics

    # --- persistence ---------------------------------------------------------------------------

    def to_record(self, assignments: dict[str, bytes] | None = None) -> dict[str, Any]:
        """The GroupMetadataValue fields for this group (assignments override the members')."""
        members = []
        for m in self.members.values():
            members.append({
                "memberId": m.member_id, "groupInstanceId": m.group_instance_id, "clientId": m.client_id,
                "clientHost": m.client_host, "rebalanceTimeout": m.rebalance_timeout_ms,
                "sessionTimeout": m.session_timeout_ms,
                "subscription": m.metadata(self.protocol_name) if self.protocol_name is not None else b"",
                "assignment": (assignments or {}).get(m.member_id, m.assignment),
            })
        return {"protocolType": self.protocol_type or "", "generation": self.generation_id,
                "protocol": self.protocol_name, "leader": self.leader_id,
                "currentStateTimestamp": self.state_timestamp_ms, "members": members}

    @classmethod
    def from_record(cls, group_id: str, value: dict[str, Any], now_ms: int) -> ClassicGroup:
        members = value.get("members") or []
        g = cls(group_id, now_ms, GroupState.STABLE if members else GroupState.EMPTY)
        ts = value.get("currentStateTimestamp", -1)
        g.state_timestamp_ms = ts if ts is not None and ts >= 0 else now_ms
        g.generation_id = value["generation"]
        g.protocol_type = value["protocolType"] or None
        g.protocol_name = value.get("protocol")
        for mv in members:
            m = ClassicMember(
                member_id=mv["memberId"], group_instance_id=mv.get("groupInstanceId"), client_id=mv["clientId"],
                client_host=mv["clientHost"], rebalance_timeout_ms=mv.get("rebalanceTimeout", mv["sessionTimeout"]),
                session_timeout_ms=mv["sessionTimeout"], protocol_type=g.protocol_type or "",
                protocols=[(g.protocol_name or "", mv["subscription"] or b"")], assignment=mv["assignment"] or b"",
                last_heartbeat_ms=now_ms)
            g.members[m.member_id] = m
            if m.group_instance_id is not None:
                g.static_members[m.group_instance_id] = m.member_id
        g.leader_id = value.get("leader") if members else None
        return g
