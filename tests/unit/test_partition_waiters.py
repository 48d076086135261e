"""Parked fetches on a Partition: consumers' waiters wake on any change, followers' (log_only) not on
a high watermark that moved alone (they learn it with their next data, as in Kafka), but on appends,
truncations and role changes (wake_waiters without hw_only)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.partition import Partition
from storage.log import Log
from storage.log_config import LogConfig


def test_high_watermark_wakes_consumers_only(tmp_path: Path) -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        part = Partition("t", 0, Log.open(tmp_path / "t-0", LogConfig()), 0, 1 << 20, replicated=True)
        consumer, follower = loop.create_future(), loop.create_future()
        part.add_waiter(consumer)
        part.add_waiter(follower, log_only=True)
        part.wake_waiters(hw_only=True)
        assert consumer.done() and not follower.done()
        part.wake_waiters()  # an append
        assert follower.done()
        # Removed waiters are not woken, whichever set holds them.
        late = loop.create_future()
        part.add_waiter(late, log_only=True)
        part.remove_waiter(late)
        part.wake_waiters()
        assert not late.done()
        part.log.close()

    asyncio.run(run())


def test_wake_later_holds_followers_until_the_next_append_or_the_delay(tmp_path: Path) -> None:
    """An unwaited coordinator record (Partition.wake_waiters_later): consumers wake at once; a
    follower's session is marked as having news but its long poll goes on until the partition's next
    append, or until the delay if none comes. One pending timer at most, dropped by a real wake."""
    from broker.fetch_sessions import FetchSession

    async def run() -> None:
        loop = asyncio.get_running_loop()
        part = Partition("t", 0, Log.open(tmp_path / "t-0", LogConfig()), 0, 1 << 20, replicated=True)
        session = FetchSession(1, 2, 1)
        part.watch(session)
        key = ("t", 0)

        # Woken by the next append, before the delay.
        consumer, parked = loop.create_future(), loop.create_future()
        part.add_waiter(consumer)
        session.waiter = parked
        part.wake_waiters_later(60.0)
        assert consumer.done()
        assert key in session.dirty and not parked.done()
        timer = part.deferred_wake
        assert timer is not None
        part.wake_waiters_later(60.0)  # a second record meanwhile: still one timer
        assert part.deferred_wake is timer
        part.wake_waiters(hw_only=True)  # a high watermark that moved alone changes nothing for it
        assert not parked.done() and part.deferred_wake is timer
        part.wake_waiters()  # the next append
        assert parked.done() and part.deferred_wake is None and timer.cancelled()

        # Woken by the delay when nothing else is appended.
        session.dirty.clear()
        parked = loop.create_future()
        session.waiter = parked
        part.wake_waiters_later(0.01)
        assert not parked.done()
        await asyncio.wait_for(parked, 10)
        assert key in session.dirty and part.deferred_wake is None
        part.log.close()

    asyncio.run(run())
