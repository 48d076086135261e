"""The durable state of one share-partition as the share coordinator keeps it (Kafka's
ShareGroupOffset), and how writes combine into it (Kafka's PersisterStateBatchCombiner), as pure
logic.

A state is the share-partition start offset, the state epoch (bumped when the group coordinator
initializes or resets it), the leader epoch of the last partition leader that read or wrote it,
and state batches: (first offset, last offset, delivery state 0 available / 2 acknowledged /
4 archived, delivery count) for offsets at or above the start offset whose outcome is known. A
write brings the batches that changed; they replace what the state had for those offsets, and
everything below the (possibly new) start offset is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

Batch = tuple[int, int, int, int]  # first offset, last offset, delivery state, delivery count

UNINITIALIZED_START_OFFSET = -1
DEFAULT_STATE_EPOCH = 0
DEFAULT_LEADER_EPOCH = -1


@dataclass(slots=True)
class ShareState:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    batches: list[Batch] = field(default_factory=list)
    updates_since_snapshot: int = 0  # ShareUpdate records since the last ShareSnapshot
    snapshot_offset: int = -1  # where the last ShareSnapshot record of this key is in the log


def combine(current: Iterable[Batch], new: Iterable[Batch], start_offset: int) -> list[Batch]:
    """``new`` overrides ``current`` where they overlap; nothing below ``start_offset`` is kept;
    adjacent batches with the same state and delivery count are merged. Batches of ``new`` that
    overlap each other: the later one wins (a write carries disjoint batches)."""
    cells: list[Batch] = []
    for layer in (list(current), list(new)):
        for b in layer:
            first, last = max(b[0], start_offset), b[1]
            if last < first:
                continue
            cells = _overlay(cells, (first, last, b[2], b[3]))
    return _merge(cells)


def _overlay(cells: list[Batch], b: Batch) -> list[Batch]:
    first, last = b[0], b[1]
    out: list[Batch] = []
    placed = False
    for c in cells:
        if c[1] < first:
            out.append(c)
            continue
        if c[0] > last:
            if not placed:
                out.append(b)
                placed = True
            out.append(c)
            continue
        # Overlap: keep the parts of c outside [first, last].
        if c[0] < first:
            out.append((c[0], first - 1, c[2], c[3]))
        if not placed:
            out.append(b)
            placed = True
        if c[1] > last:
            out.append((last + 1, c[1], c[2], c[3]))
    if not placed:
        out.append(b)
    return out


def _merge(cells: list[Batch]) -> list[Batch]:
    out: list[Batch] = []
    for c in cells:
        if out and out[-1][1] + 1 == c[0] and out[-1][2:] == c[2:]:
            out[-1] = (out[-1][0], c[1], c[2], c[3])
        else:
            out.append(c)
    return out
