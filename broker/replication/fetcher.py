"""Follower fetchers (Kafka's ReplicaFetcherManager / ReplicaFetcherThread, as asyncio tasks).

A follower partition is fetched by one fetcher per (leader, fetcher id): ``num.replica.fetchers``
fetchers per leader, a partition going to ``hash(topic, partition) % num.replica.fetchers``. A
fetcher holds one connection to the leader's advertised address on ``inter.broker.listener.name``
(default: the first listener) and sends Fetch v12 requests: replica_id = this node, the current
leader epoch, the log end offset as fetch offset and the latest local epoch as last_fetched_epoch,
``replica.fetch.max.bytes`` per partition, ``replica.fetch.response.max.bytes`` in all,
``replica.fetch.min.bytes`` and ``replica.fetch.wait.max.ms`` for the long poll. Answers:

* records: appended exactly as the leader wrote them (broker.replication.follower), then the
  follower's high watermark = min(leader's, own log end offset);
* diverging_epoch: the local log is truncated (replication.truncation) and fetching goes on;
* OFFSET_OUT_OF_RANGE below the leader's log start: the log restarts at the leader's log start;
  otherwise it is truncated to the local high watermark;
* NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION: the
  partition waits (metadata will move it to the right leader): 10 ms the first time since it was
  put on this fetcher (new, or a new leader epoch), doubling each time after, up to
  ``replica.fetch.backoff.ms``. Deviation in timing: Kafka waits the full backoff every time. A
  follower that learns of a new partition or leadership before its leader does (both watch the
  same metadata) is answered NOT_LEADER_OR_FOLLOWER, and waiting 1 s for that held a new topic's
  first acks=all write ~1 s (measured: 500-1,000 ms on a fresh cluster's first topic);
* a broken connection, or a failed TLS handshake / SASL authentication: reconnect after
  ``replica.fetch.backoff.ms``.

The connection uses the inter-broker listener's security protocol (TLS, SASL: see
broker/inter_broker_security.py).

Fetch sessions (KIP-227, Kafka's FetchSessionHandler): the first fetch is full with epoch 0 and
asks the leader for a session; once it has one, each fetch names only the partitions whose fetch
state (fetch offset, log start, leader epoch, last fetched epoch, max bytes) changed since the
last answered fetch, and lists the partitions no longer fetched (moved, deleted, or backing off)
as forgotten; the leader answers only with partitions that have news (broker/fetch_sessions.py).
A session error (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH: the leader restarted or
evicted it) or a failed fetch starts over with a full fetch that also closes the old session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections.abc import Callable, Iterable

from broker.fetch_sessions import INITIAL_EPOCH, next_epoch
from broker.partition import Partition
from broker.replication import follower
from broker.replication.env import ReplicaEnv
from broker.replication.truncation import truncation_offset
from protocol.client import ProtocolClient
from protocol.errors import ErrorCode
from protocol.fast_codecs import EncodedRequest, decode_fetch_response, encode_fetch_request_v12

log = logging.getLogger("broker.replication.fetcher")

FETCH_VERSION = 12
# Every partition's fetch state is compared with the session's this often (see ReplicaFetcher._changed).
FULL_CHECK_S = 5.0
STOP_WAIT_S = 5.0
# The first wait of a partition whose leader does not lead it yet (see the module docstring); each
# next one doubles, up to replica.fetch.backoff.ms.
NOT_READY_FIRST_WAIT_S = 0.01


def fetcher_id(topic: str, partition: int, num_fetchers: int) -> int:
    return (zlib.crc32(topic.encode()) * 31 + partition) % max(num_fetchers, 1)


class ReplicaFetcherManager:
    """``lookup(topic, index)``: the partition this broker holds now (None once deleted or moved)."""

    def __init__(self, env: ReplicaEnv, lookup: Callable[[str, int], Partition | None]) -> None:
        self.env = env
        self.lookup = lookup
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._of: dict[tuple[str, int], ReplicaFetcher] = {}
        # Set by stop(): metadata events still arrive while the broker stops (the etcd watch runs
        # until the end), and a fetcher started then would append while the logs are being closed.
        self._stopped = False

    def _setting(self, name: str, default: int) -> int:
        value = self.env.config.get(name)
        return default if value is None else int(value)

    def add(self, part: Partition, leader: int) -> None:
        """Fetch ``part`` from ``leader`` (moving it off another fetcher if needed)."""
        if self._stopped:
            return
        key = (part.topic, part.index)
        n = self._setting("num.replica.fetchers", 1)
        fkey = (leader, fetcher_id(part.topic, part.index, n))
        current = self._of.get(key)
        if current is not None and current.key == fkey:
            current.put(key, part)
            return
        self.remove(part)
        f = self.fetchers.get(fkey)
        if f is None:
            f = self.fetchers[fkey] = ReplicaFetcher(self, leader, fkey[1])
            f.start()
        f.put(key, part)
        self._of[key] = f

    def remove(self, part: Partition) -> None:
        key = (part.topic, part.index)
        f = self._of.pop(key, None)
        if f is not None:
            f.drop(key)

    async def stop(self) -> None:
        self._stopped = True
        fetchers = list(self.fetchers.values())
        self.fetchers.clear()
        self._of.clear()
        await asyncio.gather(*(f.stop() for f in fetchers), return_exceptions=True)

    async def shutdown_idle(self) -> None:
        for fkey, f in list(self.fetchers.items()):
            if not f.partitions:
                del self.fetchers[fkey]
                await f.stop()


class ReplicaFetcher:
    def __init__(self, manager: ReplicaFetcherManager, leader: int, fid: int) -> None:
        self.manager = manager
        self.env = manager.env
        self.leader = leader
        self.key = (leader, fid)
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.delay: dict[tuple[str, int], float] = {}  # partition -> monotonic time to fetch again
        # Partition -> how many "not the leader yet" answers in a row since it was put here: its
        # next wait is NOT_READY_FIRST_WAIT_S doubled that many times (capped by the backoff).
        self._not_ready: dict[tuple[str, int], int] = {}
        # Partitions whose fetch state may have changed since the last request (appended, truncated,
        # added, back from a delay): an incremental fetch builds its request from these, not from
        # every partition, so thousands of idle partitions cost nothing per fetch. Anything this
        # misses (a log start moved by the follower's own retention) is caught by a full check of
        # every partition's state every FULL_CHECK_S.
        self._changed: set[tuple[str, int]] = set()
        self._next_full_check = 0.0
        self._client: ProtocolClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._stopping = False
        # The fetch session with the leader: id (0 = none), the epoch of the next request
        # (INITIAL_EPOCH = send a full fetch that opens one), the fetch state the leader's session
        # holds per partition, and what the request in flight will make it hold.
        self._session_id = 0
        self._session_epoch = INITIAL_EPOCH
        self._session_state: dict[tuple[str, int], tuple[int, int, int, int, int]] = {}
        # What the request in flight changes in it: a full fetch replaces it, an incremental one
        # updates the named partitions and drops the forgotten ones.
        self._pending_full: dict[tuple[str, int], tuple[int, int, int, int, int]] | None = None
        self._pending_changes: dict[tuple[str, int], tuple[int, int, int, int, int]] = {}
        self._pending_forgotten: list[tuple[str, int]] = []
        self._wait_ms = 500  # replica.fetch.wait.max.ms of the request being sent (read by _build)

    def put(self, key: tuple[str, int], part: Partition) -> None:
        """Fetch ``part`` (new here, or its leader epoch changed)."""
        self.partitions[key] = part
        self.delay.pop(key, None)
        self._not_ready.pop(key, None)
        self._changed.add(key)
        self.wake()

    def drop(self, key: tuple[str, int]) -> None:
        self.partitions.pop(key, None)
        self.delay.pop(key, None)
        self._not_ready.pop(key, None)
        self._changed.add(key)  # forgotten by the next incremental fetch

    def _hold(self, key: tuple[str, int], wait_s: float | None = None) -> None:
        """Back off one partition: out of the fetches (forgotten in the session) until the delay ends
        (``wait_s``, or replica.fetch.backoff.ms)."""
        self.delay[key] = time.monotonic() + (self._backoff_s() if wait_s is None else wait_s)
        self._changed.add(key)

    def _hold_not_ready(self, key: tuple[str, int]) -> float:
        """Back off a partition its leader does not lead (yet): briefly at first, since a follower
        often learns of a leadership before the leader itself does, then longer each time."""
        n = self._not_ready.get(key, 0)
        self._not_ready[key] = n + 1
        wait = min(self._backoff_s(), NOT_READY_FIRST_WAIT_S * (1 << min(n, 30)))
        self._hold(key, wait)
        return wait

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{self.leader}-{self.key[1]}")

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            # Bounded: on Python 3.11 asyncio.wait_for can swallow a cancellation that lands as its
            # inner await completes; the loop then sees _stopping and ends on its own.
            with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(self._task), STOP_WAIT_S)
        await self._close()

    def _restart_session(self, keep_id: bool = True) -> None:
        """Next fetch is full; with keep_id it also closes the old session on the leader."""
        if not keep_id:
            self._session_id = 0
        self._session_epoch = INITIAL_EPOCH
        self._session_state = {}

    async def _close(self) -> None:
        self._restart_session()
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()
            self._client = None

    def _backoff_s(self) -> float:
        return self.manager._setting("replica.fetch.backoff.ms", 1000) / 1000

    async def _connect(self) -> ProtocolClient | None:
        if self._client is not None:
            return self._client
        addr = self.env.inter_broker_address(self.leader)
        if addr is None or self.env.connect is None:
            return None
        client = await asyncio.wait_for(self.env.connect(
            addr[0], addr[1], f"broker-{self.env.node_id}-fetcher-{self.key[1]}"), 10)
        self._client = client
        return client

    async def _run(self) -> None:
        while not self._stopping:
            now = time.monotonic()
            if self.delay:
                for k in [k for k, t in self.delay.items() if t <= now]:
                    del self.delay[k]
                    self._changed.add(k)
            if len(self.partitions) <= len(self.delay):  # nothing to fetch now
                self._wake.clear()
                wait = min(self.delay.values(), default=now + 1) - now
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), max(wait, 0.01))
                continue
            try:
                client = await self._connect()
                if client is None:
                    await self._sleep_backoff()
                    continue
                request = self._build(now)
                # A timer on the answer (not wait_for: the request is sent from this task at once,
                # with no task of its own to create and schedule per fetch).
                response = await client.request(request, FETCH_VERSION, decode=decode_fetch_response,
                                                timeout_s=self._wait_ms / 1000 + 30)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # connection refused or lost, timeout: the leader may be gone
                log.info("fetcher %s: fetch from broker %d failed (%r); retrying", self.key, self.leader, e)
                await self._close()
                await self._sleep_backoff()
                continue
            if not self._session_answered(response):
                continue
            try:
                await self._handle(response)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("fetcher %s: handling a fetch response from broker %d failed", self.key, self.leader)
                await self._sleep_backoff()

    async def _sleep_backoff(self) -> None:
        self._wake.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wake.wait(), self._backoff_s())

    def _state(self, part: Partition, max_bytes: int) -> tuple[int, int, int, int, int]:
        lg = part.log
        return lg.log_end_offset, lg.log_start_offset, part.leader_epoch, lg.latest_epoch, max_bytes

    def _build(self, now: float) -> EncodedRequest:
        m = self.manager
        per_partition = m._setting("replica.fetch.max.bytes", 1048576)
        full = self._session_epoch == INITIAL_EPOCH
        sent = self._session_state
        delay = self.delay
        named: dict[tuple[str, int], tuple[int, int, int, int, int]] = {}
        forgotten: list[tuple[str, int]] = []
        if full or now >= self._next_full_check:
            self._next_full_check = now + FULL_CHECK_S
            candidates: Iterable[tuple[str, int]] = set(self.partitions) | set(sent)
        else:
            candidates = self._changed
        for key in candidates:
            part = self.partitions.get(key)
            if part is None or key in delay:
                if not full and key in sent:
                    forgotten.append(key)
                continue
            st = self._state(part, per_partition)
            if full or sent.get(key) != st:
                named[key] = st
        self._changed = {k for k in self._changed if k in delay}  # the rest are in this request
        self._pending_full = named if full else None
        self._pending_changes = named
        self._pending_forgotten = forgotten
        by_topic: dict[str, list[tuple[int, int, int, int, int, int]]] = {}
        for (topic, index), (fetch_offset, log_start, leader_epoch, last_epoch, max_bytes) in named.items():
            by_topic.setdefault(topic, []).append(
                (index, leader_epoch, fetch_offset, last_epoch, log_start, max_bytes))
        by_forgotten: dict[str, list[int]] = {}
        for topic, index in forgotten:
            by_forgotten.setdefault(topic, []).append(index)
        self._wait_ms = m._setting("replica.fetch.wait.max.ms", 500)
        return encode_fetch_request_v12(
            self.env.node_id, self._wait_ms, m._setting("replica.fetch.min.bytes", 1),
            m._setting("replica.fetch.response.max.bytes", 10485760), 0, self._session_id, self._session_epoch,
            list(by_topic.items()), list(by_forgotten.items()))

    def _session_answered(self, response) -> bool:
        """Advance the fetch session from a response; False when the session failed (the next
        fetch is full again, at once: nothing in the response is usable)."""
        code = response.error_code
        if code in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
            log.info("fetcher %s: broker %d answered %s for session %d epoch %d; starting a new session",
                     self.key, self.leader, ErrorCode(code).name, self._session_id, self._session_epoch)
            self._restart_session(keep_id=code == ErrorCode.INVALID_FETCH_SESSION_EPOCH)
            return False
        if code:
            self._restart_session()
            return True  # _handle logs it and backs off
        if self._session_epoch == INITIAL_EPOCH:
            self._session_id = response.session_id
            # Session id 0: the leader made none; keep sending full fetches asking for one.
            self._session_epoch = next_epoch(INITIAL_EPOCH) if self._session_id else INITIAL_EPOCH
            self._session_state = (self._pending_full or {}) if self._session_id else {}
        else:
            self._session_epoch = next_epoch(self._session_epoch)
            self._session_state.update(self._pending_changes)
            for key in self._pending_forgotten:
                self._session_state.pop(key, None)
        return True

    async def _handle(self, response) -> None:
        if response.error_code:
            log.info("fetcher %s: broker %d answered %s", self.key, self.leader, ErrorCode(response.error_code).name)
            await self._sleep_backoff()
            return
        for t in response.responses:
            for pr in t.partitions:
                key = (t.topic, pr.partition_index)
                part = self.partitions.get(key)
                if part is None or self.manager.lookup(*key) is not part:
                    continue  # moved or deleted while the fetch was out
                await self._handle_partition(part, pr)

    async def _handle_partition(self, part: Partition, pr) -> None:
        key = (part.topic, part.index)
        self._changed.add(key)  # appended, truncated or told a new log start: its fetch state moves
        code = ErrorCode(pr.error_code)
        lg = part.log
        if code == ErrorCode.NONE:
            de = getattr(pr, "diverging_epoch", None)
            if de is not None and (de.epoch >= 0 or de.end_offset >= 0):
                offset, _ = truncation_offset(lg.end_offset_for_epoch, lg.log_end_offset, part.high_watermark,
                                              de.epoch, de.end_offset)
                log.info("%s-%d: log diverges from leader %d (its epoch %d ends at %d): truncating %d -> %d",
                         part.topic, part.index, self.leader, de.epoch, de.end_offset, lg.log_end_offset, offset)
                before = (lg.log_end_offset, lg.latest_epoch)
                follower.truncate(part, offset)
                if (lg.log_end_offset, lg.latest_epoch) == before:
                    # Nothing changed: asking again at once would spin; the leader's view may
                    # still be settling (a new epoch), so back off.
                    self._hold(key)
                return
            if self._not_ready:
                self._not_ready.pop(key, None)
            records = pr.records
            if records:
                await follower.append_as_follower(part, records)
            follower.update_high_watermark(part, pr.high_watermark, pr.log_start_offset)
            return
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            leader_start = pr.log_start_offset
            if leader_start >= 0 and lg.log_end_offset < leader_start:
                log.info("%s-%d: log end %d below leader %d's log start %d: restarting the log there",
                         part.topic, part.index, lg.log_end_offset, self.leader, leader_start)
                follower.truncate(part, leader_start, fully=True)
            else:
                offset = min(part.high_watermark, lg.log_end_offset)
                log.info("%s-%d: fetch offset %d out of range on leader %d; truncating to the high watermark %d",
                         part.topic, part.index, lg.log_end_offset, self.leader, offset)
                follower.truncate(part, offset)
                self._hold(key)
            return
        # Not (yet) the leader of this epoch, or gone: wait for metadata to catch up.
        wait = self._hold_not_ready(key)
        log.debug("%s-%d: leader %d answered %s; fetching it again in %.0f ms", part.topic, part.index,
                  self.leader, code.name, wait * 1000)
