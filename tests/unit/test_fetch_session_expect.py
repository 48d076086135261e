"""FetchSessionCache.expect: when this broker starts leading a partition, the sessions of its
followers that do not fetch it yet end their long poll and poll briefly until the follower names the
partition (or the expectation lapses), so the follower adds it without waiting out a long poll."""

from __future__ import annotations

import asyncio

from broker.fetch_sessions import EXPECT_FOR_MS, EXPECTED_POLL_S, FetchSessionCache


def test_expect_wakes_the_followers_sessions_and_caps_their_polls_until_the_partition_is_named() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        cache = FetchSessionCache(10)
        follower2, follower3, other = cache.create(2), cache.create(3), cache.create(4)
        assert follower2 and follower3 and other
        follower3.update(("t", 0), None, 0, 1 << 20, 0, -1, 0)  # already fetches the partition
        waiters = {}
        for s in (follower2, follower3, other):
            s.waiter = waiters[s.replica] = loop.create_future()

        cache.expect(("t", 0), [2, 3], now_ms=1_000)

        # Only the follower missing the partition is woken and polls briefly.
        assert waiters[2].done() and not waiters[3].done() and not waiters[4].done()
        assert follower2.expected_wait_cap_s(1_001) == EXPECTED_POLL_S
        assert follower3.expected_wait_cap_s(1_001) is None and other.expected_wait_cap_s(1_001) is None
        # Once its fetch names the partition, its long polls are its own again.
        follower2.update(("t", 0), None, 0, 1 << 20, 0, -1, 0)
        assert follower2.expected_wait_cap_s(1_002) is None and not follower2.expected

    asyncio.run(run())


def test_expectation_lapses() -> None:
    """A follower that never names the partition (offline, or no longer assigned) does not keep its
    session polling briefly for good."""
    cache = FetchSessionCache(10)
    s = cache.create(2)
    assert s is not None
    s.last_fetch_ms = 4_900
    cache.expect(("t", 0), [2], now_ms=5_000)
    assert s.expected_wait_cap_s(5_000 + EXPECT_FOR_MS) == EXPECTED_POLL_S
    assert s.expected_wait_cap_s(5_001 + EXPECT_FOR_MS) is None and not s.expected
    cache.expect(("t", 1), [], now_ms=9_000)  # no followers: nothing to wait for
    assert not s.expected


def test_sessions_of_followers_that_stopped_fetching_are_left_alone() -> None:
    """The session of a follower that is gone (killed: no fetch parked, none for a while) stays in
    the cache until evicted; leaderships taken up meanwhile do not pile up expectations in it."""
    cache = FetchSessionCache(10)
    gone = cache.create(2)
    assert gone is not None
    gone.last_fetch_ms = 1_000
    cache.expect(("t", 0), [2], now_ms=1_000 + EXPECT_FOR_MS + 1)
    assert not gone.expected
