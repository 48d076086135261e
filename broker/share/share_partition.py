"""The in-flight window of one share-partition (KIP-932, Kafka's SharePartition), as pure logic.

A share-partition is one topic-partition as consumed by one share group. Its window runs from the
share-partition start offset (SPSO) to the end offset (SPEO, the next offset never fetched): every
offset in it is in one of Kafka's record states, AVAILABLE (0), ACQUIRED (1), ACKNOWLEDGED (2) or
ARCHIVED (4), with a delivery count; ACQUIRED records belong to one member and carry the deadline
of their acquisition lock. Offsets below the SPSO are done (acknowledged or archived), offsets at
or above the SPEO were never delivered.

The window is a sorted list of runs (contiguous offsets with the same state, delivery count, owner
and lock deadline) that covers [SPSO, SPEO) without holes; a run is split where an operation
touches part of it and merged back with equal neighbours. Kafka keeps its cache per fetched batch
with optional per-offset state; the states, transitions and errors are the same:

- acquire: AVAILABLE -> ACQUIRED (delivery count + 1), for runs inside the window that the fetched
  batches cover, and new runs past the SPEO for fresh records (at most
  ``max_in_flight - (SPEO - SPSO)`` of them, cut at batch boundaries: MaxRecords is a soft limit),
  split into acquired ranges of ``batch_size`` records at batch boundaries;
- acknowledge (ACCEPT -> ACKNOWLEDGED, RELEASE -> AVAILABLE, REJECT and GAP -> ARCHIVED): only
  records the member holds; a RELEASE of a record delivered ``max_delivery_count`` times archives
  it. An acknowledgement is all or nothing for a partition: offsets past the SPEO answer
  INVALID_REQUEST, offsets in the window not acquired by the member INVALID_RECORD_STATE, and then
  nothing changes. Offsets below the SPSO are skipped (already done);
- a release of a member's records (its share session ended) is a RELEASE of all it holds;
- an expired lock makes the records AVAILABLE again (ARCHIVED at the delivery limit).

Acknowledgements and releases are *transitions*: the new states are visible at once (a pending
record is neither acquired nor acknowledged again) and the manager persists them through the share
coordinator, then commits them (``complete(ok=True)``) or rolls them back (``ok=False``: back to
ACQUIRED by the member, or to AVAILABLE / ARCHIVED if the lock expired meanwhile). The SPSO moves
only over committed ACKNOWLEDGED / ARCHIVED records. Lock expiry is applied at once (as Kafka), and
its new states are persisted afterwards. Times are passed in (milliseconds), so the logic runs in
unit tests without a clock.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from protocol.errors import ErrorCode


class RecordState(IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


_ACK_STATE = {AckType.GAP: RecordState.ARCHIVED, AckType.ACCEPT: RecordState.ACKNOWLEDGED,
              AckType.RELEASE: RecordState.AVAILABLE, AckType.REJECT: RecordState.ARCHIVED}
_DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
NO_MEMBER = ""
NO_DEADLINE = -1


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A persisted range (Kafka's PersisterStateBatch): what Write/ReadShareGroupState carry."""

    first_offset: int
    last_offset: int
    state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class Acquired:
    """One AcquiredRecords entry of a ShareFetch answer."""

    first_offset: int
    last_offset: int
    delivery_count: int


class AckError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _Run:
    __slots__ = ("first", "last", "state", "count", "member", "deadline", "prev")

    def __init__(self, first: int, last: int, state: RecordState, count: int, member: str = NO_MEMBER,
                 deadline: int = NO_DEADLINE) -> None:
        self.first, self.last, self.state, self.count = first, last, state, count
        self.member, self.deadline = member, deadline
        # While a transition is persisted: (state, member, deadline) before it; None otherwise.
        self.prev: tuple[RecordState, str, int] | None = None

    def same_as(self, other: _Run) -> bool:
        return (self.prev is None and other.prev is None and self.state == other.state and self.count == other.count
                and self.member == other.member and self.deadline == other.deadline)

    def copy(self, first: int, last: int) -> _Run:
        r = _Run(first, last, self.state, self.count, self.member, self.deadline)
        r.prev = self.prev
        return r

    def __repr__(self) -> str:
        pending = "*" if self.prev is not None else ""
        return f"{self.first}-{self.last}:{self.state.name}{pending}/{self.count}"


@dataclass(slots=True)
class Transition:
    """Pending changes of one acknowledgement or release: the runs to commit or roll back, and the
    state batches to persist."""

    runs: list[_Run] = field(default_factory=list)
    batches: list[StateBatch] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.runs)


class SharePartition:
    def __init__(self, start_offset: int, batches: Iterable[StateBatch] = (), *, max_in_flight: int = 2000,
                 max_delivery_count: int = 5) -> None:
        """The window as read from the share coordinator: ``batches`` at or above ``start_offset``.
        Offsets between them were delivered (or fetched) but their outcome was not persisted:
        they are AVAILABLE again, with delivery count 0."""
        self.max_in_flight = max_in_flight
        self.max_delivery_count = max_delivery_count
        self.start_offset = start_offset
        self._runs: list[_Run] = []
        cursor = start_offset
        for b in sorted(batches, key=lambda b: b.first_offset):
            first = max(b.first_offset, cursor)
            if b.last_offset < first:
                continue
            if first > cursor:
                self._runs.append(_Run(cursor, first - 1, RecordState.AVAILABLE, 0))
            state = RecordState(b.state) if b.state in (0, 2, 4) else RecordState.AVAILABLE
            self._runs.append(_Run(first, b.last_offset, state, b.delivery_count))
            cursor = b.last_offset + 1
        self.end_offset = cursor
        self._coalesce(0, len(self._runs))
        self._advance_start()

    # --- views ---------------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Records in the window (what group.share.partition.max.record.locks bounds)."""
        return self.end_offset - self.start_offset

    def acquired_count(self) -> int:
        return sum(r.last - r.first + 1 for r in self._runs if r.state == RecordState.ACQUIRED and r.prev is None)

    def state_counts(self) -> dict[RecordState, int]:
        """Records of the window per state (pending transitions count in their new state)."""
        out = dict.fromkeys(RecordState, 0)
        for r in self._runs:
            out[r.state] += r.last - r.first + 1
        return out

    def runs(self) -> list[tuple[int, int, RecordState, int, str, bool]]:
        """(first, last, state, delivery count, member, pending) of every run, for tests and describe."""
        return [(r.first, r.last, r.state, r.count, r.member, r.prev is not None) for r in self._runs]

    def state_batches(self) -> list[StateBatch]:
        """The whole window as it would be persisted (ACQUIRED records as AVAILABLE)."""
        out = []
        for r in self._runs:
            state = r.state if r.state != RecordState.ACQUIRED else RecordState.AVAILABLE
            out.append(StateBatch(r.first, r.last, int(state), r.count))
        return out

    def next_fetch_offset(self) -> int:
        """Where the next fetch reads: the first AVAILABLE record in the window, else the SPEO."""
        for r in self._runs:
            if r.state == RecordState.AVAILABLE and r.prev is None:
                return r.first
        return self.end_offset

    def can_acquire(self) -> bool:
        """Records could be acquired now: some in the window are AVAILABLE, or there is room for new ones."""
        return self.next_fetch_offset() < self.end_offset or self.in_flight < self.max_in_flight

    def next_deadline(self) -> int | None:
        deadlines = [r.deadline for r in self._runs if r.state == RecordState.ACQUIRED and r.prev is None]
        return min(deadlines) if deadlines else None

    # --- run list helpers ----------------------------------------------------------------------

    def _index(self, offset: int) -> int:
        """Index of the run holding ``offset`` (which must be in the window)."""
        return bisect_right(self._runs, offset, key=lambda r: r.first) - 1

    def _split_at(self, offset: int) -> int:
        """Make a run start at ``offset`` (in [SPSO, SPEO]); its index (len(runs) at the SPEO)."""
        if offset >= self.end_offset:
            return len(self._runs)
        i = self._index(offset)
        r = self._runs[i]
        if r.first == offset:
            return i
        self._runs.insert(i + 1, r.copy(offset, r.last))
        r.last = offset - 1
        return i + 1

    def _coalesce(self, lo: int, hi: int) -> None:
        """Merge equal neighbours among runs[lo-1 .. hi] (indexes before the change)."""
        i = max(lo - 1, 0)
        end = min(hi + 1, len(self._runs))
        while i < end - 1 and i < len(self._runs) - 1:
            a, b = self._runs[i], self._runs[i + 1]
            if a.same_as(b) and a.last + 1 == b.first:
                a.last = b.last
                del self._runs[i + 1]
                end -= 1
            else:
                i += 1

    def _advance_start(self) -> bool:
        """Move the SPSO over leading committed ACKNOWLEDGED / ARCHIVED runs."""
        n = 0
        for r in self._runs:
            if r.state in _DONE and r.prev is None:
                n += 1
            else:
                break
        if not n:
            return False
        self.start_offset = self._runs[n - 1].last + 1
        del self._runs[:n]
        return True

    def _released_state(self, r: _Run) -> RecordState:
        """Where a released / expired record goes: AVAILABLE, or ARCHIVED at the delivery limit."""
        return RecordState.ARCHIVED if r.count >= self.max_delivery_count else RecordState.AVAILABLE

    # --- acquisition ---------------------------------------------------------------------------

    def acquire(self, member: str, fetch_offset: int, batches: Sequence[tuple[int, int]], *, max_records: int,
                batch_size: int, lock_ms: int, now_ms: int) -> list[Acquired]:
        """Acquire for ``member`` what a log read from ``fetch_offset`` returned: ``batches`` are the
        (base offset, last offset) of the whole batches read, in order."""
        if not batches or max_records <= 0:
            return []
        lo = max(fetch_offset, self.start_offset)
        hi = batches[-1][1]
        if hi < lo:
            return []
        deadline = now_ms + lock_ms
        # Records of the window between the fetch offset and the first batch returned are not in
        # the log any more (compaction): archive the AVAILABLE ones so the SPSO can move on.
        first_base = batches[0][0]
        if lo < min(first_base, self.end_offset):
            self._archive_available(lo, min(first_base, self.end_offset) - 1)
            lo = max(lo, self.start_offset)
        out: list[Acquired] = []
        acquired = 0
        # 1. Records already in the window: AVAILABLE runs that the batches cover.
        if lo < self.end_offset:
            top = min(hi, self.end_offset - 1)
            i = self._split_at(lo)
            j = self._split_at(top + 1)
            for r in self._runs[i:j]:
                if acquired >= max_records:
                    break
                if r.state != RecordState.AVAILABLE or r.prev is not None:
                    continue
                r.state, r.count, r.member, r.deadline = RecordState.ACQUIRED, r.count + 1, member, deadline
                out.append(Acquired(r.first, r.last, r.count))
                acquired += r.last - r.first + 1
            self._coalesce(i, j)
        # 2. Fresh records past the SPEO, up to the in-flight limit, cut at a batch boundary.
        if hi >= self.end_offset:
            # Offsets between the SPEO and the first batch holding newer records are not in the log
            # (compacted away): nothing to deliver there.
            base = next(b for b, last in batches if last >= self.end_offset)
            if base > self.end_offset:
                self._runs.append(_Run(self.end_offset, base - 1, RecordState.ARCHIVED, 0))
                self.end_offset = base
                self._coalesce(len(self._runs) - 1, len(self._runs))
                self._advance_start()
        room = min(max_records - acquired, self.max_in_flight - self.in_flight)
        if hi >= self.end_offset and room > 0:
            first = self.end_offset
            want_last = first + room - 1
            last = hi
            bases = [b for b, _ in batches]
            if want_last < hi:
                # The last offset of the batch holding first + room - 1 (the limit is soft).
                k = bisect_right(bases, want_last) - 1
                last = batches[k][1] if k >= 0 else want_last
                last = max(min(last, hi), first)
            out.extend(self._new_runs(member, first, last, bases, max(batch_size, 1), deadline))
            self.end_offset = last + 1
        return out

    def _new_runs(self, member: str, first: int, last: int, bases: list[int], batch_size: int,
                  deadline: int) -> list[Acquired]:
        """ACQUIRED runs for fresh records first..last, split every ``batch_size`` records at a
        batch boundary (Kafka's createBatches)."""
        cuts = [first]
        if last - first + 1 > batch_size:
            for base in bases:
                if base > last:
                    break
                if base - cuts[-1] >= batch_size:
                    cuts.append(base)
        out = []
        for k, start in enumerate(cuts):
            end = cuts[k + 1] - 1 if k + 1 < len(cuts) else last
            self._runs.append(_Run(start, end, RecordState.ACQUIRED, 1, member, deadline))
            out.append(Acquired(start, end, 1))
        return out

    def _archive_available(self, first: int, last: int) -> None:
        i = self._split_at(first)
        j = self._split_at(last + 1)
        for r in self._runs[i:j]:
            if r.state == RecordState.AVAILABLE and r.prev is None:
                r.state = RecordState.ARCHIVED
        self._coalesce(i, j)
        self._advance_start()

    def archive_acquired(self, member: str, ranges: Iterable[tuple[int, int]]) -> None:
        """Archive records just acquired by ``member`` that must not be delivered (aborted
        transactions under read_committed); not persisted, as in Kafka: after a restart they are
        filtered again."""
        for first, last in ranges:
            first, last = max(first, self.start_offset), min(last, self.end_offset - 1)
            if first > last:
                continue
            i = self._split_at(first)
            j = self._split_at(last + 1)
            for r in self._runs[i:j]:
                if r.state == RecordState.ACQUIRED and r.member == member and r.prev is None:
                    r.state, r.member, r.deadline = RecordState.ARCHIVED, NO_MEMBER, NO_DEADLINE
            self._coalesce(i, j)
        self._advance_start()

    # --- acknowledgement -------------------------------------------------------------------------

    def acknowledge(self, member: str, batches: Sequence[tuple[int, int, Sequence[int]]]) -> Transition:
        """Apply ``member``'s acknowledgements (first, last, types): one type for the range, or one
        per offset. Raises AckError and changes nothing when any of them is invalid."""
        ranges: list[tuple[int, int, RecordState]] = []
        for first, last, types in batches:
            if len(types) == 1:
                ranges.append((first, last, self._ack_state(types[0])))
                continue
            for k, t in enumerate(types):
                ranges.append((first + k, first + k, self._ack_state(t)))
        # Validate everything before changing anything.
        for first, last, _ in ranges:
            if last < self.start_offset:
                continue
            first = max(first, self.start_offset)
            if last >= self.end_offset:
                raise AckError(ErrorCode.INVALID_REQUEST,
                               f"Batch record not found. The offsets {first}-{last} are past the acquired records "
                               f"(share-partition end offset {self.end_offset}).")
            for r in self._runs[self._index(first):self._index(last) + 1]:
                if r.state != RecordState.ACQUIRED or r.prev is not None:
                    raise AckError(ErrorCode.INVALID_RECORD_STATE,
                                   f"The record state is invalid: offsets {max(first, r.first)}-{min(last, r.last)} "
                                   f"are {r.state.name.lower()}{' (in transition)' if r.prev is not None else ''}, "
                                   "not acquired.")
                if r.member != member:
                    raise AckError(ErrorCode.INVALID_RECORD_STATE,
                                   f"Member {member} is not the owner of offsets "
                                   f"{max(first, r.first)}-{min(last, r.last)}.")
        tr = Transition()
        for first, last, state in ranges:
            if last < self.start_offset:
                continue
            self._transition(max(first, self.start_offset), last, state, tr)
        return tr

    def _ack_state(self, t: int) -> RecordState:
        try:
            return _ACK_STATE[AckType(t)]
        except ValueError:
            raise AckError(ErrorCode.INVALID_REQUEST, f"Invalid acknowledge type: {t}.") from None

    def _transition(self, first: int, last: int, state: RecordState, tr: Transition) -> None:
        i = self._split_at(first)
        j = self._split_at(last + 1)
        for r in self._runs[i:j]:
            new = self._released_state(r) if state == RecordState.AVAILABLE else state
            r.prev = (r.state, r.member, r.deadline)
            r.state, r.member, r.deadline = new, NO_MEMBER, NO_DEADLINE
            tr.runs.append(r)
            tr.batches.append(StateBatch(r.first, r.last, int(new), r.count))

    def release_member(self, member: str) -> Transition:
        """RELEASE every record ``member`` holds (its share session ended)."""
        tr = Transition()
        for r in list(self._runs):
            if r.state == RecordState.ACQUIRED and r.member == member and r.prev is None:
                self._transition(r.first, r.last, RecordState.AVAILABLE, tr)
        return tr

    def start_offset_after(self, *trs: Transition | None) -> int:
        """The SPSO once ``trs`` commit (other pending transitions count as not done): what a
        write of ``trs`` persists, so the durable start offset does not lag one write behind."""
        mine = {id(r) for tr in trs if tr is not None for r in tr.runs}
        start = self.start_offset
        for r in self._runs:
            if r.state in _DONE and (r.prev is None or id(r) in mine):
                start = r.last + 1
            else:
                break
        return start

    def complete(self, tr: Transition, ok: bool, now_ms: int) -> bool:
        """Commit (persisted) or roll back a transition; True when the SPSO moved."""
        for r in tr.runs:
            if r.prev is None:
                continue  # dropped from the window meanwhile (log start moved) or already completed
            if not ok:
                prev_state, prev_member, prev_deadline = r.prev
                if prev_state == RecordState.ACQUIRED and 0 <= prev_deadline <= now_ms:
                    # The lock expired while the acknowledgement was being written.
                    r.state, r.member, r.deadline = self._released_state(r), NO_MEMBER, NO_DEADLINE
                else:
                    r.state, r.member, r.deadline = prev_state, prev_member, prev_deadline
            r.prev = None
        self._coalesce(0, len(self._runs))
        return self._advance_start()

    # --- lock expiry and the log start ---------------------------------------------------------

    def expire_locks(self, now_ms: int) -> list[StateBatch]:
        """Release the records whose acquisition lock expired; the state batches to persist."""
        out = []
        for r in self._runs:
            if r.state == RecordState.ACQUIRED and r.prev is None and r.deadline <= now_ms:
                r.state, r.member, r.deadline = self._released_state(r), NO_MEMBER, NO_DEADLINE
                out.append(StateBatch(r.first, r.last, int(r.state), r.count))
        if out:
            self._coalesce(0, len(self._runs))
            self._advance_start()
        return out

    def update_log_start(self, log_start: int) -> bool:
        """The log start offset moved past the SPSO (retention, DeleteRecords): records below it are
        gone; the window starts there. True when anything changed."""
        if log_start <= self.start_offset:
            return False
        if log_start >= self.end_offset:
            self._runs.clear()
            self.start_offset = self.end_offset = log_start
            return True
        i = self._split_at(log_start)
        del self._runs[:i]
        self.start_offset = log_start
        self._advance_start()
        return True
