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
