"""One partition replica held by this broker: its log (storage.partition_log, the one append path),
its leader epoch and high watermark, the leader's view of its followers while it leads, the
fetches parked on it and the state of its flushes (broker.log_flusher).

A single node holds every partition and commits what it appends (high watermark = log end). In a
cluster (``replicated``) the high watermark is tracked (``hw``): the leader moves it by its
followers' fetches (broker.replication.high_watermark), a follower learns it from its leader.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import TYPE_CHECKING

from storage.partition_log import PartitionLog

if TYPE_CHECKING:
    from broker.fetch_sessions import FetchSession
    from broker.replication.leader import LeaderState
    from storage.log import Log


class Partition:
    __slots__ = ("topic", "index", "plog", "log", "producer_state", "leader_epoch", "_waiters", "_log_waiters",
                 "max_message_bytes", "flush_task", "flush_waiters", "flush_up_to", "replicated", "hw",
                 "leader_state", "sessions", "deferred_wake")

    def __init__(self, topic: str, index: int, log: Log, leader_epoch: int, max_message_bytes: int, *,
                 replicated: bool = False) -> None:
        self.topic = topic
        self.index = index
        self.plog = PartitionLog(log)
        self.log = log
        self.producer_state = self.plog.producer_state
        self.leader_epoch = leader_epoch
        self.max_message_bytes = max_message_bytes
        self._waiters: set[asyncio.Future[None]] = set()
        self._log_waiters: set[asyncio.Future[None]] = set()
        # broker.log_flusher: the task running this log's flushes, the futures waiting for the
        # next one, and how far that one must reach.
        self.flush_task: asyncio.Task[None] | None = None
        self.flush_waiters: list[asyncio.Future[None]] = []
        self.flush_up_to = 0
        self.replicated = replicated
        # Replicated: committed up to here. A restarted replica starts at its log start offset and
        # learns the real value from its leader's fetch answers (or, leading, from its followers).
        self.hw = log.log_start_offset
        self.leader_state: LeaderState | None = None
        # Followers' fetch sessions caching this partition (broker.fetch_sessions): told of its news
        # so that an incremental fetch need not look at every partition of its session.
        self.sessions: weakref.WeakSet[FetchSession] | None = None
        # A follower wake put off by wake_waiters_later (None: none pending).
        self.deferred_wake: asyncio.TimerHandle | None = None

    @property
    def high_watermark(self) -> int:
        if self.replicated:
            return max(min(self.hw, self.log.log_end_offset), self.log.log_start_offset)
        return self.log.log_end_offset  # single replica: everything appended is committed

    @property
    def last_stable_offset(self) -> int:
        ps = self.producer_state
        hw = self.high_watermark
        # Replicated: a transaction whose marker is not yet under the high watermark is still open.
        first_unstable = (ps.first_unstable_offset(hw if self.replicated else None) if ps is not None else None)
        return hw if first_unstable is None else min(first_unstable, hw)

    def add_waiter(self, fut: asyncio.Future[None], *, log_only: bool = False) -> None:
        """A parked fetch. ``log_only`` (a follower's): not woken by a high watermark that moved
        alone, since the follower copies up to the log end and learns the high watermark with its
        next data, as in Kafka (each replicated write would otherwise cost every follower one
        more fetch round trip)."""
        (self._log_waiters if log_only else self._waiters).add(fut)

    def remove_waiter(self, fut: asyncio.Future[None]) -> None:
        self._waiters.discard(fut)
        self._log_waiters.discard(fut)

    def watch(self, session: FetchSession) -> None:
        if self.sessions is None:
            self.sessions = weakref.WeakSet()
        self.sessions.add(session)

    def tell_sessions(self, *, wake: bool) -> None:
        """Mark this partition in the fetch sessions caching it (see FetchSession.mark). On the
        leader, a follower whose session left the partition out as settled (at the log end) was
        caught up as of that session's last fetch: recorded now, before an append moves the log
        end, as Kafka records it at every fetch (Replica.updateFetchState)."""
        key = (self.topic, self.index)
        ls = self.leader_state
        for s in list(self.sessions or ()):
            if ls is not None and key not in s.dirty:
                fs = ls.followers.get(s.replica)
                if fs is not None and fs.last_caught_up_ms < s.last_fetch_ms:
                    fs.last_caught_up_ms = s.last_fetch_ms
            s.mark(key, wake=wake)

    def wake_waiters(self, *, hw_only: bool = False) -> None:
        """Wake parked fetches: all of them, or with ``hw_only`` (only the high watermark moved)
        those that read up to it; and tell the fetch sessions caching the partition."""
        if self.deferred_wake is not None and not hw_only:
            self.deferred_wake.cancel()  # this wake brings the followers what it was to bring
            self.deferred_wake = None
        if self.sessions:
            self.tell_sessions(wake=not hw_only)
        for waiters in (self._waiters,) if hw_only else (self._waiters, self._log_waiters):
            if waiters:
                for fut in waiters:
                    if not fut.done():
                        fut.set_result(None)
                waiters.clear()

    def wake_waiters_later(self, delay_s: float) -> None:
        """An append nobody waits to see replicated (the transaction coordinator's Complete
        record): consumers' fetches wake now, followers' within ``delay_s``, or with the next
        append if one comes first -- in back-to-back transactions the next transaction's Ongoing
        record follows within a millisecond, and each follower then fetches both in one round
        trip instead of one each (Kafka's followers fetch each at once: a deviation in timing only,
        nothing waits on this record's replication)."""
        if self.sessions:
            self.tell_sessions(wake=False)  # marked as having news; the long poll goes on
        waiters = self._waiters
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
            waiters.clear()
        if self.deferred_wake is None:
            self.deferred_wake = asyncio.get_running_loop().call_later(delay_s, self._deferred_wake)

    def _deferred_wake(self) -> None:
        self.deferred_wake = None
        self.wake_waiters()

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index})"
