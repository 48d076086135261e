"""broker.share.share_partition: the in-flight window of a share-partition (KIP-932 record states)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.share.share_partition import (
    AckError,
    AckType,
    Acquired,
    RecordState,
    SharePartition,
    StateBatch,
)
from protocol.errors import ErrorCode

A, ACQ, ACK, ARC = RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
LOCK = 1000


def batches(*ranges: tuple[int, int]) -> list[tuple[int, int]]:
    return list(ranges)


def acquire(sp: SharePartition, member: str, got: list[tuple[int, int]], *, max_records: int = 500,
            batch_size: int = 500, now: int = 0) -> list[Acquired]:
    return sp.acquire(member, sp.next_fetch_offset(), got, max_records=max_records, batch_size=batch_size,
                      lock_ms=LOCK, now_ms=now)


def ack(sp: SharePartition, member: str, first: int, last: int, t: AckType, *, now: int = 0, ok: bool = True) -> bool:
    tr = sp.acknowledge(member, [(first, last, [int(t)])])
    return sp.complete(tr, ok, now)


def test_fresh_records_are_acquired_then_accepted_and_the_start_offset_moves() -> None:
    sp = SharePartition(0)
    assert sp.next_fetch_offset() == 0
    got = acquire(sp, "m1", batches((0, 4), (5, 9)))
    assert got == [Acquired(0, 9, 1)]
    assert (sp.start_offset, sp.end_offset, sp.in_flight) == (0, 10, 10)
    assert sp.next_fetch_offset() == 10  # nothing available in the window
    assert ack(sp, "m1", 0, 9, AckType.ACCEPT)
    assert (sp.start_offset, sp.end_offset, sp.runs()) == (10, 10, [])


def test_release_makes_records_available_again_with_a_higher_delivery_count() -> None:
    sp = SharePartition(0)
    acquire(sp, "m1", batches((0, 9)))
    ack(sp, "m1", 3, 5, AckType.RELEASE)
    assert sp.next_fetch_offset() == 3
    # The next read from 3 returns the whole batch 0-9: only 3-5 are available.
    assert acquire(sp, "m2", batches((0, 9))) == [Acquired(3, 5, 2)]
    with pytest.raises(AckError) as e:
        sp.acknowledge("m2", [(0, 2, [AckType.ACCEPT])])  # held by m1
    assert e.value.code == ErrorCode.INVALID_RECORD_STATE


def test_reject_and_gap_archive_and_the_delivery_limit_archives_a_released_record() -> None:
    sp = SharePartition(0, max_delivery_count=2)
    acquire(sp, "m", batches((0, 3)))
    ack(sp, "m", 0, 0, AckType.REJECT)
    ack(sp, "m", 1, 1, AckType.GAP)
    assert sp.start_offset == 2
    ack(sp, "m", 2, 3, AckType.RELEASE)
    assert acquire(sp, "m", batches((0, 3))) == [Acquired(2, 3, 2)]
    ack(sp, "m", 2, 3, AckType.RELEASE)  # delivered twice = the limit: archived, never again
    assert sp.start_offset == 4 and sp.next_fetch_offset() == 4


def test_lock_expiry_releases_records_to_other_members() -> None:
    sp = SharePartition(0, max_delivery_count=3)
    acquire(sp, "m1", batches((0, 9)), now=0)
    assert sp.next_deadline() == LOCK
    assert sp.expire_locks(LOCK - 1) == []
    expired = sp.expire_locks(LOCK)
    assert expired == [StateBatch(0, 9, int(A), 1)]
    assert acquire(sp, "m2", batches((0, 9)), now=LOCK) == [Acquired(0, 9, 2)]
    with pytest.raises(AckError):  # m1 lost them
        sp.acknowledge("m1", [(0, 9, [AckType.ACCEPT])])


def test_invalid_acknowledgements_change_nothing() -> None:
    sp = SharePartition(0)
    acquire(sp, "m1", batches((0, 9)))
    before = sp.runs()
    for first, last, code in ((5, 12, ErrorCode.INVALID_REQUEST), (20, 21, ErrorCode.INVALID_REQUEST)):
        with pytest.raises(AckError) as e:
            sp.acknowledge("m1", [(0, 1, [AckType.ACCEPT]), (first, last, [AckType.ACCEPT])])
        assert e.value.code == code
    with pytest.raises(AckError) as e:
        sp.acknowledge("intruder", [(0, 1, [AckType.ACCEPT])])
    assert e.value.code == ErrorCode.INVALID_RECORD_STATE
    with pytest.raises(AckError) as e:
        sp.acknowledge("m1", [(0, 1, [9])])
    assert e.value.code == ErrorCode.INVALID_REQUEST
    assert sp.runs() == before
    ack(sp, "m1", 0, 4, AckType.ACCEPT)
    # Offsets below the SPSO (0-4, acknowledged) are skipped; 5 is still acquired by m1.
    ack(sp, "m1", 4, 5, AckType.ACCEPT)
    assert sp.start_offset == 6


def test_start_offset_after_a_pending_transition() -> None:
    sp = SharePartition(0)
    acquire(sp, "m", batches((0, 4), (5, 9)))
    first = sp.acknowledge("m", [(0, 4, [AckType.ACCEPT])])
    second = sp.acknowledge("m", [(5, 9, [AckType.REJECT])])
    assert sp.start_offset == 0 and sp.start_offset_after(first) == 5
    assert sp.start_offset_after(second) == 0  # 0-4 are not done until their own write commits
    sp.complete(first, True, 0)
    assert sp.start_offset_after(second) == 10


def test_acknowledging_below_the_start_offset_is_a_no_op() -> None:
    sp = SharePartition(0)
    acquire(sp, "m", batches((0, 9)))
    ack(sp, "m", 0, 9, AckType.ACCEPT)
    tr = sp.acknowledge("m", [(0, 9, [AckType.ACCEPT])])
    assert not tr and sp.start_offset == 10


def test_per_offset_types_and_a_failed_write_rolls_back() -> None:
    sp = SharePartition(0)
    acquire(sp, "m", batches((0, 3)))
    tr = sp.acknowledge("m", [(0, 3, [AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.ACCEPT])])
    assert [(b.first_offset, b.state) for b in tr.batches] == [(0, 2), (1, 0), (2, 4), (3, 2)]
    # Pending: neither fetchable nor acknowledgeable again.
    assert sp.next_fetch_offset() == 4
    with pytest.raises(AckError):
        sp.acknowledge("m", [(0, 0, [AckType.ACCEPT])])
    assert not sp.complete(tr, False, now_ms=10)  # the write failed: back to acquired by m
    assert sp.runs() == [(0, 3, ACQ, 1, "m", False)]
    # A failed write after the lock expired leaves the records available.
    tr = sp.acknowledge("m", [(0, 3, [AckType.ACCEPT])])
    sp.complete(tr, False, now_ms=LOCK + 1)
    assert sp.runs() == [(0, 3, A, 1, "", False)]


def test_release_member_and_in_flight_limit() -> None:
    sp = SharePartition(0, max_in_flight=10)
    got = acquire(sp, "m1", batches((0, 4), (5, 9), (10, 14)))
    assert got == [Acquired(0, 9, 1)]  # 10 records at most, cut at the batch boundary 9
    assert not sp.can_acquire()
    assert acquire(sp, "m2", batches((10, 14))) == []
    tr = sp.release_member("m1")
    assert [b.state for b in tr.batches] == [int(A)]
    sp.complete(tr, True, 0)
    assert sp.can_acquire() and sp.next_fetch_offset() == 0


def test_max_records_is_a_soft_limit_at_batch_boundaries_and_batch_size_splits() -> None:
    sp = SharePartition(0)
    got = acquire(sp, "m", batches((0, 2), (3, 5), (6, 8), (9, 11)), max_records=4, batch_size=500)
    assert got == [Acquired(0, 5, 1)]
    got = acquire(sp, "m", batches((6, 8), (9, 11), (12, 14)), max_records=100, batch_size=3)
    assert got == [Acquired(6, 8, 1), Acquired(9, 11, 1), Acquired(12, 14, 1)]


def test_restored_window_fills_gaps_as_available_and_skips_done_prefix() -> None:
    persisted = [StateBatch(10, 14, int(ACK), 1), StateBatch(18, 19, int(ARC), 3), StateBatch(20, 21, int(A), 2)]
    sp = SharePartition(10, persisted)
    assert (sp.start_offset, sp.end_offset) == (15, 22)
    assert sp.runs() == [(15, 17, A, 0, "", False), (18, 19, ARC, 3, "", False), (20, 21, A, 2, "", False)]
    assert sp.next_fetch_offset() == 15
    got = acquire(sp, "m", batches((10, 24)))
    assert got == [Acquired(15, 17, 1), Acquired(20, 21, 3), Acquired(22, 24, 1)]


def test_compacted_offsets_are_archived_and_log_start_moves_the_window() -> None:
    sp = SharePartition(0)
    acquire(sp, "m", batches((0, 9)))
    ack(sp, "m", 0, 9, AckType.RELEASE)
    # The log now starts its batches at 4 (0-3 compacted away): they are archived, not redelivered.
    got = sp.acquire("m", 0, [(4, 9)], max_records=100, batch_size=100, lock_ms=LOCK, now_ms=0)
    assert got == [Acquired(4, 9, 2)] and sp.start_offset == 4
    # A hole past the SPEO becomes an archived run.
    got = sp.acquire("m", 10, [(15, 16)], max_records=100, batch_size=100, lock_ms=LOCK, now_ms=0)
    assert got == [Acquired(15, 16, 1)]
    assert sp.update_log_start(12) and sp.start_offset == 15
    assert sp.update_log_start(30) and (sp.start_offset, sp.end_offset, sp.runs()) == (30, 30, [])


def test_read_committed_filtering_archives_without_delivery() -> None:
    sp = SharePartition(0)
    acquire(sp, "m", batches((0, 9)))
    sp.archive_acquired("m", [(0, 2), (5, 5)])
    assert [r[:3] for r in sp.runs()] == [(3, 4, ACQ), (5, 5, ARC), (6, 9, ACQ)]
    assert sp.start_offset == 3


# --- model-based check ---------------------------------------------------------------------------

OPS = st.lists(st.tuples(st.sampled_from(["fetch", "ack", "expire", "release", "fail"]),
                         st.sampled_from(["a", "b", "c"]), st.integers(0, 40), st.integers(0, 12),
                         st.sampled_from(list(AckType))), max_size=60)


@settings(max_examples=300, deadline=None)
@given(ops=OPS)
def test_window_invariants_hold_for_any_sequence(ops) -> None:
    """Whatever happens: runs cover [SPSO, SPEO) without holes, an acknowledged (committed) offset
    never becomes available again, delivery counts only grow and stay within the limit, the SPSO
    only moves forward."""
    limit = 3
    sp = SharePartition(0, max_in_flight=25, max_delivery_count=limit)
    log_end = 60
    now = 0
    accepted: set[int] = set()
    counts: dict[int, int] = {}
    pending = []
    for op, member, x, n, t in ops:
        now += 200
        start_before = sp.start_offset
        if op == "fetch":
            fo = sp.next_fetch_offset()
            if fo < log_end:
                got = [(b, min(b + 4, log_end - 1)) for b in range(fo - fo % 5, log_end, 5)][:3]
                sp.acquire(member, fo, got, max_records=n + 1, batch_size=7, lock_ms=LOCK, now_ms=now)
        elif op == "ack":
            try:
                tr = sp.acknowledge(member, [(x, x + n, [int(t)])])
            except AckError:
                pass
            else:
                if t == AckType.ACCEPT:
                    accepted.update(b for batch in tr.batches for b in range(batch.first_offset, batch.last_offset + 1)
                                    if batch.state == int(ACK))
                pending.append(tr)
        elif op == "expire":
            sp.expire_locks(now)
        elif op == "release":
            pending.append(sp.release_member(member))
        if pending and (op == "fail" or len(pending) > 2):
            tr = pending.pop(0)
            failed = op == "fail"
            if failed:
                for b in tr.batches:
                    if b.state == int(ACK):
                        accepted.difference_update(range(b.first_offset, b.last_offset + 1))
            sp.complete(tr, not failed, now)
        runs = sp.runs()
        assert sp.start_offset >= start_before
        cursor = sp.start_offset
        for first, last, state, count, owner, _pending in runs:
            assert first == cursor and last >= first
            cursor = last + 1
            assert 0 <= count <= limit
            assert (state == ACQ) == bool(owner)
            for o in range(first, last + 1):
                assert count >= counts.get(o, 0)
                counts[o] = count
                if o in accepted and not _pending:
                    assert state == ACK
        assert cursor == sp.end_offset
        assert sp.in_flight <= 25 + 10  # the limit is soft by at most one batch
