"""Incremental fetch sessions (KIP-227), the leader's side: Kafka's FetchSession / FetchSessionCache.

A follower that asks for a session (session id 0, epoch 0) gets one: the leader remembers the
partitions it fetches and what it last told it of each (high watermark, log start offset), and
answers with a session id. Later fetches (that id, the next epoch) name only the partitions whose
fetch state changed, plus ``forgotten_topics_data`` for those to drop; the leader serves every
partition of the session and answers only with those that have something new: records, an error,
a diverging epoch, or a changed high watermark or log start offset (Kafka's
CachedPartition.maybeUpdateResponseData). A partition that returned records moves to the end of
the session's order, so a response bounded by max_bytes cannot starve the later ones. The wire
and both sides' per-partition work then scale with what changed, not with every followed
partition (a follower of the internal topics follows 100 and more).

Errors as in Kafka's FetchManager.newContext: an unknown session id (or one created for another
replica) answers FETCH_SESSION_ID_NOT_FOUND, an epoch other than the one expected
INVALID_FETCH_SESSION_EPOCH; epoch -1 closes a session and fetches sessionless, epoch 0 with an id
closes it and opens a new one.

Deviations: sessions are created for follower fetches only (replica id >= 0); a consumer asking
for one is answered with session id 0, which the protocol defines as "no session was created", so
it keeps sending full fetches. The cache holds ``max.incremental.fetch.session.cache.slots``
sessions (default 1000); when full, the least recently used one is evicted (Kafka prefers evicting
sessions idle for ``min.incremental.fetch.session.eviction.ms`` and favours large ones).
"""

from __future__ import annotations

import asyncio
import random
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
# A session waiting for a follower to name a partition it should fetch (FetchSessionCache.expect)
# parks at most this long, for at most this long after the leadership began.
EXPECTED_POLL_S = 0.02
EXPECT_FOR_MS = 3000


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: 1, 2, ... and back to 1 after Int.MaxValue."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1


def fetch_replica_id(request: Any) -> int:
    """The replica id of a Fetch (top level before v15, in replica_state from v15): >= 0 for a follower."""
    state = getattr(request, "replica_state", None)
    return state.replica_id if state is not None else getattr(request, "replica_id", -1)


@dataclass(slots=True)
class CachedPartition:
    """What the session knows of one partition: the follower's fetch state, and what the last
    response said (-1: nothing yet, so the next response includes it)."""

    topic: str
    topic_id: object
    index: int
    fetch_offset: int
    max_bytes: int
    leader_epoch: int
    last_fetched_epoch: int
    follower_log_start: int = -1  # the follower's own log start (its fetch state, not a response figure)
    hw: int = -1
    log_start: int = -1
    # The Partition object this session was last added to (Partition.watch): the handler watches
    # again only when the replica object changed (created or recreated), not at every fetch.
    watched: object = field(default=None, compare=False, repr=False)

    def must_respond(self, error: int, records_size: int, diverging: bool, hw: int, log_start: int) -> bool:
        """Kafka's maybeUpdateResponseData, updating the cached figures as the response is built."""
        respond = records_size > 0 or diverging
        if self.hw != hw:
            respond = True
            self.hw = hw
        if self.log_start != log_start:
            respond = True
            self.log_start = log_start
        if error:
            # Re-sent once the error is gone: an invalid cached watermark differs from any real one.
            self.hw = -1
            respond = True
        return respond


@dataclass(slots=True, weakref_slot=True, eq=False)
class FetchSession:
    """A follower's session. ``dirty``: the partitions that may have news for the follower since
    its last answered fetch (marked by the partitions themselves, broker.partition.Partition), so an
    incremental fetch looks only at those and the ones it names, not at every session partition;
    ``waiter``: the long poll of the fetch in flight, ended by news of any session partition."""

    id: int
    replica: int
    epoch: int  # the epoch the next incremental request must carry
    partitions: OrderedDict[tuple[str, int], CachedPartition] = field(default_factory=OrderedDict)
    dirty: set[tuple[str, int]] = field(default_factory=set)
    waiter: asyncio.Future[None] | None = None
    last_fetch_ms: int = 0  # when the follower last fetched in this session (lag_clock_ms: monotonic)
    # Partitions this broker started leading that this follower replicates but has not named yet
    # (FetchSessionCache.expect), with the lag-clock time after which they are no longer awaited.
    expected: dict[tuple[str, int], int] = field(default_factory=dict)

    def update(self, key: tuple[str, int], topic_id: object, fetch_offset: int, max_bytes: int, leader_epoch: int,
               last_fetched_epoch: int, follower_log_start: int) -> CachedPartition:
        """Add a partition or refresh its fetch state (the cached response figures stay); returns its entry."""
        old = self.partitions.get(key)
        if old is None:
            cp = self.partitions[key] = CachedPartition(key[0], topic_id, key[1], fetch_offset, max_bytes, leader_epoch,
                                                        last_fetched_epoch, follower_log_start)
            return cp
        old.fetch_offset, old.max_bytes = fetch_offset, max_bytes
        old.leader_epoch, old.last_fetched_epoch = leader_epoch, last_fetched_epoch
        old.follower_log_start = follower_log_start
        old.topic_id = topic_id
        return old

    def forget(self, key: tuple[str, int]) -> None:
        self.partitions.pop(key, None)
        self.dirty.discard(key)

    def move_to_end(self, key: tuple[str, int]) -> None:
        if key in self.partitions:
            self.partitions.move_to_end(key)

    def expected_wait_cap_s(self, now_ms: int) -> float | None:
        """EXPECTED_POLL_S while a partition this follower should fetch is still missing from the
        session (see FetchSessionCache.expect), else None (the request's own max wait)."""
        exp = self.expected
        if not exp:
            return None
        partitions = self.partitions
        for key in [k for k, until in exp.items() if until < now_ms or k in partitions]:
            del exp[key]
        return EXPECTED_POLL_S if exp else None

    def mark(self, key: tuple[str, int], *, wake: bool) -> None:
        """``key`` may have news for the follower; ``wake``: end the long poll in flight too (not
        for a high watermark that moved alone: the follower learns it with its next data)."""
        self.dirty.add(key)
        if wake and self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


class FetchSessionCache:
    """Sessions by id, least recently used first. Loop-only state (one event loop per broker)."""

    def __init__(self, slots: int) -> None:
        self.slots = max(int(slots), 0)
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, replica: int) -> FetchSession | None:
        """A new session (epoch 1 expected next), or None when sessions are disabled (0 slots)."""
        if self.slots <= 0:
            return None
        while len(self._sessions) >= self.slots:
            self._sessions.popitem(last=False)
            self.evictions += 1
        sid = 0
        while sid == 0 or sid in self._sessions:
            sid = random.randint(1, 2**31 - 1)
        session = self._sessions[sid] = FetchSession(sid, replica, next_epoch(INITIAL_EPOCH))
        return session

    def get(self, sid: int) -> FetchSession | None:
        session = self._sessions.get(sid)
        if session is not None:
            self._sessions.move_to_end(sid)
        return session

    def remove(self, sid: int) -> None:
        self._sessions.pop(sid, None)

    def expect(self, key: tuple[str, int], followers: Iterable[int], now_ms: int) -> None:
        """This broker now leads ``key``: each session of one of its ``followers`` that does not
        fetch it yet ends its long poll, and polls briefly (EXPECTED_POLL_S) until the follower
        names the partition or EXPECT_FOR_MS pass. A follower adds a partition it is to replicate
        to its next fetch only, after the one parked here returns (as Kafka's fetcher threads do):
        on leaders with nothing else to send that took up to replica.fetch.wait.max.ms, and the
        partition's first acks=all write waited for it (430-1,000 ms measured on a new RF=3 topic).
        The brief polls cover a follower that learns of the partition after this broker does."""
        wanted = set(followers)
        if not wanted:
            return
        until = now_ms + EXPECT_FOR_MS
        for session in self._sessions.values():
            if session.waiter is None and now_ms - session.last_fetch_ms > EXPECT_FOR_MS:
                continue  # not fetching (a follower that is gone): nothing to wake, nothing to hold
            if session.replica in wanted and key not in session.partitions:
                session.expected[key] = until
                w = session.waiter
                if w is not None and not w.done():
                    w.set_result(None)
