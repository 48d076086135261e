"""The partitions this broker holds a replica of: the registry, their roles (lead, follow), the
high watermark and ISR work of a leader, creation and deletion jobs, and the high-watermark
checkpoint. Kafka's ReplicaManager.

Handlers reach partitions only through here. The parts it wires together sit in their own
modules: a partition's state and waiters (broker.partition) with its one append path
(storage.partition_log); leader appends and KIP-890 verification (broker.append_path, broker.txn_verification);
flushes (broker.log_flusher); replication (broker.replication: follower fetchers, the follower's
appends, ISR changes, the high watermark).

Partition creation (a new topic, CreatePartitions) is a background job per topic
(``start_creation``): steps of CREATE_STEP partitions whose directories and first files are made
in the executor, registered on the loop in between, so other clients keep being served. The
topic is registered in metadata first (one atomic write); a job cancelled by a stop leaves the
rest to the next start, one cancelled by DeleteTopics deletes what its last step made. Deletion
likewise: partitions stop being served at once, their files go in steps in the executor.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path

from broker import log_flusher
from broker.append_path import LeaderAppends
from broker.config import topic_log_config, topic_max_message_bytes
from broker.fetch_sessions import FetchSessionCache
from broker.metrics.stats import BrokerTopicStats
from broker.partition import Partition
from broker.replication.env import ReplicaEnv
from broker.replication.fetcher import ReplicaFetcherManager
from broker.replication.high_watermark import HighWatermarks
from broker.replication.isr import IsrManager
from broker.replication.leader import LeaderState, lag_clock_ms
from broker.txn_verification import TxnVerifier
from protocol.errors import ErrorCode, KafkaError
from storage import dir_failure
from storage.checkpoints import OffsetCheckpointFile
from storage.log import Log
from storage.log_manager import LogManager

log = logging.getLogger("broker.replica_manager")


# Partitions whose logs one step of a creation job opens in an executor thread (~1 ms each): the
# loop gets the GIL between steps, and a stop waits for at most one step.
CREATE_STEP = 32
DELETE_STEP = 64

HW_CHECKPOINT = "replication-offset-checkpoint"


def _ignore(_part: Partition) -> None:
    pass


class ReplicaManager:
    """``on_role_change(part)``: called after every role decision of a replicated partition (the
    broker loads and unloads the coordinators of internal partitions with it)."""

    def __init__(self, env: ReplicaEnv, log_manager: LogManager, verifier: TxnVerifier, *,
                 on_role_change: Callable[[Partition], None] = _ignore) -> None:
        self.env = env
        self.log_manager = log_manager
        self.partitions: dict[tuple[str, int], Partition] = {}
        # topic -> its partitions held here (kept with ``partitions``): per-topic work (a metadata
        # event, deletion, a config change) must not walk every partition of the broker.
        self._by_topic: dict[str, dict[int, Partition]] = {}
        self._on_role_change = on_role_change
        # Followers' fetch sessions on this broker (set by the broker): told of each leadership taken
        # up, so that followers start fetching it at once (FetchSessionCache.expect).
        self.fetch_sessions: FetchSessionCache | None = None
        self._creating: dict[str, asyncio.Task[None]] = {}  # topic -> its creation job
        self._deleting: dict[str, asyncio.Task[None]] = {}  # topic -> the job deleting its files
        self.topic_stats = BrokerTopicStats()  # messages / bytes in and out, for broker.metrics
        self.hw = HighWatermarks(env.node_id, env.config, env.metadata, replicated=env.replicated,
                                 stopping=lambda: self._stopping)
        self.appends = LeaderAppends(verifier, self.hw, self.topic_stats, self.get)
        # Cluster mode only (broker.replication): follower fetchers and the leader's ISR changes.
        self.fetchers = ReplicaFetcherManager(env, self.get)
        self.isr = IsrManager(env, self.all, self.hw)
        self._hw_checkpoint: dict[tuple[str, int], int] | None = None  # read once, at the first partition
        self._hw_task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def replicated(self) -> bool:
        return self.env.replicated

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
        lm = self.log_manager
        by_dir: dict[Path, dict[tuple[str, int], int]] = {d: {} for d in lm.log_dirs}
        for key, part in list(self.partitions.items()):
            d = lm.dir_of(*key)
            if d is not None and part.replicated:
                by_dir.setdefault(d, {})[key] = part.high_watermark
        for d, offsets in by_dir.items():
            try:
                OffsetCheckpointFile(d / HW_CHECKPOINT).write(offsets)
            except OSError as e:
                dir_failure.failed(d, e)  # as Kafka: a failed checkpoint write fails the log dir
                raise

    def _checkpointed_high_watermark(self, topic: str, partition: int) -> int | None:
        if self._hw_checkpoint is None:
            self._hw_checkpoint = {}
            for d in self.log_manager.log_dirs:
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
            interval = int(self.env.config.get("replica.high.watermark.checkpoint.interval.ms") or 5000)
            await asyncio.sleep(interval / 1000)
            try:
                await loop.run_in_executor(None, self.checkpoint_high_watermarks)
            except Exception:
                log.exception("writing the high-watermark checkpoint failed")

    # --- registry and roles ----------------------------------------------------------------

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def all(self) -> Iterable[Partition]:
        return self.partitions.values()

    def is_local(self, topic: str, partition: int) -> bool:
        """This broker holds a replica of the partition (a single node holds every partition)."""
        return self.env.node_id in self.env.metadata.replicas(topic, partition)

    def get_leader(self, topic: str, partition: int) -> tuple[Partition | None, ErrorCode]:
        """The partition if this broker may serve it as leader now, else the error to answer:
        UNKNOWN_TOPIC_OR_PARTITION for a partition the cluster does not have, NOT_LEADER_OR_FOLLOWER
        when another broker leads it, it has no leader, or this broker is fenced (cluster mode:
        its etcd session passed the local deadline, so another leader may already be elected)."""
        md = self.env.metadata
        part = self.partitions.get((topic, partition))
        if part is None:
            info = md.get_topic(topic)
            if info is None or not 0 <= partition < info.num_partitions:
                return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return None, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if md.leader(topic, partition) != self.env.node_id or md.fenced():
            return None, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if part.replicated and part.leader_state is None:
            return None, ErrorCode.NOT_LEADER_OR_FOLLOWER  # leadership not taken up yet
        return part, ErrorCode.NONE

    def update_leadership(self, topic: str) -> None:
        """Cluster mode: a leader, leader epoch, ISR or assignment of the topic changed in metadata.
        Replicas newly assigned here are created (they start as followers), replicas no longer
        assigned are dropped, and every local replica takes its role for the new state. Fetches
        waiting on any of them wake up to answer with the new state."""
        md = self.env.metadata
        info = md.get_topic(topic)
        if info is None:
            return
        if any((topic, p) not in self.partitions and self.is_local(topic, p) for p in range(info.num_partitions)):
            self.start_creation(topic, info.topic_id)
        gone = [(topic, p) for p in self._by_topic.get(topic, ()) if not self.is_local(topic, p)]
        if gone:
            self._drop_replicas(gone)
        for part in list(self._by_topic.get(topic, {}).values()):
            self.apply_role(part)
            part.wake_waiters()

    def apply_role(self, part: Partition) -> None:
        """Lead, follow or idle according to metadata (Kafka's makeLeader / makeFollower)."""
        md = self.env.metadata
        t, p = part.topic, part.index
        epoch = md.leader_epoch(t, p)
        leader = md.leader(t, p)
        me = self.env.node_id
        if not part.replicated:
            if epoch != part.leader_epoch:
                part.leader_epoch = epoch
                part.log.assign_leader_epoch(epoch, part.log.log_end_offset)
            return
        now = lag_clock_ms()
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
                if self.fetch_sessions is not None:
                    self.fetch_sessions.expect((t, p), followers, now)
                log.info("%s-%d: leading epoch %d from offset %d (high watermark %d, ISR %s)", t, p, epoch,
                         part.log.log_end_offset, part.high_watermark, md.isr(t, p))
                self._on_role_change(part)
            else:
                for r in md.replicas(t, p):
                    if r != me:
                        ls.add_follower(r, now)
            self.hw.maybe_advance(part)
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
        self._on_role_change(part)

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
        lm = self.log_manager
        logs = []
        for key in keys:
            part = self.partitions.pop(key)
            parts = self._by_topic.get(key[0])
            if parts is not None:
                parts.pop(key[1], None)
                if not parts:
                    del self._by_topic[key[0]]
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
        fs = ls.record_fetch(replica, fetch_offset, part.log.log_end_offset, lag_clock_ms(), log_start)
        if fs is None:
            return
        self.isr.maybe_expand(part, replica)
        self.hw.maybe_advance(part)

    def ensure_topic(self, topic: str, num_partitions: int, configs: dict[str, str]) -> None:
        log_config = topic_log_config(configs, self.env.config)
        max_bytes = topic_max_message_bytes(configs, self.env.config)
        for p in range(num_partitions):
            if (topic, p) not in self.partitions and self.is_local(topic, p):
                lg = self.log_manager.get_or_create_log(topic, p, log_config)
                epoch = self.env.metadata.leader_epoch(topic, p)
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
        self._by_topic.setdefault(topic, {})[p] = part
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
        md = self.env.metadata
        lm = self.log_manager
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
            log_config = topic_log_config(info.configs, self.env.config)
            max_bytes = topic_max_message_bytes(info.configs, self.env.config)
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
        self.log_manager.release_dirs(topic, partitions)
        if step.cancelled() or step.exception() is not None:
            return
        info = self.env.metadata.get_topic(topic)
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
        logs = self._detach([(topic, p) for p in self._by_topic.get(topic, ())], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if logs:
            previous = self._deleting.get(topic)
            job = asyncio.create_task(self._delete_logs(topic, logs, previous), name=f"delete-{topic}")
            self._deleting[topic] = job
            job.add_done_callback(partial(self._deletion_done, topic))

    async def _delete_logs(self, topic: str, logs: list[Log], previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        loop = asyncio.get_running_loop()
        lm = self.log_manager
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
        log_config = topic_log_config(configs, self.env.config)
        max_bytes = topic_max_message_bytes(configs, self.env.config)
        for part in self._by_topic.get(topic, {}).values():
            part.log.update_config(log_config)
            part.max_message_bytes = max_bytes

    async def wait_flushes(self) -> None:
        """Wait until no flush is in flight (shutdown: the final synchronous flush of every log
        must not overlap one)."""
        await log_flusher.wait_flushes(self.partitions.values())
