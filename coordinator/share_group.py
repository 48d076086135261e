"""A KIP-932 share group as the group coordinator holds it, and Kafka's share assignor.

A share group (group type ``share``) has members that heartbeat with ShareGroupHeartbeat; the
coordinator assigns them partitions of their subscribed topics with the ``simple`` assignor, where
a partition may go to several members (its records are shared, each acquired by one at a time),
so there is no revocation step: a member takes its target assignment on its next heartbeat.

Only *initialized* share-partitions are assigned: the share coordinator must hold a state for
(group, topic, partition) first. The group tracks that as Kafka's ShareGroupStatePartitionMetadata:
topics being initialized (with when the attempt started, to retry a stale one), initialized, and
being deleted (DeleteShareGroupOffsets / DeleteGroups in flight).

``assign`` is the simple assignor (Kafka's SimpleAssignor, same rules, own code): each partition
goes to ceil(subscribers / partitions) members, members get balanced counts (within one), and a
member keeps what it had where balance allows (stickiness).
"""

from __future__ import annotations

import hashlib
import math
import struct
import uuid
from dataclasses import dataclass, field
from typing import Any

TopicAssignment = dict[uuid.UUID, frozenset[int]]

PROTOCOL_TYPE = "share"
ASSIGNOR_NAME = "simple"
JOIN_EPOCH = 0
LEAVE_EPOCH = -1


@dataclass(frozen=True, slots=True)
class InitTopic:
    """A topic in ShareGroupStatePartitionMetadata: its name, partitions and (initializing only)
    when their initialization was asked (milliseconds; 0 after a replay: retried at once)."""

    name: str
    partitions: frozenset[int]
    timestamp: int = 0


@dataclass(slots=True, eq=False)
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = 0  # Kafka's MemberState: share members are always STABLE (0)
    assigned: TopicAssignment = field(default_factory=dict)
    session_timer: Any = None


class ShareGroup:
    group_type = "share"
    protocol_type = PROTOCOL_TYPE

    def __init__(self, group_id: str, now_ms: int) -> None:
        self.group_id = group_id
        self.state_timestamp_ms = now_ms
        self.group_epoch = 0
        self.metadata_hash = 0
        self.assignment_epoch = 0
        self.members: dict[str, ShareMember] = {}
        self.target: dict[str, TopicAssignment] = {}
        self.initializing: dict[uuid.UUID, InitTopic] = {}
        self.initialized: dict[uuid.UUID, InitTopic] = {}
        self.deleting: dict[uuid.UUID, str] = {}
        # The group's records as last written to (or replayed from) __consumer_offsets
        # (coordinator/share_records.image): a change is the difference.
        self.persisted: dict[tuple[int, str], tuple[Any, ...]] = {}

    @property
    def is_empty(self) -> bool:
        return not self.members

    @property
    def state_name(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed_topic_names(self) -> set[str]:
        out: set[str] = set()
        for m in self.members.values():
            out.update(m.subscribed_topic_names)
        return out

    def initialized_partitions(self) -> dict[uuid.UUID, frozenset[int]]:
        return {tid: t.partitions for tid, t in self.initialized.items()}

    def known_partitions(self) -> dict[uuid.UUID, set[int]]:
        """Every share-partition the share coordinator may hold state for (initialized, being
        initialized): what a deletion of the group's state must cover."""
        out: dict[uuid.UUID, set[int]] = {}
        for source in (self.initialized, self.initializing):
            for tid, t in source.items():
                out.setdefault(tid, set()).update(t.partitions)
        return out


def metadata_hash(topics: dict[str, tuple[uuid.UUID, int]]) -> int:
    """A 64-bit digest of the subscribed topics (name, id, partition count): it changes when a
    subscribed topic appears, goes or grows. Kafka hashes the same facts (plus racks) with its own
    function; only changes of the value matter."""
    h = hashlib.blake2b(digest_size=8)
    for name in sorted(topics):
        tid, n = topics[name]
        h.update(name.encode() + b"\0" + tid.bytes + struct.pack(">i", n))
    return struct.unpack(">q", h.digest())[0] if topics else 0


def assign(members: dict[str, frozenset[uuid.UUID]], partitions: dict[uuid.UUID, frozenset[int]],
           previous: dict[str, TopicAssignment]) -> dict[str, TopicAssignment]:
    """The simple share assignor. ``members``: member id -> subscribed topic ids; ``partitions``:
    the assignable (initialized) partitions per topic id; ``previous``: the last target."""
    order = sorted(members)
    subscribers: dict[uuid.UUID, list[str]] = {}
    for mid in order:
        for tid in members[mid]:
            if partitions.get(tid):
                subscribers.setdefault(tid, []).append(mid)
    sharing = {tid: math.ceil(len(subs) / len(partitions[tid])) for tid, subs in subscribers.items()}
    # A member's fair share of the slots of the topics it subscribes to, rounded so that the
    # quotas add up to the slots (the extra ones to members holding the most already: stickiness).
    shares = {mid: sum(len(partitions[tid]) * sharing[tid] / len(subscribers[tid])
                       for tid in members[mid] if tid in subscribers) for mid in order}
    quota = {mid: math.floor(share + 1e-9) for mid, share in shares.items()}
    spare = round(sum(shares.values())) - sum(quota.values())
    had = {mid: sum(len(ps) for ps in previous.get(mid, {}).values()) for mid in order}
    for mid in sorted(order, key=lambda m: (-(shares[m] - quota[m]), -had[m], order.index(m)))[:max(spare, 0)]:
        quota[mid] += 1
    holders: dict[tuple[uuid.UUID, int], list[str]] = {
        (tid, p): [] for tid in subscribers for p in sorted(partitions[tid])}
    load = dict.fromkeys(order, 0)
    # 1. Stickiness: keep what each member had, within its quota and each partition's sharing.
    for mid in order:
        for tid, ps in sorted(previous.get(mid, {}).items(), key=lambda kv: str(kv[0])):
            if tid not in subscribers or mid not in subscribers[tid]:
                continue
            for p in sorted(ps):
                key = (tid, p)
                if key in holders and len(holders[key]) < sharing[tid] and load[mid] < quota[mid]:
                    holders[key].append(mid)
                    load[mid] += 1
    # 2. Fill every partition up to its sharing with the least loaded subscribers.
    for (tid, _p), held in holders.items():
        while len(held) < sharing[tid]:
            candidates = [m for m in subscribers[tid] if m not in held]
            if not candidates:
                break
            pick = min(candidates, key=lambda m: (load[m], order.index(m)))
            held.append(pick)
            load[pick] += 1
    out: dict[str, dict[uuid.UUID, set[int]]] = {mid: {} for mid in order}
    for (tid, p), held in holders.items():
        for mid in held:
            out[mid].setdefault(tid, set()).add(p)
    return {mid: {tid: frozenset(ps) for tid, ps in a.items()} for mid, a in out.items()}
