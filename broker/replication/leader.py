"""What a partition leader knows about its followers, for one leader epoch (Kafka's Partition and
Replica state on the leader).

Each follower's log end offset is the fetch offset of its latest Fetch. Its ``last_caught_up_ms``
follows Kafka's Replica.updateFetchState: a fetch at the leader's log end offset makes it caught up
now; a fetch reaching the log end offset the leader had at the follower's previous fetch makes it
caught up as of that previous fetch. A follower is in sync while its log end offset equals the
leader's or it caught up within ``replica.lag.time.max.ms`` (Replica.isCaughtUp). These times are
monotonic (``lag_clock_ms``), not wall-clock as in Kafka: a clock step must not move the ISR.

The high watermark is the minimum log end offset over the ISR, counting ISR additions that are
being written (Kafka's "maximal ISR"), and it only moves forward. An ISR member whose log end
offset is not known yet (no fetch since this broker became leader) holds it, as in Kafka.

acks=all produces wait here until the high watermark covers their last offset.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from protocol.errors import ErrorCode


def lag_clock_ms() -> int:
    """The clock of follower lag (fetch and catch-up times, ISR expiry): monotonic. Kafka reads its
    wall-clock Time here; a wall clock that steps back would keep a follower that stopped fetching in
    the ISR (its last catch-up seemingly in the future, holding the high watermark), and one that
    steps forward would drop followers that are in sync."""
    return int(time.monotonic() * 1000)


@dataclass(slots=True)
class FollowerState:
    leo: int = -1  # unknown until the follower's first fetch in this leader epoch
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_leo: int = -1
    log_start: int = -1  # the follower's log start offset, from its fetches (DeleteRecords' low watermark)


class LeaderState:
    __slots__ = ("epoch", "epoch_start_offset", "followers", "pending_isr_adds", "isr_change", "_waiters")

    def __init__(self, epoch: int, epoch_start_offset: int, followers: Iterable[int], now_ms: int) -> None:
        self.epoch = epoch
        # The leader's log end offset when it took this epoch: a follower joins the ISR only once
        # it has reached it (it then holds everything the previous leaders committed).
        self.epoch_start_offset = epoch_start_offset
        # Kafka starts every follower's lag clock at the election: a follower has
        # replica.lag.time.max.ms to fetch from the new leader before it leaves the ISR.
        self.followers = {r: FollowerState(last_caught_up_ms=now_ms) for r in followers}
        self.pending_isr_adds: set[int] = set()
        self.isr_change: asyncio.Task[None] | None = None  # at most one ISR write in flight
        self._waiters: list[tuple[int, asyncio.Future[ErrorCode]]] = []

    def add_follower(self, replica: int, now_ms: int) -> None:
        """A replica assigned while this broker leads (reassignment)."""
        self.followers.setdefault(replica, FollowerState(last_caught_up_ms=now_ms))

    def record_fetch(self, replica: int, fetch_offset: int, leader_leo: int, now_ms: int,
                     log_start: int = -1) -> FollowerState | None:
        fs = self.followers.get(replica)
        if fs is None:
            return None
        if log_start >= 0:
            fs.log_start = log_start
        if fetch_offset >= leader_leo:
            fs.last_caught_up_ms = now_ms
        elif fetch_offset >= fs.last_fetch_leader_leo:
            fs.last_caught_up_ms = max(fs.last_caught_up_ms, fs.last_fetch_ms)
        fs.leo = fetch_offset
        fs.last_fetch_leader_leo = leader_leo
        fs.last_fetch_ms = now_ms
        return fs

    def high_watermark_candidate(self, isr: Iterable[int], me: int, leader_leo: int) -> int | None:
        """min(log end offset) over the maximal ISR; None while a member's is unknown."""
        new = leader_leo
        followers = self.followers
        for members in (isr, self.pending_isr_adds) if self.pending_isr_adds else (isr,):
            for r in members:
                if r == me:
                    continue
                fs = followers.get(r)
                if fs is None or fs.leo < 0:
                    return None
                if fs.leo < new:
                    new = fs.leo
        return new

    def out_of_sync(self, isr: Iterable[int], me: int, leader_leo: int, now_ms: int, lag_max_ms: int) -> list[int]:
        """ISR followers that are not caught up (Kafka's getOutOfSyncReplicas)."""
        out = []
        for r in isr:
            if r == me:
                continue
            fs = self.followers.get(r)
            if fs is None:
                continue  # not a replica this leader tracks (assignment changing): the controller decides
            if fs.leo != leader_leo and now_ms - fs.last_caught_up_ms > lag_max_ms:
                out.append(r)
        return out

    def may_join_isr(self, replica: int, high_watermark: int) -> bool:
        """Kafka's isFollowerInSync: at or past the high watermark and this epoch's start offset."""
        fs = self.followers.get(replica)
        return fs is not None and fs.leo >= high_watermark and fs.leo >= self.epoch_start_offset

    # --- acks=all waits ---------------------------------------------------------------------

    def add_waiter(self, required_offset: int) -> asyncio.Future[ErrorCode]:
        fut: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        self._waiters.append((required_offset, fut))
        return fut

    def remove_waiter(self, fut: asyncio.Future[ErrorCode]) -> None:
        self._waiters = [(o, f) for o, f in self._waiters if f is not fut]

    def complete_waiters(self, high_watermark: int, outcome: Callable[[], ErrorCode]) -> None:
        """Answer the produces whose batches the high watermark now covers: NONE, or
        NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below min.insync.replicas meanwhile."""
        if not self._waiters:
            return
        code: ErrorCode | None = None
        kept = []
        for required, fut in self._waiters:
            if required <= high_watermark:
                if not fut.done():
                    if code is None:
                        code = outcome()
                    fut.set_result(code)
            else:
                kept.append((required, fut))
        self._waiters = kept

    def fail_waiters(self, code: ErrorCode) -> None:
        """Leadership lost: every waiting produce gets ``code`` (NOT_LEADER_OR_FOLLOWER)."""
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_result(code)
        self._waiters = []

    def low_watermark(self, leader_log_start: int, alive: Iterable[int]) -> int:
        """Kafka's Partition.lowWatermarkIfLeader: the smallest log start offset over this replica
        and the followers on live brokers (-1 while a live follower's is not known yet)."""
        low = leader_log_start
        live = set(alive)
        for r, fs in self.followers.items():
            if r in live and fs.log_start < low:
                low = fs.log_start
        return low
