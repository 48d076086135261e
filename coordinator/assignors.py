"""Server-side partition assignors for KIP-848 consumer groups: "uniform" and "range".

Both map members (with their subscribed topics) and topic metadata to a target assignment
{member id: {topic id: partitions}}. ``uniform`` balances the partitions of all subscribed
topics so member counts differ by at most one among members that could take them, and keeps a
partition with its current owner whenever balance allows (fewer revocations). ``range`` gives
each member a contiguous range of every topic it subscribes to (members ordered by id), the
first ``partitions % members`` members one extra, so equally partitioned topics stay
co-partitioned.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

Assignment = dict[str, dict[uuid.UUID, set[int]]]


@dataclass(slots=True)
class MemberSpec:
    member_id: str
    subscribed: set[uuid.UUID]  # topic ids the member subscribes to (existing topics only)
    current: dict[uuid.UUID, set[int]] = field(default_factory=dict)  # for stickiness


class UnsupportedAssignor(ValueError):
    pass


def _empty(members: list[MemberSpec]) -> Assignment:
    return {m.member_id: {} for m in members}


def uniform(members: list[MemberSpec], partitions: dict[uuid.UUID, int]) -> Assignment:
    out = _empty(members)
    if not members:
        return out
    counts = {m.member_id: 0 for m in members}
    eligible: dict[tuple[uuid.UUID, int], list[str]] = {}
    for tid, n in partitions.items():
        subs = sorted(m.member_id for m in members if tid in m.subscribed)
        if subs:
            for p in range(n):
                eligible[(tid, p)] = subs
    owner: dict[tuple[uuid.UUID, int], str] = {}
    # Stickiness first: partitions stay with a current owner that still subscribes.
    for m in sorted(members, key=lambda m: m.member_id):
        for tid, parts in m.current.items():
            for p in sorted(parts):
                tp = (tid, p)
                if tp in eligible and tp not in owner and m.member_id in eligible[tp]:
                    owner[tp] = m.member_id
                    counts[m.member_id] += 1
    # Unowned partitions go to the least loaded eligible member (most constrained first).
    for tp in sorted((tp for tp in eligible if tp not in owner), key=lambda tp: (len(eligible[tp]), str(tp[0]), tp[1])):
        best = min(eligible[tp], key=lambda mid: (counts[mid], mid))
        owner[tp] = best
        counts[best] += 1
    # Balance: move a partition from a member to an eligible one with >= 2 fewer, until none can
    # move (the sum of squared counts strictly falls, so this ends).
    moved = True
    while moved:
        moved = False
        for tp in sorted(owner, key=lambda tp: (str(tp[0]), tp[1]), reverse=True):
            a = owner[tp]
            b = min(eligible[tp], key=lambda mid: (counts[mid], mid))
            if counts[a] - counts[b] >= 2:
                owner[tp] = b
                counts[a] -= 1
                counts[b] += 1
                moved = True
    for (tid, p), mid in owner.items():
        out[mid].setdefault(tid, set()).add(p)
    return out


def range_(members: list[MemberSpec], partitions: dict[uuid.UUID, int]) -> Assignment:
    out = _empty(members)
    for tid, n in partitions.items():
        subs = sorted(m.member_id for m in members if tid in m.subscribed)
        if not subs:
            continue
        per, extra = divmod(n, len(subs))
        start = 0
        for i, mid in enumerate(subs):
            size = per + (1 if i < extra else 0)
            if size:
                out[mid][tid] = set(range(start, start + size))
            start += size
    return out


ASSIGNORS = {"uniform": uniform, "range": range_}


def assign(name: str, members: list[MemberSpec], partitions: dict[uuid.UUID, int]) -> Assignment:
    fn = ASSIGNORS.get(name)
    if fn is None:
        raise UnsupportedAssignor(name)
    return fn(members, partitions)
