"""The request memory pool: a bound on the bytes of requests being read or waiting to be handled.

Kafka's SocketServer draws every request buffer from a SimpleMemoryPool of
``queued.max.request.bytes`` (non-strict: an allocation succeeds while *any* memory is left, so
the pool may overshoot by one request), and while the pool is exhausted the selector stops
reading from sockets until handled requests give memory back. Connections are never closed for it.

Here a frame is *admitted* when its size prefix has been read and the pool has memory left; its
whole size is then counted against the pool (as Kafka does), so a frame that started can always
finish and pools cannot deadlock on half-read frames. The bytes actually held grow with the bytes
that arrive (see broker/connection.py); the pool bounds the commitments.
"""

from __future__ import annotations

from collections.abc import Callable


class MemoryPool:
    def __init__(self, limit: int) -> None:
        self.limit = limit  # <= 0: unbounded (Kafka uses MemoryPool.NONE unless queued.max.request.bytes > 0)
        self.used = 0
        # Callbacks of connections that paused reading for memory, woken in arrival order.
        self._waiters: dict[int, Callable[[], None]] = {}

    @property
    def exhausted(self) -> bool:
        return 0 < self.limit <= self.used

    def reserve(self, n: int) -> None:
        self.used += n

    def release(self, n: int) -> None:
        self.used -= n
        if self._waiters and not self.exhausted:
            waiters, self._waiters = self._waiters, {}
            for wake in waiters.values():
                wake()  # a woken connection may re-register if the pool fills up again

    def wait(self, key: int, wake: Callable[[], None]) -> None:
        self._waiters[key] = wake

    def forget(self, key: int) -> None:
        self._waiters.pop(key, None)
