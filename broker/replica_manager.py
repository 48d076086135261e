"""Partitions this broker leads: their logs, high watermark / LSO, appends, flushes and fetch
wake-ups.

Handlers reach storage only through here, so that replication (follower fetch, ISR, a high
watermark below the log end) can later change what "committed" means in one place.

Flushes (fsync) never run on the event loop: `ReplicaManager.flush` plans one on the loop, runs
its fsync in the default executor and completes it on the loop (storage.log's plan_flush /
FlushPlan.sync / complete_flush). A log has at most one flush in flight; requests made meanwhile
share a single follow-up flush. Appends report flush.messages being reached (`flush_due`) and
the produce path awaits the flush before acknowledging.

Partition creation (a new topic, CreatePartitions) is a background job per topic
(`start_creation`): steps of CREATE_STEP partitions whose directories and first files are made
in the executor, registered on the loop in between, so other clients keep being served. The
topic is registered in metadata first (one atomic write); a job cancelled by a stop leaves the
rest to the next start, one cancelled by DeleteTopics deletes what its last step made. Deletion
likewise: partitions stop being served at once, their files go in steps in the executor.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from broker.metrics.stats import BrokerTopicStats
from broker.replication.fetcher import ReplicaFetcherManager
from broker.replication.isr import IsrManager
from broker.replication.leader import LeaderState
from protocol.errors import ErrorCode, KafkaError
from storage import batch as B
from storage import record_validation as RV
from storage.checkpoints import OffsetCheckpointFile
from storage.log import AbortedTxn

if TYPE_CHECKING:
    from broker.broker import Broker
    from storage.log import Log

log = logging.getLogger("broker.replica_manager")


# Partitions whose logs one step of a creation job opens in an executor thread (~1 ms each): the
# loop gets the GIL between steps, and a stop waits for at most one step.
CREATE_STEP = 32
DELETE_STEP = 64

HW_CHECKPOINT = "replication-offset-checkpoint"

# A flush request without an end offset: everything appended when the flush is planned.
_FLUSH_ALL = 1 << 63


@dataclass(slots=True)
class AppendOutcome:
    error: ErrorCode = ErrorCode.NONE
    base_offset: int = -1
    last_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None
    record_errors: list[tuple[int, str | None]] = field(default_factory=list)
    flush_due: bool = False  # flush.messages reached: flush before acknowledging (see ReplicaManager.flush)


class Partition:
    """One partition this broker holds a replica of (a single node: leads).

    ``replicated`` (cluster mode): the high watermark is tracked (``hw``) instead of being the log
    end offset; ``leader_state`` is set while this broker leads the partition (followers' log end
    offsets, acks=all waits, broker.replication.leader)."""

    __slots__ = ("topic", "index", "log", "leader_epoch", "_waiters", "_log_waiters", "producer_state", "max_message_bytes",
                 "_flush_task", "_flush_waiters", "_flush_up_to", "replicated", "hw", "leader_state")

    def __init__(self, topic: str, index: int, log: Log, leader_epoch: int, max_message_bytes: int, *,
                 replicated: bool = False) -> None:
        self.topic = topic
        self.max_message_bytes = max_message_bytes
        self.index = index
        self.log = log
        self.leader_epoch = leader_epoch
        self._waiters: set[asyncio.Future[None]] = set()
        self._log_waiters: set[asyncio.Future[None]] = set()
        self.producer_state = getattr(log, "producer_state", None)
        # ReplicaManager.flush: the task running this log's flushes, the futures waiting for the
        # next one, and how far that one must reach.
        self._flush_task: asyncio.Task[None] | None = None
        self._flush_waiters: list[asyncio.Future[None]] = []
        self._flush_up_to = 0
        self.replicated = replicated
        # Replicated: committed up to here. A restarted replica starts at its log start offset and
        # learns the real value from its leader's fetch answers (or, leading, from its followers).
        self.hw = log.log_start_offset
        self.leader_state: LeaderState | None = None

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

    def wake_waiters(self, *, hw_only: bool = False) -> None:
        """Wake parked fetches: all of them, or with ``hw_only`` (only the high watermark moved)
        those that read up to it."""
        for waiters in (self._waiters,) if hw_only else (self._waiters, self._log_waiters):
            if waiters:
                for fut in waiters:
                    if not fut.done():
                        fut.set_result(None)
                waiters.clear()


class RecordErrors(KafkaError):
    """INVALID_RECORD with per-record errors (batch index, message) for ProduceResponse.record_errors."""

    def __init__(self, message: str, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(ErrorCode.INVALID_RECORD, message)
        self.record_errors = record_errors


def validate_batches(buf: bytearray | memoryview, max_message_bytes: int, *,
                     compacted_tp: str | None = None) -> list[B.BatchHeader]:
    """Validation of a produce request's records for one partition (v3+ rules): the batch header
    and CRC, then every record (storage.record_validation, Kafka's LogValidator checks).
    ``compacted_tp``: "topic-partition" of a compacted topic, whose records need keys."""
    try:
        headers = list(B.iter_headers(buf, check=True))
    except B.UnsupportedMagicError as e:
        raise KafkaError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, str(e)) from None
    except B.InvalidBatchError as e:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(e)) from None
    if len(headers) != 1:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"Produce requests of version 3 and above must contain exactly one record batch, got {len(headers)}")
    h = headers[0]
    if h.size > max_message_bytes:
        raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                         f"The record batch size {h.size} exceeds max.message.bytes {max_message_bytes}")
    if h.is_control:
        raise KafkaError(ErrorCode.INVALID_RECORD, "Clients are not allowed to write control records")
    if h.records_count <= 0 or h.last_offset_delta != h.records_count - 1:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"Batch has {h.records_count} records but last offset delta {h.last_offset_delta}")
    try:
        RV.validate_records(buf, h, compacted_tp=compacted_tp,
                            max_decompressed=RV.decompressed_cap(max_message_bytes))
    except RV.InvalidRecordError as e:
        if e.record_errors:
            raise RecordErrors(str(e), e.record_errors) from None
        raise KafkaError(ErrorCode.INVALID_RECORD, str(e)) from None
    except B.InvalidBatchError as e:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(e)) from None
    return headers


# A compressed batch may hold ~1.3 M minimal records per MiB, and walking them takes about a second:
# from this size on, a compressed batch is validated on an executor thread (the walk reads only the
# request's bytes; offsets, producer state and the append stay on the event loop), so one hostile
# batch cannot stall every other connection. Uncompressed batches walk at >1 GB/s and stay inline.
OFFLOAD_VALIDATION_BYTES = 64 * 1024
# The low byte of the attributes (int16 at offset 21) holds the codec.
_CODEC_BYTE = B.ATTRIBUTES_OFFSET + 1


def validation_is_offloaded(buf: bytearray | memoryview) -> bool:
    return len(buf) >= OFFLOAD_VALIDATION_BYTES and bool(buf[_CODEC_BYTE] & B.COMPRESSION_MASK)


class ReplicaManager:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._creating: dict[str, asyncio.Task[None]] = {}  # topic -> its creation job
        self._deleting: dict[str, asyncio.Task[None]] = {}  # topic -> the job deleting its files
        self.topic_stats = BrokerTopicStats()  # messages / bytes in and out, for broker.metrics
        # Cluster mode only (broker.replication): follower fetchers and the leader's ISR changes.
        self.fetchers = ReplicaFetcherManager(self)
        self.isr = IsrManager(self)
        self._hw_checkpoint: dict[tuple[str, int], int] | None = None  # read once, at the first partition
        self._hw_task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def replicated(self) -> bool:
        return self.broker.cluster is not None

    def start_replication(self) -> None:
        """Cluster mode: start the ISR expiration check (fetchers start with follower roles)."""
        if self.replicated:
            self.isr.start()
            self._hw_task = asyncio.create_task(self._checkpoint_loop(), name="high-watermark-checkpoint")

    async def stop_replication(self) -> None:
        """Shutdown, before the listeners close: acks=all produces waiting for followers are
        answered NOT_LEADER_OR_FOLLOWER now (and new ones at once), so no request holds the stop
        until its timeout; fetchers stop; the high watermarks are checkpointed."""
        self._stopping = True
        if self._hw_task is not None:
            self._hw_task.cancel()
            await asyncio.gather(self._hw_task, return_exceptions=True)
            self._hw_task = None
        await self.fetchers.stop()
        await self.isr.stop()
        for part in self.partitions.values():
            if part.leader_state is not None:
                part.leader_state.fail_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if self.replicated:
            try:
                await asyncio.get_running_loop().run_in_executor(None, self.checkpoint_high_watermarks)
            except Exception:
                log.exception("writing the high-watermark checkpoint at shutdown failed")

    # Kafka's replication-offset-checkpoint (ReplicaManager.checkpointHighWatermarks): a restarted
    # replica starts from the high watermark it knew instead of its log start offset, so its
    # consumers keep reading and, as a new leader, it answers ListOffsets LATEST at once.

    def checkpoint_high_watermarks(self) -> None:
        lm = self.broker.log_manager
        by_dir: dict[Path, dict[tuple[str, int], int]] = {d: {} for d in lm.log_dirs}
        for key, part in list(self.partitions.items()):
            d = lm.dir_of(*key)
            if d is not None and part.replicated:
                by_dir.setdefault(d, {})[key] = part.high_watermark
        for d, offsets in by_dir.items():
            OffsetCheckpointFile(d / HW_CHECKPOINT).write(offsets)

    def _checkpointed_high_watermark(self, topic: str, partition: int) -> int | None:
        if self._hw_checkpoint is None:
            self._hw_checkpoint = {}
            for d in self.broker.log_manager.log_dirs:
                try:
                    self._hw_checkpoint.update(OffsetCheckpointFile(d / HW_CHECKPOINT).read())
                except FileNotFoundError:
                    pass
                except Exception as e:
                    log.warning("ignoring unreadable %s: %s", d / HW_CHECKPOINT, e)
        return self._hw_checkpoint.get((topic, partition))

    async def _checkpoint_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            interval = int(self.broker.config.get("replica.high.watermark.checkpoint.interval.ms") or 5000)
            await asyncio.sleep(interval / 1000)
            try:
                await loop.run_in_executor(None, self.checkpoint_high_watermarks)
            except Exception:
                log.exception("writing the high-watermark checkpoint failed")

    # --- lifecycle -------------------------------------------------------------------------

    def is_local(self, topic: str, partition: int) -> bool:
        """This broker holds a replica of the partition (a single node holds every partition)."""
        return self.broker.node_id in self.broker.metadata.replicas(topic, partition)

    def get_leader(self, topic: str, partition: int) -> tuple[Partition | None, ErrorCode]:
        """The partition if this broker may serve it as leader now, else the error to answer:
        UNKNOWN_TOPIC_OR_PARTITION for a partition the cluster does not have, NOT_LEADER_OR_FOLLOWER
        when another broker leads it, it has no leader, or this broker is fenced (cluster mode:
        its etcd session passed the local deadline, so another leader may already be elected)."""
        md = self.broker.metadata
        part = self.partitions.get((topic, partition))
        if part is None:
            info = md.get_topic(topic)
            if info is None or not 0 <= partition < info.num_partitions:
                return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return None, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if md.leader(topic, partition) != self.broker.node_id or md.fenced():
            return None, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if part.replicated and part.leader_state is None:
            return None, ErrorCode.NOT_LEADER_OR_FOLLOWER  # leadership not taken up yet
        return part, ErrorCode.NONE

    def update_leadership(self, topic: str) -> None:
        """Cluster mode: a leader, leader epoch, ISR or assignment of the topic changed in metadata.
        Replicas newly assigned here are created (they start as followers), replicas no longer
        assigned are dropped, and every local replica takes its role for the new state. Fetches
        waiting on any of them wake up to answer with the new state."""
        md = self.broker.metadata
        info = md.get_topic(topic)
        if info is None:
            return
        if any((topic, p) not in self.partitions and self.is_local(topic, p) for p in range(info.num_partitions)):
            self.start_creation(topic, info.topic_id)
        gone = [k for k in self.partitions if k[0] == topic and not self.is_local(*k)]
        if gone:
            self._drop_replicas(gone)
        for (t, _p), part in list(self.partitions.items()):
            if t == topic:
                self.apply_role(part)
                part.wake_waiters()

    def apply_role(self, part: Partition) -> None:
        """Lead, follow or idle according to metadata (Kafka's makeLeader / makeFollower)."""
        md = self.broker.metadata
        t, p = part.topic, part.index
        epoch = md.leader_epoch(t, p)
        leader = md.leader(t, p)
        me = self.broker.node_id
        if not part.replicated:
            if epoch != part.leader_epoch:
                part.leader_epoch = epoch
                part.log.assign_leader_epoch(epoch, part.log.log_end_offset)
            return
        now = int(time.time() * 1000)
        if leader == me:
            ls = part.leader_state
            if ls is None or ls.epoch != epoch:
                self.fetchers.remove(part)
                if ls is not None:
                    ls.fail_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                part.leader_epoch = epoch
                part.log.assign_leader_epoch(epoch, part.log.log_end_offset)
                followers = [r for r in md.replicas(t, p) if r != me]
                part.leader_state = LeaderState(epoch, part.log.log_end_offset, followers, now)
                log.info("%s-%d: leading epoch %d from offset %d (high watermark %d, ISR %s)", t, p, epoch,
                         part.log.log_end_offset, part.high_watermark, md.isr(t, p))
                self.broker.partition_role_changed(part)
            else:
                for r in md.replicas(t, p):
                    if r != me:
                        ls.add_follower(r, now)
            self.maybe_advance_high_watermark(part)
            return
        if part.leader_state is not None:
            part.leader_state.fail_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            part.leader_state = None
            log.info("%s-%d: no longer leader (leader %d, epoch %d)", t, p, leader, epoch)
        part.leader_epoch = epoch
        if leader >= 0:
            self.fetchers.add(part, leader)
        else:
            self.fetchers.remove(part)
        self.broker.partition_role_changed(part)

    def _drop_replicas(self, keys: list[tuple[str, int]]) -> None:
        """Replicas reassigned away from this broker: stop serving and fetching them, delete their logs."""
        logs = self._detach(keys, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if logs:
            topic = keys[0][0]
            previous = self._deleting.get(topic)
            job = asyncio.create_task(self._delete_logs(topic, logs, previous), name=f"delete-replicas-{topic}")
            self._deleting[topic] = job
            job.add_done_callback(partial(self._deletion_done, topic))

    def _detach(self, keys: list[tuple[str, int]], code: ErrorCode) -> list[Log]:
        """Stop serving and fetching ``keys`` (waiting acks=all produces get ``code``); their logs,
        detached from the log manager, for deletion."""
        lm = self.broker.log_manager
        logs = []
        for key in keys:
            part = self.partitions.pop(key)
            self.fetchers.remove(part)
            if part.leader_state is not None:
                part.leader_state.fail_waiters(code)
                part.leader_state = None
            part.wake_waiters()
            lg = lm.detach_log(*key)
            if lg is not None:
                logs.append(lg)
        return logs

    # --- replication (cluster mode) --------------------------------------------------------

    def record_follower_fetch(self, part: Partition, replica: int, fetch_offset: int, log_start: int = -1) -> None:
        """Leader: a follower fetched from ``fetch_offset`` (its log end offset); ``log_start`` is
        its log start offset (-1: not given)."""
        ls = part.leader_state
        if ls is None:
            return
        fs = ls.record_fetch(replica, fetch_offset, part.log.log_end_offset, int(time.time() * 1000), log_start)
        if fs is None:
            return
        self.isr.maybe_expand(part, replica)
        self.maybe_advance_high_watermark(part)

    def maybe_advance_high_watermark(self, part: Partition) -> None:
        """Leader: HW = min log end offset over the (maximal) ISR; never while fenced (another
        leader may be elected already), never backwards. Answers the acks=all produces it covers
        and wakes waiting fetches."""
        ls = part.leader_state
        md = self.broker.metadata
        if ls is None or md.fenced():
            return
        isr = md.isr(part.topic, part.index)
        new = ls.high_watermark_candidate(isr, self.broker.node_id, part.log.log_end_offset)
        if new is None or new <= part.hw:
            return
        part.hw = new
        ls.complete_waiters(part.high_watermark, lambda: self.min_isr_error(part, after_append=True))
        part.wake_waiters(hw_only=True)

    async def wait_replicated(self, part: Partition, required_offset: int, timeout_s: float) -> ErrorCode:
        """acks=all: wait until the high watermark reaches ``required_offset`` (the offset after the
        batch). NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND (ISR below min.insync.replicas by then),
        NOT_LEADER_OR_FOLLOWER (leadership lost) or REQUEST_TIMED_OUT."""
        ls = part.leader_state
        if not part.replicated:
            return ErrorCode.NONE
        if ls is None or self._stopping:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if part.high_watermark >= required_offset:
            return self.min_isr_error(part, after_append=True)
        fut = ls.add_waiter(required_offset)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), max(timeout_s, 0))
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT
        finally:
            ls.remove_waiter(fut)

    async def append_as_follower(self, part: Partition, records: bytes | bytearray) -> None:
        """Follower: append the leader's batches as they are, and replay them into producer state
        and the transaction index, so idempotence and transactions survive a failover."""
        buf = bytearray(records)
        try:
            headers = list(B.iter_headers(buf, check=True))
        except B.InvalidBatchError as e:
            # A fetch answer cut inside a batch, or damaged on the way: keep the whole batches.
            headers = []
            for h in B.iter_headers(buf, check=False):
                if h.position + h.size > len(buf):
                    break
                headers.append(h)
            if not headers:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{part.topic}-{part.index}: {e}") from None
        lg = part.log
        # A fetch answer starts at the batch holding the fetch offset: batches this replica has
        # already are skipped. One that straddles the log end means the two logs cut batches
        # differently there; the leader's log wins (the tail from that batch on is dropped).
        headers = [h for h in headers if h.last_offset >= lg.log_end_offset]
        if not headers:
            return
        if headers[0].base_offset < lg.log_end_offset:
            log.warning("%s-%d: fetched batch %d-%d straddles the log end %d; truncating to %d", part.topic,
                        part.index, headers[0].base_offset, headers[0].last_offset, lg.log_end_offset,
                        headers[0].base_offset)
            self.truncate_follower(part, headers[0].base_offset)
            if lg.log_end_offset != headers[0].base_offset:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{part.topic}-{part.index}: cannot continue the log at "
                                                            f"{headers[0].base_offset} (log end {lg.log_end_offset})")
        now = int(time.time() * 1000)
        result = lg.append_as_follower(buf, headers, now_ms=now)
        ps = part.producer_state
        if ps is not None:
            for h in headers:
                if not h.has_producer_id:
                    continue
                if h.is_control:
                    done = ps.update_from_log(h, buf)
                    if done is not None and done.is_aborted:
                        lg.add_aborted_txn(AbortedTxn(done.producer_id, done.first_offset, done.last_offset,
                                                      done.last_stable_offset))
                else:
                    ps.update_from_log(h)
        part.wake_waiters()
        if result.flush_due:
            await self.flush(part)

    def truncate_follower(self, part: Partition, offset: int, *, fully: bool = False) -> None:
        if fully:
            part.log.truncate_fully_and_start_at(offset)
            part.hw = offset
        else:
            part.log.truncate_to(offset)
        # What was committed can only be what the log still holds (a checkpointed or fetched
        # high watermark from before a divergence must not point past it).
        part.hw = min(part.hw, part.log.log_end_offset)
        part.wake_waiters()

    def update_follower_high_watermark(self, part: Partition, leader_hw: int, leader_log_start: int) -> None:
        """Follower: HW = min(leader's, own log end offset); the log start follows the leader's
        (DeleteRecords, retention) as Kafka's maybeIncrementLogStartOffset."""
        lg = part.log
        new = min(leader_hw, lg.log_end_offset)
        if new > part.hw:
            part.hw = new
            part.wake_waiters()
        if leader_log_start > lg.log_start_offset:
            lg.delete_records_before(min(leader_log_start, part.high_watermark, lg.log_end_offset))

    def min_isr_error(self, part: Partition, *, after_append: bool = False) -> ErrorCode:
        """Cluster mode, acks=all: NOT_ENOUGH_REPLICAS (before the append) or
        NOT_ENOUGH_REPLICAS_AFTER_APPEND while the ISR is smaller than the topic's
        min.insync.replicas (Kafka's Partition.appendRecordsToLeader / checkEnoughReplicasReachOffset).
        A single node keeps accepting, as before cluster mode existed."""
        if self.broker.cluster is None:
            return ErrorCode.NONE
        md = self.broker.metadata
        info = md.get_topic(part.topic)
        min_isr = int(self.broker.topic_properties(info.configs if info else {}).get("min.insync.replicas", 1))
        if len(md.isr(part.topic, part.index)) >= min_isr:
            return ErrorCode.NONE
        return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND if after_append else ErrorCode.NOT_ENOUGH_REPLICAS

    def ensure_topic(self, topic: str, num_partitions: int, configs: dict[str, str]) -> None:
        log_config = self.broker.log_config_for(configs)
        max_bytes = self.broker.max_message_bytes_for(configs)
        for p in range(num_partitions):
            if (topic, p) not in self.partitions and self.is_local(topic, p):
                lg = self.broker.log_manager.get_or_create_log(topic, p, log_config)
                epoch = self.broker.metadata.leader_epoch(topic, p)
                part = self._new_partition(topic, p, lg, epoch, max_bytes)
                self.apply_role(part)

    def _new_partition(self, topic: str, p: int, lg: Log, epoch: int, max_bytes: int) -> Partition:
        # The epoch is taken by apply_role: a leader starts it at its log end; a follower only
        # records it (its log gets the epoch from the leader's batches).
        part = Partition(topic, p, lg, -1 if self.replicated else epoch, max_bytes, replicated=self.replicated)
        if self.replicated:
            hw = self._checkpointed_high_watermark(topic, p)
            if hw is not None:
                part.hw = min(max(hw, lg.log_start_offset), lg.log_end_offset)
        else:
            lg.assign_leader_epoch(epoch, lg.log_end_offset)
            part.leader_epoch = epoch
        self.partitions[(topic, p)] = part
        return part

    def start_creation(self, topic: str, topic_id: uuid.UUID) -> None:
        """Create, in the background and in steps, the logs of the topic's partitions this broker
        lacks (a new topic, or CreatePartitions). A job already running for the topic picks up
        the new partition count at its next step. ``wait_created`` awaits it."""
        job = self._creating.get(topic)
        if job is not None and not job.done() and job.get_name() == f"create-{topic}-{topic_id}":
            return
        if job is not None:
            job.cancel()  # a previous incarnation of the name: remove_topic normally did this already
        job = asyncio.create_task(self._create_partitions(topic, topic_id), name=f"create-{topic}-{topic_id}")
        self._creating[topic] = job
        job.add_done_callback(partial(self._creation_done, topic))

    def _creation_done(self, topic: str, job: asyncio.Task[None]) -> None:
        if self._creating.get(topic) is job:
            del self._creating[topic]
        if not job.cancelled() and job.exception() is not None:
            log.error("creating the partitions of %s failed", topic, exc_info=job.exception())

    async def wait_created(self, topic: str) -> None:
        """Wait for the topic's creation job, if any; KAFKA_STORAGE_ERROR if it failed. Waiting is
        not cancelling: a caller that goes away (closed connection) leaves the job running."""
        job = self._creating.get(topic)
        if job is None:
            return
        await asyncio.wait([job])
        if job.cancelled():
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{topic}' was deleted while being created")
        if job.exception() is not None:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"Creating the partitions of '{topic}' failed: {job.exception()}")

    async def cancel_creations(self) -> None:
        """Shutdown: stop every creation and deletion job at its current step. Metadata already
        holds those topics, so the next start creates the partitions still missing; the logs
        still to delete are deleted by LogManager.shutdown."""
        jobs = list(self._creating.values()) + list(self._deleting.values())
        for job in jobs:
            job.cancel()
        if jobs:
            await asyncio.wait(jobs)

    async def _create_partitions(self, topic: str, topic_id: uuid.UUID) -> None:
        deleting = self._deleting.get(topic)
        if deleting is not None:
            await asyncio.wait([deleting])  # the dirs of a deleted topic of that name must go first
        loop = asyncio.get_running_loop()
        md = self.broker.metadata
        lm = self.broker.log_manager
        next_p = 0
        while True:
            info = md.get_topic(topic)
            if info is None or info.topic_id != topic_id:
                return
            chunk: list[int] = []
            while next_p < info.num_partitions and len(chunk) < CREATE_STEP:
                if (topic, next_p) not in self.partitions and self.is_local(topic, next_p):
                    chunk.append(next_p)
                next_p += 1
            if not chunk:
                return
            log_config = self.broker.log_config_for(info.configs)
            max_bytes = self.broker.max_message_bytes_for(info.configs)
            # Replicated: a new log gets its epochs from its leader's batches, or, leading, from
            # apply_role at its log end offset; an epoch entry made here would claim offset 0.
            epochs = {p: -1 if self.replicated else md.leader_epoch(topic, p) for p in chunk}
            # Logs already on disk (loaded at start-up) only need their Partition.
            new = [p for p in chunk if lm.get_log(topic, p) is None]
            opened: list[tuple[int, Log]] = []
            if new:
                planned = lm.reserve_dirs(topic, new)
                step = loop.run_in_executor(None, lm.open_new_logs, planned, log_config, epochs)
                try:
                    opened = await asyncio.shield(step)
                except asyncio.CancelledError:
                    # Deleted topic or shutdown: the step's thread finishes, then its logs are
                    # closed (or deleted with their topic), never registered.
                    await self._abandon_step(topic, topic_id, new, step)
                    raise
                except BaseException:
                    lm.release_dirs(topic, new)
                    raise
            for p, lg in opened:
                lm.register_log(topic, p, lg)
            for p in chunk:
                lg = lm.get_or_create_log(topic, p, log_config)  # registered: only a config check
                part = self._new_partition(topic, p, lg, md.leader_epoch(topic, p), max_bytes)
                self.apply_role(part)
            await asyncio.sleep(0)  # let requests in between steps even when nothing went to a thread

    async def _abandon_step(self, topic: str, topic_id: uuid.UUID, partitions: list[int],
                            step: asyncio.Future[list[tuple[int, Log]]]) -> None:
        await asyncio.wait([step])
        self.broker.log_manager.release_dirs(topic, partitions)
        if step.cancelled() or step.exception() is not None:
            return
        info = self.broker.metadata.get_topic(topic)
        gone = info is None or info.topic_id != topic_id
        logs = [lg for _, lg in step.result()]

        def discard() -> None:
            for lg in logs:
                lg.delete() if gone else lg.close()

        try:
            await asyncio.get_running_loop().run_in_executor(None, discard)
        except Exception:
            log.exception("discarding the logs of an abandoned creation step of %s failed", topic)

    def remove_topic(self, topic: str) -> None:
        """Stop serving the topic now; its files are deleted by a background job in steps
        (``wait_deleted``), which a creation of the same name waits for."""
        job = self._creating.pop(topic, None)
        if job is not None:
            job.cancel()
        self.topic_stats.remove_topic(topic)
        logs = self._detach([k for k in self.partitions if k[0] == topic], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if logs:
            previous = self._deleting.get(topic)
            job = asyncio.create_task(self._delete_logs(topic, logs, previous), name=f"delete-{topic}")
            self._deleting[topic] = job
            job.add_done_callback(partial(self._deletion_done, topic))

    async def _delete_logs(self, topic: str, logs: list[Log], previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        loop = asyncio.get_running_loop()
        lm = self.broker.log_manager
        for i in range(0, len(logs), DELETE_STEP):
            step = loop.run_in_executor(None, lm.delete_detached, logs[i:i + DELETE_STEP])
            try:
                await asyncio.shield(step)
            except asyncio.CancelledError:
                # A stop: the step finishes first, LogManager.shutdown deletes what is left.
                await asyncio.wait([step])
                raise
        log.info("deleted the logs of %d partition(s) of %s", len(logs), topic)

    def _deletion_done(self, topic: str, job: asyncio.Task[None]) -> None:
        if self._deleting.get(topic) is job:
            del self._deleting[topic]
        if not job.cancelled() and job.exception() is not None:
            log.error("deleting the logs of %s failed", topic, exc_info=job.exception())

    async def wait_deleted(self, topic: str) -> None:
        """Wait until the files of the topic's deleted partitions are gone (errors are logged)."""
        job = self._deleting.get(topic)
        if job is not None:
            await asyncio.wait([job])

    def update_configs(self, topic: str, configs: dict[str, str]) -> None:
        log_config = self.broker.log_config_for(configs)
        max_bytes = self.broker.max_message_bytes_for(configs)
        for (t, _), part in self.partitions.items():
            if t == topic:
                part.log.update_config(log_config)
                part.max_message_bytes = max_bytes

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def all(self) -> Iterable[Partition]:
        return self.partitions.values()

    # --- produce ---------------------------------------------------------------------------

    async def append_async(self, part: Partition, buf: bytearray | memoryview, *,
                           transactional_id: str | None = None) -> AppendOutcome:
        """``append``, with the record validation of a large compressed batch run off the loop and,
        in a cluster, the KIP-890 verification of a transactional batch asked of its coordinator
        (broker.txn_verification), which may be another broker."""
        verified = False
        if self.replicated and len(buf) >= 61 and buf[16] == 2 and buf[22] & 0x10:
            code = await self._verify_txn_remote(part, buf, transactional_id)
            if code != ErrorCode.NONE:
                return AppendOutcome(error=code, log_start_offset=part.log.log_start_offset,
                                     message=f"{part.topic}-{part.index} is not part of an ongoing transaction")
            if self.partitions.get((part.topic, part.index)) is not part or part.leader_state is None:
                return AppendOutcome(error=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                     message="The leadership moved during the transaction check.")
            verified = True
        if not validation_is_offloaded(buf):
            return self.append(part, buf, transactional_id=transactional_id, verified=verified)
        lg = part.log
        compacted_tp = f"{part.topic}-{part.index}" if lg.config.compact_enabled else None
        try:
            headers = await asyncio.get_running_loop().run_in_executor(
                None, partial(validate_batches, buf, part.max_message_bytes, compacted_tp=compacted_tp))
        except KafkaError as e:
            return AppendOutcome(error=e.code, message=e.message, log_start_offset=lg.log_start_offset,
                                 record_errors=getattr(e, "record_errors", []))
        if self.partitions.get((part.topic, part.index)) is not part:  # deleted meanwhile
            return AppendOutcome(error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 message="This server does not host this topic-partition.")
        return self.append(part, buf, transactional_id=transactional_id, headers=headers, verified=verified)

    async def _verify_txn_remote(self, part: Partition, buf: bytearray | memoryview,
                                 transactional_id: str | None) -> ErrorCode:
        from broker.txn_verification import verify

        try:
            h = B.parse_header(buf)
        except Exception:  # noqa: BLE001 - a malformed batch is answered by validation
            return ErrorCode.NONE
        if not h.has_producer_id:
            return ErrorCode.NONE
        ps = part.producer_state
        entry = ps.last_entry(h.producer_id) if ps is not None else None
        if entry is not None and entry.current_txn_first_offset is not None and entry.producer_epoch == h.producer_epoch:
            return ErrorCode.NONE  # the transaction is already open on this partition
        if not transactional_id:
            return ErrorCode.INVALID_TXN_STATE
        return await verify(self.broker, transactional_id, h.producer_id, h.producer_epoch, part.topic, part.index)

    def append(self, part: Partition, buf: bytearray | memoryview, *, now_ms: int | None = None,
               transactional_id: str | None = None, headers: list[B.BatchHeader] | None = None,
               verified: bool = False) -> AppendOutcome:
        """Validate and append one client batch; duplicates of recent idempotent batches are
        answered with their original offsets and not written again. ``headers``: the batch was
        validated already (``append_async``)."""
        lg = part.log
        now = int(time.time() * 1000) if now_ms is None else now_ms
        try:
            if headers is None:
                compacted_tp = f"{part.topic}-{part.index}" if lg.config.compact_enabled else None
                headers = validate_batches(buf, part.max_message_bytes, compacted_tp=compacted_tp)
            h = headers[0]
            ps = part.producer_state
            if ps is not None and h.has_producer_id:
                dup = ps.check_duplicate(h)
                if dup is not None:
                    # The original may still wait for its fsync (its flush in flight, or failed):
                    # the retry is acknowledged no earlier.
                    due = dup.last_offset >= lg.recovery_point and lg.flush_messages_due()
                    return AppendOutcome(base_offset=dup.first_offset, last_offset=dup.last_offset,
                                         log_start_offset=lg.log_start_offset, flush_due=due)
                if h.is_transactional and not verified:
                    self._verify_txn(part, h, transactional_id)
                ps.validate(h, now_ms=now)
            result = lg.append(buf, headers, leader_epoch=part.leader_epoch, now_ms=now)
            if ps is not None and h.has_producer_id:
                ps.update(h, now_ms=now)
        except KafkaError as e:
            return AppendOutcome(error=e.code, message=e.message, log_start_offset=lg.log_start_offset,
                                 record_errors=getattr(e, "record_errors", []))
        except Exception as e:  # a producer-state error carries a Kafka code
            code = getattr(e, "error_code", None)
            if code is None:
                raise
            return AppendOutcome(error=ErrorCode(code), message=str(e), log_start_offset=lg.log_start_offset)
        part.wake_waiters()
        self.topic_stats.on_append(part.topic, len(buf), sum(x.records_count for x in headers))
        if part.leader_state is not None:
            self.maybe_advance_high_watermark(part)  # an ISR of one commits at once
        return AppendOutcome(base_offset=result.first_offset, last_offset=result.last_offset,
                             log_append_time=result.log_append_time,
                             log_start_offset=lg.log_start_offset, flush_due=result.flush_due)

    def _verify_txn(self, part: Partition, h: B.BatchHeader, transactional_id: str | None) -> None:
        entry = part.producer_state.last_entry(h.producer_id)
        if entry is not None and entry.current_txn_first_offset is not None and entry.producer_epoch == h.producer_epoch:
            return  # the transaction is already open on this partition
        code = self.broker.verify_txn_partition(transactional_id, h.producer_id, h.producer_epoch, part.topic, part.index)
        if code == ErrorCode.INVALID_PRODUCER_ID_MAPPING:
            code = ErrorCode.INVALID_TXN_STATE
        elif code == ErrorCode.PRODUCER_FENCED:
            # As Kafka's AddPartitionsToTxnManager: producers expect INVALID_PRODUCER_EPOCH on Produce.
            code = ErrorCode.INVALID_PRODUCER_EPOCH
        if code != ErrorCode.NONE:
            raise KafkaError(ErrorCode(code), f"{part.topic}-{part.index} is not part of an ongoing transaction of "
                                              f"producer {h.producer_id} epoch {h.producer_epoch}")

    def append_control(self, part: Partition, buf: bytearray) -> int:
        """Append a coordinator-built batch (transaction marker, coordinator record).

        Like Kafka's coordinator-origin appends, data batches with a producer id (transactional
        offset commits) update producer state without client-side checks, so the LSO of
        ``__consumer_offsets`` reflects open offset transactions; markers are applied by the
        WriteTxnMarkers path, which needs their offset."""
        headers = list(B.iter_headers(buf, check=True))
        now = int(time.time() * 1000)
        result = part.log.append(buf, headers, leader_epoch=part.leader_epoch, now_ms=now)
        ps = part.producer_state
        if ps is not None:
            for h in headers:
                if h.has_producer_id and not h.is_control:
                    ps.update(h, now_ms=now)
        part.wake_waiters()
        if part.leader_state is not None:
            self.maybe_advance_high_watermark(part)
        # Callers await flush_due() before answering, so flush.messages holds for coordinator writes too.
        return result.first_offset

    async def flush_due(self, parts: Iterable[Partition]) -> None:
        """Wait for an fsync of each of ``parts`` whose flush.messages threshold is reached."""
        due = [self.flush(p) for p in set(parts) if p.log.flush_messages_due()]
        if due:
            await asyncio.gather(*due)

    # --- flush -----------------------------------------------------------------------------

    def flush(self, part: Partition, up_to: int | None = None) -> asyncio.Future[None]:
        """A future that resolves once an fsync of ``part``'s log covering everything appended so
        far (with ``up_to``: the offsets below it) has completed, or fails with its error.

        Never more than one flush of a log in flight (overlapping ones could move the recovery
        point past data still being fsynced): requests made while one runs share the next one,
        which is a group commit for concurrent producers. Each caller gets its own future, so
        a waiter cancelled with its connection cancels nothing else."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        part._flush_waiters.append(fut)
        target = _FLUSH_ALL if up_to is None else up_to
        if target > part._flush_up_to:
            part._flush_up_to = target
        if part._flush_task is None:
            part._flush_task = asyncio.create_task(self._run_flushes(part), name=f"flush-{part.topic}-{part.index}")
        return fut

    def schedule_flush(self, part: Partition) -> None:
        """Flush without waiting (acks=0, coordinator writes). Errors are logged by the flusher.
        Caveat: what is answered before that flush completes is not yet fsynced."""
        self.flush(part).add_done_callback(_retrieve)

    async def _run_flushes(self, part: Partition) -> None:
        lg = part.log
        loop = asyncio.get_running_loop()
        try:
            while part._flush_waiters:
                waiters, part._flush_waiters = part._flush_waiters, []
                up_to, part._flush_up_to = part._flush_up_to, 0
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
                    for w in waiters + part._flush_waiters:
                        w.cancel()
                    part._flush_waiters = []
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
            part._flush_task = None

    async def wait_flushes(self) -> None:
        """Wait until no flush is in flight (shutdown: the final synchronous flush of every log
        must not overlap one)."""
        while tasks := [p._flush_task for p in self.partitions.values() if p._flush_task is not None]:
            await asyncio.gather(*tasks, return_exceptions=True)


def _retrieve(fut: asyncio.Future[None]) -> None:
    """Done-callback of a flush nobody awaits: fetch its exception so asyncio does not report it
    as never retrieved (the flusher already logged it)."""
    if not fut.cancelled():
        fut.exception()
