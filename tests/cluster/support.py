"""Small helpers for the etcd cluster tests: condition waits with generous deadlines, session factories."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

# Generous: the test machine is shared and slow; a wait returns as soon as its condition holds.
DEFAULT_WAIT_S = 60.0


async def wait_until(condition: Callable[[], bool | Awaitable[bool]], what: str, *,
                     timeout: float = DEFAULT_WAIT_S, interval: float = 0.02) -> None:
    """Poll ``condition`` (sync or async) until it is true; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)
