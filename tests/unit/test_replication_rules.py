"""Pure rules of replication (broker/replication): where logs diverge and where a follower
truncates (Kafka's Partition.fetchRecords / AbstractFetcherThread.getOffsetTruncationState), and
the leader's follower tracking (Replica.updateFetchState, isCaughtUp, the high watermark over the
maximal ISR, acks=all waits)."""

from __future__ import annotations

import asyncio

from broker.replication.leader import LeaderState
from broker.replication.truncation import diverging_epoch, truncation_offset
from protocol.errors import ErrorCode


def _cache(entries: list[tuple[int, int]], leo: int):
    """end_offset_for_epoch over (epoch, start offset) entries, as storage.log.Log answers it."""
    def end_offset_for(epoch: int) -> tuple[int, int]:
        if epoch < 0 or not entries:
            return -1, -1
        if epoch == entries[-1][0]:
            return epoch, leo
        for i, (e, start) in enumerate(entries):
            if e > epoch:
                return (epoch, start) if i == 0 else (entries[i - 1][0], start)
        return -1, -1
    return end_offset_for


def test_leader_answers_diverging_epoch() -> None:
    leader = _cache([(0, 0), (2, 100), (5, 150)], 200)
    assert diverging_epoch(leader, -1, 0) is None  # no last fetched epoch: nothing to check
    assert diverging_epoch(leader, 5, 180) is None  # same epoch, offset inside it
    assert diverging_epoch(leader, 2, 150) is None  # follower ends epoch 2 exactly where the leader did
    assert diverging_epoch(leader, 2, 160) == (2, 150)  # follower has epoch-2 records the leader lacks
    assert diverging_epoch(leader, 3, 160) == (2, 150)  # the leader never had epoch 3
    assert diverging_epoch(leader, 9, 160) == "out_of_range"  # above every epoch the leader knows


def test_follower_truncation_offset() -> None:
    # Follower holds epochs 0, 2, 3; the leader says epoch 2 ended at 150.
    follower = _cache([(0, 0), (2, 100), (3, 170)], 190)
    assert truncation_offset(follower, 190, 120, 2, 150) == (150, True)
    # The leader's epoch is unknown to the follower: cut at the end of its own largest epoch below.
    follower2 = _cache([(0, 0), (3, 120)], 190)
    assert truncation_offset(follower2, 190, 100, 2, 150) == (120, False)
    # Undefined end offset: back to the high watermark.
    assert truncation_offset(follower, 190, 120, -1, -1) == (120, True)
    # Never past the follower's own log end.
    assert truncation_offset(_cache([(2, 0)], 40), 40, 10, 2, 150) == (40, True)


def test_follower_fetch_state_and_caught_up_time() -> None:
    ls = LeaderState(epoch=4, epoch_start_offset=100, followers=[2, 3], now_ms=1000)
    ls.record_fetch(2, 100, leader_leo=120, now_ms=2000)  # behind: not caught up yet
    assert ls.followers[2].last_caught_up_ms == 1000
    ls.record_fetch(2, 120, leader_leo=130, now_ms=3000)  # reached the LEO the leader had at its last fetch
    assert ls.followers[2].last_caught_up_ms == 2000
    ls.record_fetch(2, 130, leader_leo=130, now_ms=4000)  # at the log end: caught up now
    assert ls.followers[2].last_caught_up_ms == 4000 and ls.followers[2].leo == 130
    # Follower 3 never fetched: out of sync once the lag passes; 2 is in sync (at the log end).
    assert ls.out_of_sync([1, 2, 3], me=1, leader_leo=130, now_ms=1000 + 500, lag_max_ms=1000) == []
    assert ls.out_of_sync([1, 2, 3], me=1, leader_leo=130, now_ms=1000 + 1500, lag_max_ms=1000) == [3]
    assert ls.record_fetch(9, 0, 130, 5000) is None  # not a replica


def test_high_watermark_over_the_maximal_isr() -> None:
    ls = LeaderState(epoch=0, epoch_start_offset=0, followers=[2, 3], now_ms=0)
    assert ls.high_watermark_candidate([1, 2], me=1, leader_leo=50) is None  # 2's LEO unknown yet
    ls.record_fetch(2, 40, 50, 1)
    assert ls.high_watermark_candidate([1, 2], me=1, leader_leo=50) == 40
    assert ls.high_watermark_candidate([1], me=1, leader_leo=50) == 50
    ls.pending_isr_adds = {3}  # being added: counts at once (Kafka's maximal ISR)
    assert ls.high_watermark_candidate([1, 2], me=1, leader_leo=50) is None
    ls.record_fetch(3, 30, 50, 2)
    assert ls.high_watermark_candidate([1, 2], me=1, leader_leo=50) == 30
    assert not ls.may_join_isr(3, high_watermark=40)
    assert ls.may_join_isr(2, high_watermark=40)


def test_acks_all_waiters() -> None:
    async def run() -> None:
        ls = LeaderState(epoch=0, epoch_start_offset=0, followers=[2], now_ms=0)
        a, b = ls.add_waiter(10), ls.add_waiter(20)
        ls.complete_waiters(15, lambda: ErrorCode.NONE)
        assert a.result() == ErrorCode.NONE and not b.done()
        ls.complete_waiters(25, lambda: ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
        assert b.result() == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        c = ls.add_waiter(30)
        ls.fail_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        assert c.result() == ErrorCode.NOT_LEADER_OR_FOLLOWER

    asyncio.run(run())
