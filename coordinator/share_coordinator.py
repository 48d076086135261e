"""The share coordinator (KIP-932, Kafka's ShareCoordinatorService / ShareCoordinatorShard): the
durable state of every share-partition, kept in the internal topic ``__share_group_state``.

The key (group id, topic id, partition) maps to partition ``abs(hash("group:topicId:partition"))
% share.coordinator.state.topic.num.partitions`` of the topic (Kafka's SharePartitionKey hashed
with Java's String.hashCode); that partition's leader is the key's coordinator (FindCoordinator
key type SHARE). State is a replay of the partition: Kafka's ShareSnapshot records (the whole
state) and ShareUpdate records (what one write changed, merged into the state), a snapshot every
``share.coordinator.snapshot.update.records.per.snapshot`` updates, tombstones for deletions.
Every change is appended (and, in a cluster, replicated: the partition access appends with
acks=all semantics) before it is answered. The RPCs, with Kafka's checks and error codes:

- InitializeShareGroupState (from the group coordinator): a fresh snapshot at a start offset
  (-1: not yet known, the partition leader resolves ``share.auto.offset.reset``); an older state
  epoch than the stored one answers FENCED_STATE_EPOCH;
- ReadShareGroupState (from a partition leader taking up the share-partition): the state; a
  leader epoch older than the stored one answers FENCED_LEADER_EPOCH, a newer one is recorded
  (a ShareUpdate), so a deposed leader's later writes are fenced; an uninitialized key answers
  INVALID_REQUEST;
- WriteShareGroupState (from the partition leader, before it answers an acknowledgement): the
  changed state batches and the start offset; fenced by leader epoch and state epoch;
- DeleteShareGroupState (group coordinator: DeleteGroups, DeleteShareGroupOffsets): a tombstone;
- ReadShareGroupStateSummary (DescribeShareGroupOffsets): start offset, epochs; start offset -1
  for an uninitialized key.

A key whose state partition is loading answers COORDINATOR_LOAD_IN_PROGRESS, one that is not led
here NOT_COORDINATOR, before the topic exists COORDINATOR_NOT_AVAILABLE. Writes of one key are
serialized. Records below the oldest snapshot still needed are deleted every
``share.coordinator.state.topic.prune.interval.ms`` (the topic has cleanup.policy=delete and no
retention, as in Kafka).

Deviation from Kafka: an Initialize of a key that already has state takes state epoch
max(requested, stored + 1), so a partition leader still holding the previous state (it has not
seen the reset) is fenced with FENCED_STATE_EPOCH on its next write instead of overwriting it.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from coordinator.keyed_locks import KeyedLocks
from coordinator.partition_access import PartitionAccess, append_error_code, partition_for
from coordinator.share_state import (
    DEFAULT_LEADER_EPOCH,
    DEFAULT_STATE_EPOCH,
    UNINITIALIZED_START_OFFSET,
    Batch,
    ShareState,
    combine,
)
from protocol.errors import ErrorCode
from storage import batch as B
from storage import internal_records as IR

log = logging.getLogger("coordinator.share")
E = ErrorCode

SHARE_STATE_TOPIC = IR.SHARE_STATE_TOPIC
Key = tuple[str, uuid.UUID, int]


def kafka_uuid(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    return f"{group_id}:{kafka_uuid(topic_id)}:{partition}"


class ShareCoordinator:
    topic = SHARE_STATE_TOPIC

    def __init__(self, access: PartitionAccess, config: Any, *, partition_count: Callable[[uuid.UUID], int | None],
                 now_ms: Callable[[], int] | None = None) -> None:
        self.access = access
        self.config = config
        # The partition count of a topic id (None: no such topic), from the broker's metadata.
        self.partition_count = partition_count
        self._now = now_ms or (lambda: int(time.time() * 1000))
        self.num_partitions = int(self._cfg("share.coordinator.state.topic.num.partitions", 50))
        self.segment_bytes = int(self._cfg("share.coordinator.state.topic.segment.bytes", 104857600))
        self.min_isr = int(self._cfg("share.coordinator.state.topic.min.isr", 2))
        self.updates_per_snapshot = int(self._cfg("share.coordinator.snapshot.update.records.per.snapshot", 500))
        self.prune_interval_ms = int(self._cfg("share.coordinator.state.topic.prune.interval.ms", 300000))
        self.states: dict[Key, ShareState] = {}
        self._loaded: set[int] = set()
        self._loading: set[int] = set()
        self._unloaded: set[int] = set()
        self.follows_leadership = False
        self._topic_ready = False
        self._ensure_lock: asyncio.Lock | None = None
        self._locks = KeyedLocks()  # one state change per share-partition key at a time
        self._prune_task: asyncio.Task[None] | None = None
        self._pruned: dict[int, int] = {}

    def _cfg(self, name: str, default: Any) -> Any:
        try:
            value = self.config.get(name)
        except Exception:
            return default
        return default if value is None else value

    # --- lifecycle and partitions ----------------------------------------------------------------

    async def start(self) -> None:
        if self.access.partition_exists(SHARE_STATE_TOPIC, 0):
            n = 0
            while self.access.partition_exists(SHARE_STATE_TOPIC, n):
                n += 1
            self.num_partitions = n
            if not self.follows_leadership:
                for p in range(n):
                    self.load_partition(p)
            self._topic_ready = True
        self._prune_task = asyncio.create_task(self._prune_loop(), name="share-state-prune")

    async def stop(self) -> None:
        if self._prune_task is not None:
            self._prune_task.cancel()
            await asyncio.gather(self._prune_task, return_exceptions=True)

    async def ensure_topic(self) -> None:
        if self._topic_ready:
            return
        if self._ensure_lock is None:
            self._ensure_lock = asyncio.Lock()
        async with self._ensure_lock:
            if self._topic_ready:
                return
            await self.access.ensure_internal_topic(SHARE_STATE_TOPIC, self.num_partitions, {
                "cleanup.policy": "delete",
                "retention.ms": "-1",
                "segment.bytes": str(self.segment_bytes),
                "min.insync.replicas": str(self.min_isr),
                "compression.type": "producer",
            })
            if not self.follows_leadership:
                for p in range(self.num_partitions):
                    if p not in self._loaded:
                        self.load_partition(p)
            self._topic_ready = True

    def partition_for(self, key: str) -> int:
        return partition_for(key, self.num_partitions)

    def partition_of(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_for(coordinator_key(group_id, topic_id, partition))

    def is_loaded(self, partition: int) -> bool:
        return partition in self._loaded

    def load_partition(self, partition: int) -> None:
        """Become the coordinator of one state partition: replay it (in one step on the loop)."""
        self._drop(partition)
        self._loading.add(partition)
        t0 = time.perf_counter()
        records = 0
        try:
            for header, data in self.access.iter_batches(SHARE_STATE_TOPIC, partition, 0):
                if header.is_control:
                    continue
                for rec in B.decode_records(data):
                    if rec.key is None:
                        continue
                    records += 1
                    try:
                        rtype, key, _, value = IR.decode_record(SHARE_STATE_TOPIC, rec.key, rec.value)
                    except ValueError as e:
                        log.debug("skipping record at %s-%d offset %d: %s", SHARE_STATE_TOPIC, partition, rec.offset, e)
                        continue
                    self._replay((key["groupId"], key["topicId"], key["partition"]), rtype, value, rec.offset)
        finally:
            self._loading.discard(partition)
        self._loaded.add(partition)
        self._unloaded.discard(partition)
        if records:
            log.info("loaded %s-%d: %d records, %d share-partitions in %.1f ms", SHARE_STATE_TOPIC, partition, records,
                     sum(1 for k in self.states if self.partition_of(*k) == partition),
                     (time.perf_counter() - t0) * 1000)

    def unload_partition(self, partition: int) -> None:
        self._drop(partition)
        self._unloaded.add(partition)
        log.info("unloaded %s-%d", SHARE_STATE_TOPIC, partition)

    def _drop(self, partition: int) -> None:
        self._loaded.discard(partition)
        for k in [k for k in self.states if self.partition_of(*k) == partition]:
            del self.states[k]

    def _replay(self, key: Key, rtype: int, value: dict[str, Any] | None, offset: int) -> None:
        if value is None:
            self.states.pop(key, None)
            return
        batches = [(b["firstOffset"], b["lastOffset"], b["deliveryState"], b["deliveryCount"])
                   for b in value["stateBatches"] or []]
        if rtype == IR.SHARE_SNAPSHOT:
            prev = self.states.get(key)
            leader = max(value["leaderEpoch"], prev.leader_epoch if prev else DEFAULT_LEADER_EPOCH)
            self.states[key] = ShareState(value["snapshotEpoch"], value["stateEpoch"], leader, value["startOffset"],
                                          value["createTimestamp"], value["writeTimestamp"],
                                          combine([], batches, value["startOffset"]), 0, offset)
            return
        st = self.states.get(key)
        if st is None:
            return  # an update without a snapshot (pruned or deleted): nothing to apply it to
        if value["startOffset"] != -1:
            st.start_offset = value["startOffset"]
        if value["leaderEpoch"] != -1:
            st.leader_epoch = max(st.leader_epoch, value["leaderEpoch"])
        st.batches = combine(st.batches, batches, st.start_offset)
        st.updates_since_snapshot += 1

    def _coordinator_error(self, key: Key) -> int:
        p = self.partition_of(*key)
        if p in self._loaded:
            return E.NONE
        if p in self._loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if self.follows_leadership or p in self._unloaded:
            return E.NOT_COORDINATOR
        if not self._topic_ready:
            return E.COORDINATOR_NOT_AVAILABLE
        return E.COORDINATOR_LOAD_IN_PROGRESS

    def _check_key(self, key: Key) -> tuple[int, str | None]:
        _, tid, p = key
        if p < 0:
            return E.INVALID_REQUEST, "The partition id cannot be a negative number."
        count = self.partition_count(tid)
        if count is None or p >= count:
            return E.UNKNOWN_TOPIC_OR_PARTITION, "Topic/TopicPartition not found in metadata image."
        err = self._coordinator_error(key)
        return (err, None) if err else (E.NONE, None)

    async def _append(self, key: Key, rtype: int, value: dict[str, Any] | None) -> int:
        group_id, tid, p = key
        record = (IR.share_state_key(rtype, group_id, tid, p),
                  None if value is None else IR.share_state_value(rtype, value))
        batch = B.build_batch([record], timestamp_ms=self._now())
        return await self.access.append(SHARE_STATE_TOPIC, self.partition_of(*key), batch)

    async def _write(self, key: Key, rtype: int, value: dict[str, Any] | None) -> int:
        """Append one record and apply it; the error code to answer."""
        try:
            offset = await self._append(key, rtype, value)
        except Exception as e:
            log.warning("share coordinator: writing the state of %s failed: %r", key, e)
            return append_error_code(e)
        if self._coordinator_error(key):
            return E.NOT_COORDINATOR  # unloaded during the write
        self._replay(key, rtype, value, offset)
        return E.NONE

    # --- the RPCs ------------------------------------------------------------------------------

    async def initialize(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                         start_offset: int) -> tuple[int, str | None]:
        key = (group_id, topic_id, partition)
        err, msg = self._check_key(key)
        if err:
            return err, msg
        async with self._locks.hold(key):
            st = self.states.get(key)
            if st is not None and state_epoch != -1 and st.state_epoch > state_epoch:
                return E.FENCED_STATE_EPOCH, "The state epoch is older than the share-partition's."
            epoch = state_epoch if st is None else max(state_epoch, st.state_epoch + 1)
            now = self._now()
            value = {"snapshotEpoch": 0 if st is None else st.snapshot_epoch + 1, "stateEpoch": epoch,
                     "leaderEpoch": DEFAULT_LEADER_EPOCH, "startOffset": start_offset, "createTimestamp": now,
                     "writeTimestamp": now, "stateBatches": []}
            err = await self._write(key, IR.SHARE_SNAPSHOT, value)
            return err, None

    async def read(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int
                   ) -> tuple[int, str | None, int, int, list[Batch]]:
        """(error, message, state epoch, start offset, state batches)."""
        key = (group_id, topic_id, partition)
        err, msg = self._check_key(key)
        if err:
            return err, msg, 0, -1, []
        async with self._locks.hold(key):
            st = self.states.get(key)
            if st is None:
                return E.INVALID_REQUEST, "Read operation on uninitialized share partition not allowed.", 0, -1, []
            if st.leader_epoch > leader_epoch:
                return E.FENCED_LEADER_EPOCH, "The leader epoch is older than the share-partition's.", 0, -1, []
            out = (E.NONE, None, st.state_epoch, st.start_offset, list(st.batches))
            if leader_epoch != -1 and leader_epoch != st.leader_epoch:
                # Record the new leader so that the previous one's writes are fenced.
                err = await self._write(key, *self._state_record(st, leader_epoch, st.start_offset, []))
                if err:
                    return err, None, 0, -1, []
            return out

    async def write(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int, leader_epoch: int,
                    start_offset: int, batches: list[Batch]) -> tuple[int, str | None]:
        key = (group_id, topic_id, partition)
        err, msg = self._check_key(key)
        if err:
            return err, msg
        async with self._locks.hold(key):
            st = self.states.get(key)
            if st is None:
                return E.INVALID_REQUEST, "Write operation on uninitialized share partition not allowed."
            if leader_epoch != -1 and st.leader_epoch > leader_epoch:
                return E.FENCED_LEADER_EPOCH, "The leader epoch is older than the share-partition's."
            if state_epoch != -1 and st.state_epoch > state_epoch:
                return E.FENCED_STATE_EPOCH, "The state epoch is older than the share-partition's."
            return await self._write(key, *self._state_record(st, leader_epoch, start_offset, batches)), None

    def _state_record(self, st: ShareState, leader_epoch: int, start_offset: int, batches: list[Batch]
                      ) -> tuple[int, dict[str, Any]]:
        """A ShareUpdate with the change, or a ShareSnapshot of the merged state when enough
        updates accumulated (Kafka's generateShareStateRecord)."""
        now = self._now()
        leader = leader_epoch if leader_epoch != -1 else st.leader_epoch
        if st.updates_since_snapshot >= self.updates_per_snapshot:
            start = start_offset if start_offset != -1 else st.start_offset
            merged = combine(st.batches, batches, start)
            return IR.SHARE_SNAPSHOT, {
                "snapshotEpoch": st.snapshot_epoch + 1, "stateEpoch": st.state_epoch, "leaderEpoch": leader,
                "startOffset": start, "createTimestamp": now, "writeTimestamp": now, "stateBatches": _batches(merged)}
        own = combine([], batches, start_offset if start_offset != -1 else st.start_offset)
        return IR.SHARE_UPDATE, {"snapshotEpoch": st.snapshot_epoch, "leaderEpoch": leader, "startOffset": start_offset,
                                 "stateBatches": _batches(own)}

    async def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> tuple[int, str | None]:
        key = (group_id, topic_id, partition)
        _, tid, p = key
        if p < 0:
            return E.INVALID_REQUEST, "The partition id cannot be a negative number."
        err = self._coordinator_error(key)
        if err:
            return err, None
        async with self._locks.hold(key):
            if key not in self.states:
                return E.NONE, None
            return await self._write(key, IR.SHARE_SNAPSHOT, None), None

    def read_summary(self, group_id: str, topic_id: uuid.UUID, partition: int
                     ) -> tuple[int, str | None, int, int, int]:
        """(error, message, state epoch, leader epoch, start offset)."""
        key = (group_id, topic_id, partition)
        err, msg = self._check_key(key)
        if err:
            return err, msg, DEFAULT_STATE_EPOCH, DEFAULT_LEADER_EPOCH, UNINITIALIZED_START_OFFSET
        st = self.states.get(key)
        if st is None:
            return E.NONE, None, DEFAULT_STATE_EPOCH, DEFAULT_LEADER_EPOCH, UNINITIALIZED_START_OFFSET
        return E.NONE, None, st.state_epoch, st.leader_epoch, st.start_offset

    # --- topic deletion and pruning ------------------------------------------------------------

    async def delete_topic_states(self, topic_ids: set[uuid.UUID]) -> None:
        """Tombstone the states of deleted topics (Kafka's maybeCleanupShareState)."""
        for key in [k for k in self.states if k[1] in topic_ids and not self._coordinator_error(k)]:
            async with self._locks.hold(key):
                if key in self.states:
                    await self._write(key, IR.SHARE_SNAPSHOT, None)

    def redundant_offset(self, partition: int) -> int | None:
        """Records below this offset of a state partition are no longer needed: every key's state
        is rebuilt from its last snapshot on (Kafka's lastRedundantOffset)."""
        offsets = [st.snapshot_offset for k, st in self.states.items() if self.partition_of(*k) == partition]
        if offsets:
            low = min(offsets)
            return low if low >= 0 else None
        end = self.access.log_end_offset(SHARE_STATE_TOPIC, partition)
        return end if end >= 0 else None

    async def prune(self) -> None:
        delete = getattr(self.access, "delete_records_before", None)
        if delete is None:
            return
        for p in sorted(self._loaded):
            offset = self.redundant_offset(p)
            if offset is None or offset <= self._pruned.get(p, 0):
                continue
            try:
                await delete(SHARE_STATE_TOPIC, p, offset)
                self._pruned[p] = offset
            except Exception as e:
                log.info("pruning %s-%d below %d failed: %r", SHARE_STATE_TOPIC, p, offset, e)

    async def _prune_loop(self) -> None:
        while True:
            await asyncio.sleep(self.prune_interval_ms / 1000)
            try:
                await self.prune()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("share-state prune failed")


def _batches(batches: list[Batch]) -> list[dict[str, int]]:
    return [{"firstOffset": f, "lastOffset": la, "deliveryState": s, "deliveryCount": c} for f, la, s, c in batches]
