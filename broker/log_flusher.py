"""Flushes (fsync) of partition logs, never on the event loop.

A flush is planned on the loop, its fsync runs in the default executor and it completes on the
loop (storage.log's plan_flush / FlushPlan.sync / complete_flush). A log has at most one flush in
flight; requests made meanwhile share a single follow-up flush (a group commit for concurrent
producers). Appends report flush.messages being reached (``flush_due``) and the produce path
awaits the flush before acknowledging.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from broker.partition import Partition

log = logging.getLogger("broker.log_flusher")

# A flush request without an end offset: everything appended when the flush is planned.
_FLUSH_ALL = 1 << 63


def flush(part: Partition, up_to: int | None = None) -> asyncio.Future[None]:
    """A future that resolves once an fsync of ``part``'s log covering everything appended so
    far (with ``up_to``: the offsets below it) has completed, or fails with its error.

    Never more than one flush of a log in flight (overlapping ones could move the recovery
    point past data still being fsynced): requests made while one runs share the next one.
    Each caller gets its own future, so a waiter cancelled with its connection cancels nothing
    else."""
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    part.flush_waiters.append(fut)
    target = _FLUSH_ALL if up_to is None else up_to
    if target > part.flush_up_to:
        part.flush_up_to = target
    if part.flush_task is None:
        part.flush_task = asyncio.create_task(_run_flushes(part), name=f"flush-{part.topic}-{part.index}")
    return fut


def schedule_flush(part: Partition) -> None:
    """Flush without waiting (acks=0, coordinator writes). Errors are logged by the flusher.
    Caveat: what is answered before that flush completes is not yet fsynced."""
    flush(part).add_done_callback(_retrieve)


async def flush_due(parts: Iterable[Partition]) -> None:
    """Wait for an fsync of each of ``parts`` whose flush.messages threshold is reached."""
    due = [flush(p) for p in set(parts) if p.log.flush_messages_due()]
    if due:
        await asyncio.gather(*due)


async def wait_flushes(parts: Iterable[Partition]) -> None:
    """Wait until none of ``parts`` has a flush in flight (shutdown: the final synchronous flush of
    every log must not overlap one)."""
    parts = list(parts)
    while tasks := [p.flush_task for p in parts if p.flush_task is not None]:
        await asyncio.gather(*tasks, return_exceptions=True)


async def _run_flushes(part: Partition) -> None:
    lg = part.log
    loop = asyncio.get_running_loop()
    try:
        while part.flush_waiters:
            waiters, part.flush_waiters = part.flush_waiters, []
            up_to, part.flush_up_to = part.flush_up_to, 0
            error: Exception | None = None
            plan = None
            try:
                plan = lg.plan_flush(None if up_to >= _FLUSH_ALL else up_to)
                if plan is not None:
                    await loop.run_in_executor(None, plan.sync)
                    lg.complete_flush(plan)
            except asyncio.CancelledError:
                # Loop teardown. The fsync may still run, but nobody completes it: leave the
                # log as if it failed (dirty again) so a later flush covers its segments.
                if plan is not None:
                    lg.flush_failed(plan)
                for w in waiters + part.flush_waiters:
                    w.cancel()
                part.flush_waiters = []
                raise
            except Exception as e:
                if plan is not None:
                    lg.flush_failed(plan)
                log.error("flushing %s-%d failed", part.topic, part.index, exc_info=e)
                error = e
            for w in waiters:
                if not w.done():
                    if error is None:
                        w.set_result(None)
                    else:
                        w.set_exception(error)
    finally:
        part.flush_task = None


def _retrieve(fut: asyncio.Future[None]) -> None:
    """Done-callback of a flush nobody awaits: fetch its exception so asyncio does not report it
    as never retrieved (the flusher already logged it)."""
    if not fut.cancelled():
        fut.exception()
