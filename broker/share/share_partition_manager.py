"""Share-partitions on their partition leader (Kafka's SharePartitionManager + DelayedShareFetch):
the in-flight windows this broker holds, how ShareFetch acquires records from the log, how
acknowledgements are persisted before they are answered, and when windows are dropped.

- A share-partition (group, topic, partition) is taken up on the first fetch or acknowledgement
  that needs it while this broker leads the partition: its state is read from the share
  coordinator (ReadShareGroupState with this leader's epoch, which fences the previous leader's
  writes); a start offset of -1 (never consumed) is resolved with the group's
  ``share.auto.offset.reset``: latest = the high watermark, earliest = the log start,
  by_duration = the first record at most that old (else latest). Acknowledged records are never
  delivered again; acquired-but-unacknowledged ones come back as available.
- A fetch reads whole batches from the next fetch offset up to the high watermark (the last stable
  offset with ``share.isolation.level=read_committed``, whose aborted transactional batches are
  archived, never delivered), acquires what the window allows (broker/share/share_partition.py),
  and returns the batches holding acquired records. With nothing to acquire it waits, up to its
  MaxWaitMs, for an append, a release or an expired lock on one of its partitions.
- Acknowledgements (and releases of a member's records when its share session ends) are
  written with WriteShareGroupState — the changed state batches, the start offset, this leader's
  epoch and the state epoch — and only then committed and answered. A failed write rolls the
  records back and answers the error (NOT_LEADER_OR_FOLLOWER when fenced: the window is dropped
  and taken up again from the share coordinator; COORDINATOR_NOT_AVAILABLE when it is
  unreachable).
- Acquisition locks last ``share.record.lock.duration.ms`` of the group (else the broker's
  ``group.share.record.lock.duration.ms``, within the min/max bounds); one timer per
  share-partition releases expired locks and persists the result.
- Windows are dropped when this broker stops leading the partition (its leader epoch changed), when
  the topic is deleted, and when a group has no share session on this broker any more.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.config.group_configs import effective, parse_auto_offset_reset
from broker.share.share_partition import AckError, Acquired, SharePartition, StateBatch, Transition
from protocol.errors import ErrorCode
from storage import batch as B
from storage.log import OffsetOutOfRangeError

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.replica_manager import ReplicaManager
    from broker.share.persister import SharePersister
    from cluster.metadata_store import MetadataStore

log = logging.getLogger("broker.share")
E = ErrorCode

Key = tuple[str, str, int]  # (group id, topic, partition)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class FetchResult:
    error: int = E.NONE
    message: str | None = None
    records: bytes = b""
    acquired: list[Acquired] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class _QueuedWrite:
    batches: list[tuple[int, int, int, int]]
    tr: Transition | None  # committed or rolled back by the writer; None: a lock-expiry release
    done: asyncio.Future[int]


@dataclass(slots=True, eq=False)
class ManagedSharePartition:
    key: Key
    topic_id: uuid.UUID
    part: Any  # broker.replica_manager.Partition it was taken up on
    leader_epoch: int
    state_epoch: int
    sp: SharePartition
    timer: asyncio.TimerHandle | None = None
    timer_at: int = -1
    waiters: set[asyncio.Future[None]] = field(default_factory=set)
    dropped: bool = False
    # State writes wait here while one is in flight (SharePartitionManager._writer).
    write_queue: list[_QueuedWrite] = field(default_factory=list)
    writer: asyncio.Task[None] | None = None

    def wake(self) -> None:
        for fut in self.waiters:
            if not fut.done():
                fut.set_result(None)
        self.waiters.clear()


class ShareStats:
    """Counters for the Prometheus endpoint (broker/metrics)."""

    def __init__(self) -> None:
        self.acquired_records = 0
        self.redelivered_records = 0
        self.acknowledged: dict[str, int] = {"accept": 0, "release": 0, "reject": 0, "gap": 0}
        self.lock_expired_records = 0
        self.write_failures = 0
        # Kafka's BrokerTopicMetrics share-request meters, per topic: [total, failed].
        self.fetch_requests: dict[str, list[int]] = {}
        self.ack_requests: dict[str, list[int]] = {}

    @staticmethod
    def count(table: dict[str, list[int]], failed_by_topic: dict[str, bool]) -> None:
        """One request, counted once per topic it names, and as failed where a partition failed."""
        for topic, failed in failed_by_topic.items():
            row = table.setdefault(topic, [0, 0])
            row[0] += 1
            row[1] += bool(failed)


_ACK_NAMES = {0: "gap", 1: "accept", 2: "release", 3: "reject"}


class SharePartitionManager:
    def __init__(self, config: BrokerConfig, metadata: MetadataStore, partitions: ReplicaManager,
                 persister: SharePersister) -> None:
        self.config = config
        self.metadata = metadata
        self.replicas = partitions
        self.persister = persister
        cfg = config
        self.max_in_flight = int(cfg.get("group.share.partition.max.record.locks"))
        self.delivery_count_limit = int(cfg.get("group.share.delivery.count.limit"))
        self.stats = ShareStats()
        self.partitions: dict[Key, ManagedSharePartition] = {}
        self._initializing: dict[Key, asyncio.Future[tuple[ManagedSharePartition | None, int, str | None]]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- configuration ---------------------------------------------------------------------------

    def _group_config(self, group_id: str, name: str) -> str:
        return effective(self.metadata.group_configs().get(group_id, {}), name, self.config.get)

    def lock_duration_ms(self, group_id: str) -> int:
        cfg = self.config
        value = int(self._group_config(group_id, "share.record.lock.duration.ms"))
        lo, hi = int(cfg.get("group.share.min.record.lock.duration.ms")), int(cfg.get("group.share.max.record.lock.duration.ms"))
        return min(max(value, lo), max(hi, lo))

    def read_committed(self, group_id: str) -> bool:
        return self._group_config(group_id, "share.isolation.level") == "read_committed"

    async def stop(self) -> None:
        for msp in list(self.partitions.values()):
            self._drop(msp)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # --- taking up share-partitions --------------------------------------------------------------

    def cached(self, key: Key) -> ManagedSharePartition | None:
        msp = self.partitions.get(key)
        if msp is None or msp.dropped:
            return None
        part, code = self.replicas.get_leader(key[1], key[2])
        if part is not msp.part or part.leader_epoch != msp.leader_epoch:
            self._drop(msp)
            return None
        return msp

    async def share_partition(self, key: Key, topic_id: uuid.UUID) -> tuple[ManagedSharePartition | None, int, str | None]:
        """The share-partition, taken up here if needed; (None, error, message) when it cannot be."""
        msp = self.cached(key)
        if msp is not None:
            return msp, E.NONE, None
        part, code = self.replicas.get_leader(key[1], key[2])
        if part is None:
            return None, code, None
        pending = self._initializing.get(key)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._initializing[key] = pending
            try:
                pending.set_result(await self._take_up(key, topic_id, part))
            except BaseException as e:
                pending.set_result((None, E.UNKNOWN_SERVER_ERROR, str(e)))
                if isinstance(e, asyncio.CancelledError):
                    raise
            finally:
                self._initializing.pop(key, None)
        return await asyncio.shield(pending)

    async def _take_up(self, key: Key, topic_id: uuid.UUID, part: Any) -> tuple[ManagedSharePartition | None, int,
                                                                                  str | None]:
        group_id, topic, index = key
        epoch = part.leader_epoch
        code, msg, state_epoch, start, batches = await self.persister.read(group_id, topic_id, index, epoch)
        if code != E.NONE:
            mapped = (E.NOT_LEADER_OR_FOLLOWER if code in (E.FENCED_LEADER_EPOCH, E.FENCED_STATE_EPOCH) else
                      E.COORDINATOR_NOT_AVAILABLE if code in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE,
                                                              E.COORDINATOR_LOAD_IN_PROGRESS) else
                      E.UNKNOWN_TOPIC_OR_PARTITION if code == E.UNKNOWN_TOPIC_OR_PARTITION else E.UNKNOWN_SERVER_ERROR)
            log.warning("share-partition %s-%s-%d: reading its state failed (%s: %s)", group_id, topic, index,
                        ErrorCode(code).name if code in ErrorCode._value2member_map_ else code, msg)
            return None, mapped, msg
        now, current = self.replicas.get_leader(topic, index)
        if now is not part or part.leader_epoch != epoch:
            return None, E.NOT_LEADER_OR_FOLLOWER, None
        if start < 0:
            start = self._reset_offset(group_id, part)
        sp = SharePartition(start, [StateBatch(*b) for b in batches], max_in_flight=self.max_in_flight,
                            max_delivery_count=self.delivery_count_limit)
        sp.update_log_start(part.log.log_start_offset)
        msp = ManagedSharePartition(key, topic_id, part, epoch, state_epoch, sp)
        old = self.partitions.get(key)
        if old is not None:
            self._drop(old)
        self.partitions[key] = msp
        log.info("share-partition %s-%s-%d taken up at leader epoch %d: start offset %d, end offset %d, "
                 "state epoch %d", group_id, topic, index, epoch, sp.start_offset, sp.end_offset, state_epoch)
        return msp, E.NONE, None

    def _reset_offset(self, group_id: str, part: Any) -> int:
        strategy, ms = parse_auto_offset_reset(self._group_config(group_id, "share.auto.offset.reset"))
        lg = part.log
        if strategy == "earliest":
            return lg.log_start_offset
        if strategy == "by_duration":
            found = lg.offset_for_timestamp(_now_ms() - ms)
            if found is not None:
                return min(found[0], part.high_watermark)
        return part.high_watermark

    def _drop(self, msp: ManagedSharePartition) -> None:
        msp.dropped = True
        if msp.timer is not None:
            msp.timer.cancel()
            msp.timer = None
        msp.wake()
        if self.partitions.get(msp.key) is msp:
            del self.partitions[msp.key]

    def drop_partition(self, topic: str, partition: int | None = None) -> None:
        """The partition's leadership changed (or the topic is gone): its windows are dropped."""
        for key, msp in list(self.partitions.items()):
            if key[1] == topic and (partition is None or key[2] == partition):
                self._drop(msp)

    def drop_group(self, group_id: str) -> None:
        for key, msp in list(self.partitions.items()):
            if key[0] == group_id:
                self._drop(msp)

    # --- lock expiry -----------------------------------------------------------------------------

    def _schedule_timer(self, msp: ManagedSharePartition) -> None:
        deadline = msp.sp.next_deadline()
        if deadline is None or msp.dropped:
            return
        if msp.timer is not None and msp.timer_at <= deadline:
            return
        if msp.timer is not None:
            msp.timer.cancel()
        msp.timer_at = deadline
        delay = max(deadline - _now_ms(), 0) / 1000
        msp.timer = asyncio.get_running_loop().call_later(delay, self._expire, msp)

    def _expire(self, msp: ManagedSharePartition) -> None:
        msp.timer = None
        if msp.dropped:
            return
        expired = msp.sp.expire_locks(_now_ms())
        if expired:
            n = sum(b.last_offset - b.first_offset + 1 for b in expired)
            self.stats.lock_expired_records += n
            log.debug("share-partition %s: %d records released by lock expiry", msp.key, n)
            # Persisted afterwards, as Kafka does: the release stands even if the write fails.
            self._write(msp, [(b.first_offset, b.last_offset, b.state, b.delivery_count) for b in expired])
            msp.wake()
        self._schedule_timer(msp)

    # --- persistence -------------------------------------------------------------------------------

    def _write(self, msp: ManagedSharePartition, batches: list[tuple[int, int, int, int]],
               tr: Transition | None = None) -> asyncio.Future[int]:
        """Queue a state write of ``batches`` (committing or rolling back ``tr`` once written);
        the future has the error to answer.

        One write per share-partition is in flight at a time, and what queued meanwhile goes as
        one write, in order: each write's start offset is computed once everything before it
        was committed or rolled back. Concurrent writes could reach the share coordinator in
        either order, and the later one's start offset (computed while the other was pending)
        would move the durable SPSO back over records already acknowledged."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        msp.write_queue.append(_QueuedWrite(batches, tr, fut))
        if msp.writer is None or msp.writer.done():
            msp.writer = asyncio.get_running_loop().create_task(self._writer(msp), name="share-state-writer")
            self._tasks.add(msp.writer)
            msp.writer.add_done_callback(self._tasks.discard)
        return fut

    async def _writer(self, msp: ManagedSharePartition) -> None:
        items: list[_QueuedWrite] = []
        try:
            while msp.write_queue:
                items, msp.write_queue = msp.write_queue, []
                try:
                    code = await self._write_now(msp, [b for w in items for b in w.batches], [w.tr for w in items])
                except Exception:  # noqa: BLE001 - the waiters get an error, never a hang
                    log.exception("share-partition %s: state write failed", msp.key)
                    code = E.UNKNOWN_SERVER_ERROR
                now = _now_ms()
                for w in items:
                    if w.tr is not None:
                        msp.sp.complete(w.tr, code == E.NONE, now)
                for w in items:
                    if not w.done.done():
                        w.done.set_result(code)
                items = []
                self._schedule_timer(msp)
                msp.wake()
        finally:  # cancelled (the broker stopping): nobody waits for ever
            for w in [*items, *msp.write_queue]:
                if not w.done.done():
                    w.done.set_result(E.COORDINATOR_NOT_AVAILABLE)

    async def _write_now(self, msp: ManagedSharePartition, batches: list[tuple[int, int, int, int]],
                         trs: list[Transition | None]) -> int:
        group_id, _topic, index = msp.key
        start = msp.sp.start_offset_after(*trs)
        code, msg = await self.persister.write(group_id, msp.topic_id, index, msp.state_epoch,
                                                            msp.leader_epoch, start, batches)
        if code != E.NONE:
            self.stats.write_failures += 1
            log.warning("share-partition %s-%s-%d: writing its state failed (%s: %s)", group_id, msp.key[1], index,
                        ErrorCode(code).name if code in ErrorCode._value2member_map_ else code, msg)
            if code in (E.FENCED_LEADER_EPOCH, E.FENCED_STATE_EPOCH):
                self._drop(msp)
                return E.NOT_LEADER_OR_FOLLOWER
            if code in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS,
                        E.REQUEST_TIMED_OUT):
                return E.COORDINATOR_NOT_AVAILABLE
            if code == E.UNKNOWN_TOPIC_OR_PARTITION:
                return E.UNKNOWN_TOPIC_OR_PARTITION
            return E.UNKNOWN_SERVER_ERROR
        return E.NONE

    async def _persist(self, msp: ManagedSharePartition, tr: Transition) -> int:
        """Write a transition, committed or rolled back by the writer; the error to answer."""
        if not tr:
            return E.NONE
        return await self._write(msp, [(b.first_offset, b.last_offset, b.state, b.delivery_count)
                                       for b in tr.batches], tr)

    # --- acknowledgements and releases -------------------------------------------------------------

    async def acknowledge(self, group_id: str, member_id: str,
                          acks: dict[tuple[str, int], tuple[uuid.UUID, list[tuple[int, int, list[int]]]]]
                          ) -> dict[tuple[str, int], tuple[int, str | None]]:
        async def one(tp: tuple[str, int], tid: uuid.UUID, batches: list[tuple[int, int, list[int]]]
                      ) -> tuple[int, str | None]:
            key = (group_id, tp[0], tp[1])
            msp = self.cached(key)
            if msp is None:
                part, code = self.replicas.get_leader(*tp)
                if part is None:
                    return code, None
                return E.UNKNOWN_TOPIC_OR_PARTITION, "Share partition not found."
            try:
                tr = msp.sp.acknowledge(member_id, batches)
            except AckError as e:
                log.info("share group %s member %s: acknowledgement of %s-%d refused (%s: %s)", group_id, member_id,
                         tp[0], tp[1], e.code.name, e.message)
                return e.code, e.message
            code = await self._persist(msp, tr)
            if code == E.NONE:
                for first, last, types in batches:
                    if len(types) == 1:
                        self.stats.acknowledged[_ACK_NAMES.get(types[0], "gap")] += last - first + 1
                    else:
                        for t in types:
                            self.stats.acknowledged[_ACK_NAMES.get(t, "gap")] += 1
            return code, None

        keys = list(acks)
        results = await asyncio.gather(*(one(tp, *acks[tp]) for tp in keys))
        return dict(zip(keys, results, strict=True))

    async def release(self, group_id: str, member_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        """The member's share session ended: its acquired records become available again."""
        jobs = []
        for topic, index in partitions:
            msp = self.cached((group_id, topic, index))
            if msp is None:
                continue
            tr = msp.sp.release_member(member_id)
            if tr:
                n = sum(b.last_offset - b.first_offset + 1 for b in tr.batches)
                log.info("share group %s member %s: released %d records of %s-%d", group_id, member_id, n, topic, index)
                jobs.append(self._persist(msp, tr))
        if jobs:
            await asyncio.gather(*jobs)

    # --- fetch ---------------------------------------------------------------------------------

    async def fetch(self, group_id: str, member_id: str, items: list[tuple[str, uuid.UUID, int]], *,
                    max_records: int, batch_size: int, max_bytes: int, min_bytes: int, max_wait_ms: int
                    ) -> dict[tuple[str, int], FetchResult]:
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + max(max_wait_ms, 0) / 1000
        read_committed = self.read_committed(group_id)
        lock_ms = self.lock_duration_ms(group_id)
        while True:
            results: dict[tuple[str, int], FetchResult] = {}
            waits: list[Any] = []
            remaining = max_records
            total = 0
            errors = False
            per_partition = max(max_bytes // max(len(items), 1), 1)
            for topic, tid, index in items:
                msp, code, msg = await self.share_partition((group_id, topic, index), tid)
                if msp is None:
                    results[(topic, index)] = FetchResult(code, msg)
                    errors = True
                    continue
                waits.append(msp)
                if remaining <= 0 or total >= max_bytes:
                    results[(topic, index)] = FetchResult()
                    continue
                res = self._fetch_one(msp, member_id, remaining, batch_size, min(per_partition, max_bytes - total),
                                      total == 0, lock_ms, read_committed)
                results[(topic, index)] = res
                got = sum(a.last_offset - a.first_offset + 1 for a in res.acquired)
                remaining -= got
                total += len(res.records)
            if total >= max(min_bytes, 1) or errors or max_records <= 0:
                return results
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                return results
            fut: asyncio.Future[None] = loop.create_future()
            for msp in waits:
                msp.waiters.add(fut)
                msp.part.add_waiter(fut)
            try:
                await asyncio.wait_for(asyncio.shield(fut), timeout)
            except TimeoutError:
                pass
            finally:
                for msp in waits:
                    msp.waiters.discard(fut)
                    msp.part.remove_waiter(fut)

    def _fetch_one(self, msp: ManagedSharePartition, member_id: str, max_records: int, batch_size: int,
                   max_bytes: int, first: bool, lock_ms: int, read_committed: bool) -> FetchResult:
        sp, part = msp.sp, msp.part
        if not sp.can_acquire():
            return FetchResult()
        lg = part.log
        if sp.start_offset < lg.log_start_offset:
            sp.update_log_start(lg.log_start_offset)
        upper = part.last_stable_offset if read_committed else part.high_watermark
        offset = sp.next_fetch_offset()
        if offset >= upper:
            return FetchResult()
        try:
            rr = lg.read(offset, max_bytes, max_offset=upper, min_one_batch=True)
        except OffsetOutOfRangeError:
            sp.update_log_start(lg.log_start_offset)
            offset = sp.next_fetch_offset()
            if offset >= upper:
                return FetchResult()
            rr = lg.read(offset, max_bytes, max_offset=upper, min_one_batch=True)
        if not rr.size:
            return FetchResult()
        data = rr.chunks[0] if len(rr.chunks) == 1 else b"".join(rr.chunks)
        data = bytes(data)
        headers = list(B.iter_headers(data, check=False))
        now = _now_ms()
        acquired = sp.acquire(member_id, offset, [(h.base_offset, h.last_offset) for h in headers],
                              max_records=max_records, batch_size=batch_size, lock_ms=lock_ms, now_ms=now)
        if acquired and read_committed:
            aborted = _aborted_ranges(headers, lg.collect_aborted_txns(offset, upper))
            if aborted:
                sp.archive_acquired(member_id, aborted)
                acquired = _subtract(acquired, aborted)
        if not acquired:
            return FetchResult()
        self.stats.acquired_records += sum(a.last_offset - a.first_offset + 1 for a in acquired)
        self.stats.redelivered_records += sum(a.last_offset - a.first_offset + 1 for a in acquired
                                              if a.delivery_count > 1)
        self._schedule_timer(msp)
        return FetchResult(records=_trim(data, headers, acquired[0].first_offset, acquired[-1].last_offset),
                           acquired=acquired)

    # --- views ---------------------------------------------------------------------------------

    def in_flight_records(self) -> int:
        return sum(msp.sp.in_flight for msp in self.partitions.values())

    def acquired_records(self) -> int:
        return sum(msp.sp.acquired_count() for msp in self.partitions.values())


def _aborted_ranges(headers: list[Any], aborted: list[Any]) -> list[tuple[int, int]]:
    """Offset ranges of the data batches of aborted transactions among ``headers`` (the consumer's
    read_committed walk: a producer's transactional batches from its aborted transaction's first
    offset up to its ABORT marker)."""
    txns = sorted(aborted, key=lambda a: a.first_offset)
    ongoing: set[int] = set()
    i = 0
    out = []
    for h in headers:
        while i < len(txns) and txns[i].first_offset <= h.last_offset:
            ongoing.add(txns[i].producer_id)
            i += 1
        if h.is_control:
            ongoing.discard(h.producer_id)
        elif h.is_transactional and h.producer_id in ongoing:
            out.append((h.base_offset, h.last_offset))
    return out


def _subtract(acquired: list[Acquired], ranges: list[tuple[int, int]]) -> list[Acquired]:
    out = []
    for a in acquired:
        pieces = [(a.first_offset, a.last_offset)]
        for lo, hi in ranges:
            nxt = []
            for f, la in pieces:
                if hi < f or lo > la:
                    nxt.append((f, la))
                    continue
                if f < lo:
                    nxt.append((f, lo - 1))
                if la > hi:
                    nxt.append((hi + 1, la))
            pieces = nxt
        out.extend(Acquired(f, la, a.delivery_count) for f, la in pieces)
    return out


def _trim(data: bytes, headers: list[Any], first: int, last: int) -> bytes:
    """The batches of ``data`` that hold offsets first..last (whole batches, back to back)."""
    start = end = None
    pos = 0
    for h in headers:
        size = h.size
        if h.last_offset >= first and start is None:
            start = pos
        if h.base_offset <= last:
            end = pos + size
        pos += size
    if start is None or end is None or end <= start:
        return b""
    return data[start:end]
