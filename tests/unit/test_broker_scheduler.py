"""Broker background tasks: the period semantics of Kafka's scheduler."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from broker.broker import Broker


async def _count_runs(interval_ms: int, seconds: float) -> int:
    runs = 0

    async def task() -> None:
        nonlocal runs
        runs += 1

    holder = SimpleNamespace(_tasks=[])
    Broker._every(holder, interval_ms, task, "probe")  # type: ignore[arg-type]
    await asyncio.sleep(seconds)
    for t in holder._tasks:
        t.cancel()
    await asyncio.gather(*holder._tasks, return_exceptions=True)
    return runs


def test_zero_period_runs_once_instead_of_spinning() -> None:
    assert asyncio.run(_count_runs(0, 0.2)) == 1


def test_positive_period_repeats() -> None:
    assert 3 <= asyncio.run(_count_runs(20, 1.0)) <= 55  # 50 at most on time; slack for a stalled loop
