"""The group coordinator: groups and committed offsets of every __consumer_offsets partition here.

State is a replay of __consumer_offsets (Kafka's OffsetCommit / GroupMetadata records, the
KIP-848 ConsumerGroup* records, transactional offset commits pending until their COMMIT/ABORT
marker); every change is appended there before it is answered. Partitions are loaded and
unloaded one at a time (load_partition / unload_partition: a cluster's broker serves the
partitions it leads; a single node loads them all at start-up): a group whose partition is
loading answers COORDINATOR_LOAD_IN_PROGRESS, one whose partition is not here NOT_COORDINATOR. The classic rebalance protocol lives in
ClassicProtocolMixin, the KIP-848 consumer protocol in ConsumerProtocolMixin; this module owns
loading, persistence, offsets (commit / fetch / delete / retention / transactional) and the admin
views (list / describe / delete groups). KIP-932 share groups live in ShareProtocolMixin
(coordinator/share_protocol.py); they have no committed offsets (their progress is the share
coordinator's), refuse offset commits and fetches like Kafka (GROUP_ID_NOT_FOUND), and are
deleted together with their share-partition state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from coordinator import consumer_records as CR
from coordinator.classic_protocol import ClassicProtocolMixin
from coordinator.consumer_protocol import ConsumerGroup, ConsumerProtocolMixin, MemberState
from coordinator.group_metadata import CONSUMER_PROTOCOL_TYPE, ClassicGroup, GroupState
from coordinator.offsets_store import OffsetAndMetadata, OffsetsStore, TopicPartition
from coordinator.partition_access import PartitionAccess, partition_for
from coordinator.share_group import PROTOCOL_TYPE as SHARE_PROTOCOL_TYPE
from coordinator.share_group import ShareGroup
from coordinator.share_protocol import ShareProtocolMixin
from coordinator.share_records import ShareGroupReplay
from protocol.errors import ErrorCode
from storage import batch as B
from storage import internal_records as IR

log = logging.getLogger("coordinator.group")

E = ErrorCode
S = GroupState
OFFSETS_TOPIC = IR.OFFSETS_TOPIC

Group = ClassicGroup | ConsumerGroup | ShareGroup


class LoopScheduler:
    """Wall-clock milliseconds and event-loop timers (tests substitute a manual clock)."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def call_later(self, delay_ms: int, fn: Callable[[], None]) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(delay_ms / 1000, fn)


@dataclass(slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupDescription:
    error: int
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription] = field(default_factory=list)


@dataclass(slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str


def _append_error(e: BaseException) -> int:
    """Kafka's mapping of a failed coordinator write to the error a client should see."""
    code = getattr(e, "code", None)
    if code is None:
        return E.UNKNOWN_SERVER_ERROR
    if code in (E.UNKNOWN_TOPIC_OR_PARTITION, E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                E.REQUEST_TIMED_OUT):
        return E.COORDINATOR_NOT_AVAILABLE
    if code in (E.NOT_LEADER_OR_FOLLOWER, E.KAFKA_STORAGE_ERROR):
        return E.NOT_COORDINATOR
    if code in (E.MESSAGE_TOO_LARGE, E.RECORD_LIST_TOO_LARGE, E.INVALID_FETCH_SIZE):
        return E.UNKNOWN_SERVER_ERROR
    return int(code)


class GroupCoordinator(ClassicProtocolMixin, ConsumerProtocolMixin, ShareProtocolMixin):
    topic = OFFSETS_TOPIC

    def __init__(self, access: PartitionAccess, config: Any, node_id: int, *, scheduler: Any = None) -> None:
        self.access = access
        self.config = config
        self.node_id = node_id
        self.scheduler = scheduler or LoopScheduler()
        self.groups: dict[str, Group] = {}
        self.offsets = OffsetsStore()
        self.num_partitions = int(self._cfg("offsets.topic.num.partitions", 50))
        self.segment_bytes = int(self._cfg("offsets.topic.segment.bytes", 104857600))
        self.initial_rebalance_delay_ms = int(self._cfg("group.initial.rebalance.delay.ms", 3000))
        self.min_session_timeout_ms = int(self._cfg("group.min.session.timeout.ms", 6000))
        self.max_session_timeout_ms = int(self._cfg("group.max.session.timeout.ms", 1800000))
        self.max_group_size = int(self._cfg("group.max.size", 2**31 - 1))
        self.offset_metadata_max_bytes = int(self._cfg("offset.metadata.max.bytes", 4096))
        self.retention_ms = int(self._cfg("offsets.retention.minutes", 10080)) * 60_000
        self.retention_check_ms = int(self._cfg("offsets.retention.check.interval.ms", 600000))
        self._init_consumer_protocol()
        self._init_share_protocol()
        self._loaded: set[int] = set()
        self._loading: set[int] = set()
        self._unloaded: set[int] = set()  # given up by unload_partition (NOT_COORDINATOR)
        # Cluster mode: partitions are loaded only when this broker leads them (the broker calls
        # load_partition / unload_partition), and a partition not loaded here is not ours.
        self.follows_leadership = False
        self._topic_ready = False
        self._ensure_lock: asyncio.Lock | None = None
        self._retention_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()

    def _cfg(self, name: str, default: Any) -> Any:
        try:
            value = self.config.get(name)
        except Exception:  # a config this broker build does not know: Kafka's default
            return default
        return default if value is None else value

    def _now(self) -> int:
        return self.scheduler.now_ms()

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Replay every existing __consumer_offsets partition and start the offset expiry task."""
        if self.access.partition_exists(OFFSETS_TOPIC, 0):
            # The topic's real partition count wins over a changed config (as in Kafka).
            n = 0
            while self.access.partition_exists(OFFSETS_TOPIC, n):
                n += 1
            self.num_partitions = n
            if not self.follows_leadership:
                for p in range(n):
                    await self.load_partition(p)
            self._topic_ready = True
        self._retention_task = asyncio.create_task(self._retention_loop(), name="offsets-retention")

    async def stop(self) -> None:
        if self._retention_task is not None:
            self._retention_task.cancel()
            await asyncio.gather(self._retention_task, return_exceptions=True)
        for group in list(self.groups.values()):
            self._unload_group(group, E.NOT_COORDINATOR)
        self.groups.clear()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def load_partition(self, partition: int) -> None:
        """Become the coordinator of one __consumer_offsets partition: replay it (its groups answer
        COORDINATOR_LOAD_IN_PROGRESS until then). A partition already loaded is replayed afresh."""
        if partition in self._loaded:
            self.unload_partition(partition)
        self._loading.add(partition)
        try:
            # The replay runs in one step on the loop: nothing (a marker's complete_txn, a
            # request) interleaves with a half-built state.
            self._load_partition(partition)
        finally:
            self._loading.discard(partition)

    def unload_partition(self, partition: int) -> None:
        """Stop coordinating one partition (its leadership moved away): its groups are dropped
        (classic members waiting in JoinGroup / SyncGroup answered NOT_COORDINATOR, timers
        cancelled), with their offsets and pending transactional offsets; from now on its
        groups answer NOT_COORDINATOR."""
        self._loaded.discard(partition)
        self._loading.discard(partition)
        self._unloaded.add(partition)
        mine = lambda g: self.partition_for(g) == partition  # noqa: E731
        for group_id in [g for g in self.groups if mine(g)]:
            self._unload_group(self.groups.pop(group_id), E.NOT_COORDINATOR)
        for group_id in [g for g in self.offsets.committed if mine(g)]:
            del self.offsets.committed[group_id]
        for producer_id, producer_groups in list(self.offsets.pending_txn.items()):
            for group_id in [g for g in producer_groups if mine(g)]:
                del producer_groups[group_id]
            if not producer_groups:
                del self.offsets.pending_txn[producer_id]
        log.info("unloaded %s-%d", OFFSETS_TOPIC, partition)

    def _unload_group(self, group: Group, error: int) -> None:
        if isinstance(group, ClassicGroup):
            from coordinator.group_metadata import JoinResult, SyncResult

            for timer in (group.join_timer, group.sync_timer, *group.pending_timers.values()):
                self._cancel(timer)
            for m in group.members.values():
                self._cancel(m.heartbeat_timer)
                if m.awaiting_join:
                    assert m.join_future is not None
                    m.join_future.set_result(JoinResult(error=error, member_id=m.member_id))
                if m.awaiting_sync:
                    assert m.sync_future is not None
                    m.sync_future.set_result(SyncResult(error=error))
        elif isinstance(group, ShareGroup):
            self._unload_share_group(group)
        else:
            self._unload_consumer_group(group)

    async def ensure_topic(self) -> None:
        if self._topic_ready:
            return
        if self._ensure_lock is None:
            self._ensure_lock = asyncio.Lock()
        async with self._ensure_lock:
            if self._topic_ready:
                return
            await self.access.ensure_internal_topic(OFFSETS_TOPIC, self.num_partitions, {
                "cleanup.policy": "compact",
                "segment.bytes": str(self.segment_bytes),
                "compression.type": "producer",
            })
            if not self.follows_leadership:
                for p in range(self.num_partitions):
                    if p not in self._loaded:
                        await self.load_partition(p)
            self._topic_ready = True

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def is_loaded(self, partition: int) -> bool:
        return partition in self._loaded

    def _typed_group(self, group_id: str, cls: type, kind: str, empty_message: str | None
                     ) -> tuple[int, str | None, Any]:
        """The group ``group_id`` if this coordinator holds it and it is a ``cls`` (the describe
        and admin APIs of one group type): (error, message, group)."""
        if not group_id:
            return E.INVALID_GROUP_ID, empty_message, None
        err = self._coordinator_error(group_id)
        if err:
            return err, None, None
        group = self.groups.get(group_id)
        if group is None:
            return E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None
        if not isinstance(group, cls):
            return E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a {kind} group.", None
        return E.NONE, None, group

    def _coordinator_error(self, group_id: str) -> int:
        p = self.partition_for(group_id)
        if p in self._loaded:
            return E.NONE
        if p in self._loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if self.follows_leadership or p in self._unloaded:
            return E.NOT_COORDINATOR
        if not self._topic_ready:
            return E.COORDINATOR_NOT_AVAILABLE
        return E.COORDINATOR_LOAD_IN_PROGRESS

    # --- replay ----------------------------------------------------------------------------------

    def _load_partition(self, partition: int) -> None:
        """Rebuild groups and offsets of one partition from its log (last record per key wins;
        transactional offsets wait for their marker)."""
        t0 = time.perf_counter()
        now = self._now()
        loaded_groups: dict[str, dict[str, Any] | None] = {}
        consumer_groups = CR.GroupReplay()
        share_groups = ShareGroupReplay()
        records = 0
        for header, data in self.access.iter_batches(OFFSETS_TOPIC, partition, 0):
            if header.is_control:
                for rec in B.decode_records(data):
                    if rec.key is None or len(rec.key) < 4:
                        continue
                    _, ctype = B.parse_control_key(rec.key)
                    if ctype in (B.CONTROL_TYPE_COMMIT, B.CONTROL_TYPE_ABORT):
                        self.offsets.complete_txn(header.producer_id, ctype == B.CONTROL_TYPE_COMMIT,
                                                  lambda g: self.partition_for(g) == partition)
                continue
            for rec in B.decode_records(data):
                records += 1
                if rec.key is None:
                    continue
                try:
                    rtype, key, _, value = IR.decode_record(OFFSETS_TOPIC, rec.key, rec.value)
                except ValueError as e:
                    # Newer record types (share / streams groups) are not ours: skip, as Kafka does.
                    log.debug("skipping record at %s-%d offset %d: %s", OFFSETS_TOPIC, partition, rec.offset, e)
                    continue
                if rtype in (IR.OFFSET_COMMIT, IR.OFFSET_COMMIT_LEGACY):
                    tp = (key["topic"], key["partition"])
                    if value is None:
                        if not header.is_transactional:
                            self.offsets.delete(key["group"], tp)
                        continue
                    om = OffsetAndMetadata(value["offset"], value.get("leaderEpoch", -1), value["metadata"] or "",
                                           value["commitTimestamp"], value.get("expireTimestamp", -1), rec.offset)
                    if header.is_transactional:
                        self.offsets.add_pending(header.producer_id, key["group"], tp, om)
                    else:
                        self.offsets.put(key["group"], tp, om)
                elif rtype == IR.GROUP_METADATA:
                    loaded_groups[key["group"]] = value
                elif rtype in IR.CONSUMER_GROUP_RECORD_TYPES:
                    consumer_groups.apply(rtype, key, value, rec.offset)
                elif rtype in IR.SHARE_GROUP_RECORD_TYPES:
                    share_groups.apply(rtype, key, value)
        for group_id in share_groups.groups:
            sg = share_groups.build(group_id, now)
            if sg is None:
                continue
            old = self.groups.pop(group_id, None)
            if old is not None:
                self._unload_group(old, E.NOT_COORDINATOR)
            self.groups[group_id] = sg
            # As Kafka on load: every member gets a fresh session timeout.
            for sm in sg.members.values():
                self._sg_schedule_session(sg, sm)
        for group_id in {**loaded_groups, **consumer_groups.groups}:
            old = self.groups.pop(group_id, None)
            if old is not None:
                self._unload_group(old, E.NOT_COORDINATOR)
            # A KIP-848 group wins over classic GroupMetadata: converting an empty classic group
            # tombstones its GroupMetadata, and a classic group never replaces a consumer group.
            cg = consumer_groups.build(group_id, now, self.consumer_assignors[0])
            if cg is not None:
                self.groups[group_id] = cg
                # As Kafka on load: every member gets a fresh session timeout (and one that
                # owes a revocation a fresh rebalance timeout).
                for cm in cg.members.values():
                    self._cg_schedule_session(cg, cm)
                    if cm.state == MemberState.UNREVOKED_PARTITIONS:
                        self._cg_schedule_revocation(cg, cm)
                continue
            value = loaded_groups.get(group_id)
            if value is None:
                continue
            group = ClassicGroup.from_record(group_id, value, now)
            self.groups[group_id] = group
            for m in group.members.values():
                self._schedule_heartbeat(group, m)
        # Groups known only by their offsets (simple consumers, admin commits) exist as Empty groups.
        for group_id in self.offsets.groups():
            if self.partition_for(group_id) == partition and group_id not in self.groups:
                self.groups[group_id] = ClassicGroup(group_id, now)
        for producer_groups in self.offsets.pending_txn.values():
            for group_id in producer_groups:
                if self.partition_for(group_id) == partition and group_id not in self.groups:
                    self.groups[group_id] = ClassicGroup(group_id, now)
        self._loaded.add(partition)
        self._unloaded.discard(partition)
        if records:
            log.info("loaded %s-%d: %d records, %d groups in %.1f ms", OFFSETS_TOPIC, partition, records,
                     sum(1 for g in self.groups if self.partition_for(g) == partition),
                     (time.perf_counter() - t0) * 1000)

    # --- persistence -----------------------------------------------------------------------------

    async def _append(self, partition: int, records: list[tuple[bytes, bytes | None]], *,
                      producer_id: int = B.NO_PRODUCER_ID, producer_epoch: int = B.NO_PRODUCER_EPOCH,
                      transactional: bool = False) -> int:
        batch = B.build_batch(records, timestamp_ms=self._now(), producer_id=producer_id,
                              producer_epoch=producer_epoch, transactional=transactional)
        return await self.access.append(OFFSETS_TOPIC, partition, batch)

    async def _store_group(self, group: ClassicGroup, assignments: dict[str, bytes] | None = None) -> int:
        """Append the group's GroupMetadata record; returns an error code (0 on success)."""
        try:
            value = IR.group_metadata_value(group.to_record(assignments))
            await self._append(self.partition_for(group.group_id), [(IR.group_metadata_key(group.group_id), value)])
        except Exception as e:
            log.warning("failed to write group metadata of %s: %r", group.group_id, e)
            return _append_error(e)
        return E.NONE

    async def _cg_persist(self, group_id: str, previous: Any) -> int:
        """Append the KIP-848 records of what changed in ``group_id`` since its last write (and
        the GroupMetadata tombstone of the empty classic group it replaced, as Kafka does)."""
        group = self.groups.get(group_id)
        records: list[tuple[bytes, bytes | None]] = []
        if isinstance(previous, ClassicGroup) and group is not previous:
            records.append((IR.group_metadata_key(group_id), None))
        new: CR.Image = {}
        if isinstance(group, ConsumerGroup):
            new = CR.image(group)
            records += CR.diff_records(group_id, group.persisted, new, regex_version=group.regex_version,
                                       now_ms=self._now())
        if not records:
            return E.NONE
        try:
            await self._append(self.partition_for(group_id), records)
        except Exception as e:
            log.warning("failed to write consumer group records of %s: %r", group_id, e)
            return _append_error(e)
        if isinstance(group, ConsumerGroup):
            group.persisted = new
        return E.NONE

    def _store_group_later(self, group: ClassicGroup) -> None:
        task = asyncio.get_running_loop().create_task(self._store_group(group))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _maybe_drop_group(self, group: Group) -> None:
        """Forget a group that holds nothing (no members, no offsets, never had a generation)."""
        if isinstance(group, ClassicGroup) and group.is_in(S.EMPTY) and group.is_empty and \
                group.generation_id == 0 and not group.pending_members and \
                not self.offsets.has_offsets(group.group_id) and not self.offsets.has_pending_group(group.group_id):
            if self.groups.get(group.group_id) is group:
                del self.groups[group.group_id]

    # --- offsets ---------------------------------------------------------------------------------

    def _validate_classic_commit(self, group: ClassicGroup, generation_id: int, member_id: str,
                                 instance_id: str | None, transactional: bool) -> int:
        if group.is_in(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_in(S.EMPTY):
            return E.NONE  # a commit from outside group management (admin tools, simple consumers)
        if generation_id >= 0 or member_id or instance_id is not None:
            if group.is_static_member_fenced(instance_id, member_id):
                return E.FENCED_INSTANCE_ID
            if not group.has(member_id):
                return E.UNKNOWN_MEMBER_ID
            if generation_id != group.generation_id:
                return E.ILLEGAL_GENERATION
        elif not transactional and not group.is_in(S.EMPTY):
            return E.UNKNOWN_MEMBER_ID
        if not transactional and group.is_in(S.COMPLETING_REBALANCE):
            # The assignment is not known yet: the member must finish the rebalance first.
            return E.REBALANCE_IN_PROGRESS
        if generation_id >= 0 or member_id:
            member = group.members.get(member_id)
            if member is not None:
                self._schedule_heartbeat(group, member)  # a commit proves the member is alive
        return E.NONE

    def _commit_target(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                       transactional: bool) -> tuple[int, Group | None]:
        if not group_id:
            return E.INVALID_GROUP_ID, None
        err = self._coordinator_error(group_id)
        if err:
            return err, None
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0 and not transactional:
                return E.ILLEGAL_GENERATION, None
            group = ClassicGroup(group_id, self._now())
            self.groups[group_id] = group
            return E.NONE, group
        if isinstance(group, ClassicGroup):
            return self._validate_classic_commit(group, generation_id, member_id, instance_id, transactional), group
        if isinstance(group, ShareGroup):
            return E.GROUP_ID_NOT_FOUND, None  # Kafka: "Group X is not a consumer group."
        return self._validate_consumer_commit(group, generation_id, member_id, instance_id, transactional), group

    def _check_metadata(self, offsets: dict[TopicPartition, tuple[int, int, str | None]]
                        ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, tuple[int, int, str]]]:
        errors: dict[TopicPartition, int] = {}
        ok: dict[TopicPartition, tuple[int, int, str]] = {}
        for tp, (offset, epoch, metadata) in offsets.items():
            md = metadata or ""
            if len(md.encode("utf-8")) > self.offset_metadata_max_bytes:
                errors[tp] = E.OFFSET_METADATA_TOO_LARGE
            else:
                ok[tp] = (offset, epoch, md)
        return errors, ok

    async def commit_offsets(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                             offsets: dict[TopicPartition, tuple[int, int, str | None]],
                             retention_ms: int = -1) -> dict[TopicPartition, int]:
        """OffsetCommit: error code per partition. Offsets are in the log before this returns."""
        err, group = self._commit_target(group_id, generation_id, member_id, group_instance_id, False)
        if err:
            return dict.fromkeys(offsets, err)
        assert group is not None
        errors, ok = self._check_metadata(offsets)
        if ok:
            now = self._now()
            expire = now + retention_ms if retention_ms >= 0 else -1
            items = list(ok.items())
            records = [(IR.offset_commit_key(group_id, tp[0], tp[1]),
                        IR.offset_commit_value(off, epoch, md, now, expire)) for tp, (off, epoch, md) in items]
            try:
                base = await self._append(self.partition_for(group_id), records)
            except Exception as e:
                code = _append_error(e)
                errors.update(dict.fromkeys(ok, code))
                self._maybe_drop_group(group)
                return errors
            for i, (tp, (off, epoch, md)) in enumerate(items):
                self.offsets.put(group_id, tp, OffsetAndMetadata(off, epoch, md, now, expire, base + i))
                errors[tp] = E.NONE
        return errors

    async def commit_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                                 generation_id: int, group_instance_id: str | None,
                                 offsets: dict[TopicPartition, tuple[int, int, str | None]]
                                 ) -> dict[TopicPartition, int]:
        """TxnOffsetCommit (KIP-447 checks): a transactional batch; the offsets stay pending
        (invisible to OffsetFetch) until complete_txn sees the transaction's marker."""
        err, group = self._commit_target(group_id, generation_id, member_id, group_instance_id, True)
        if err:
            return dict.fromkeys(offsets, err)
        assert group is not None
        errors, ok = self._check_metadata(offsets)
        if ok:
            now = self._now()
            items = list(ok.items())
            records = [(IR.offset_commit_key(group_id, tp[0], tp[1]), IR.offset_commit_value(off, epoch, md, now))
                       for tp, (off, epoch, md) in items]
            try:
                base = await self._append(self.partition_for(group_id), records, producer_id=producer_id,
                                          producer_epoch=producer_epoch, transactional=True)
            except Exception as e:
                errors.update(dict.fromkeys(ok, _append_error(e)))
                return errors
            for i, (tp, (off, epoch, md)) in enumerate(items):
                self.offsets.add_pending(producer_id, group_id, tp, OffsetAndMetadata(off, epoch, md, now, -1, base + i))
                errors[tp] = E.NONE
        return errors

    def complete_txn(self, offsets_partition: int, producer_id: int, committed: bool) -> None:
        self.offsets.complete_txn(producer_id, committed, lambda g: self.partition_for(g) == offsets_partition)

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None, *, require_stable: bool = False,
                      member_id: str | None = None, member_epoch: int = -1
                      ) -> tuple[int, list[tuple[TopicPartition, int, int, str, int]]]:
        """OffsetFetch for one group: (group error, [(tp, offset, leader epoch, metadata, error)]).
        ``partitions`` None means every partition with a committed offset."""
        err = self._coordinator_error(group_id)
        if err:
            return err, []
        group = self.groups.get(group_id)
        if isinstance(group, ShareGroup):
            return E.GROUP_ID_NOT_FOUND, []
        if isinstance(group, ConsumerGroup) and member_id is not None and (member_id or member_epoch >= 0):
            err = self._validate_consumer_fetch(group, member_id, member_epoch)
            if err:
                return err, []
        committed = self.offsets.group_offsets(group_id)
        if partitions is None:
            wanted = sorted(committed)
            if require_stable:
                for groups in self.offsets.pending_txn.values():
                    wanted.extend(tp for tp in groups.get(group_id, {}) if tp not in committed)
        else:
            wanted = partitions
        out = []
        for tp in wanted:
            if require_stable and self.offsets.has_pending(group_id, tp):
                out.append((tp, -1, -1, "", int(E.UNSTABLE_OFFSET_COMMIT)))
                continue
            om = committed.get(tp)
            if om is None:
                out.append((tp, -1, -1, "", int(E.NONE)))
            else:
                out.append((tp, om.offset, om.leader_epoch, om.metadata, int(E.NONE)))
        return E.NONE, out

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> tuple[int, dict[TopicPartition, int]]:
        """OffsetDelete: only offsets of topics the group does not subscribe to (or of an empty group)."""
        if not group_id:
            return E.INVALID_GROUP_ID, {}
        err = self._coordinator_error(group_id)
        if err:
            return err, {}
        group = self.groups.get(group_id)
        if group is None or isinstance(group, ShareGroup) or (isinstance(group, ClassicGroup) and group.is_in(S.DEAD)):
            return E.GROUP_ID_NOT_FOUND, {}
        subscribed: set[str] = set()
        if isinstance(group, ClassicGroup):
            if not group.is_in(S.EMPTY):
                topics = group.subscribed_topics()
                if group.protocol_type != CONSUMER_PROTOCOL_TYPE or topics is None:
                    return E.NON_EMPTY_GROUP, {}
                subscribed = topics
        else:
            subscribed = group.subscribed_topic_names()
        results: dict[TopicPartition, int] = {}
        to_delete = []
        for tp in partitions:
            if tp[0] in subscribed:
                results[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                results[tp] = E.NONE
                if self.offsets.get(group_id, tp) is not None:
                    to_delete.append(tp)
        if to_delete:
            try:
                await self._append(self.partition_for(group_id),
                                   [(IR.offset_commit_key(group_id, t, p), None) for t, p in to_delete])
            except Exception as e:
                return _append_error(e), {}
            for tp in to_delete:
                self.offsets.delete(group_id, tp)
        return E.NONE, results

    # --- retention -------------------------------------------------------------------------------

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.retention_check_ms / 1000)
            try:
                await self.expire_offsets()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("offset expiration failed")

    def _expired_offsets(self, group: Group | None, group_id: str, now: int) -> list[TopicPartition]:
        if isinstance(group, ShareGroup):
            return []  # share groups commit no offsets
        offsets = self.offsets.group_offsets(group_id)
        subscribed: set[str] = set()
        base: Callable[[OffsetAndMetadata], int]
        if group is None or (isinstance(group, ClassicGroup) and group.protocol_type is None):
            base = lambda om: om.commit_timestamp  # noqa: E731
        elif isinstance(group, ClassicGroup) and group.is_in(S.EMPTY):
            ts = group.state_timestamp_ms
            base = lambda om: ts if ts >= 0 else om.commit_timestamp  # noqa: E731
        elif isinstance(group, ClassicGroup):
            topics = group.subscribed_topics()
            if group.protocol_type != CONSUMER_PROTOCOL_TYPE or topics is None or not group.is_in(S.STABLE):
                return []
            subscribed = topics
            base = lambda om: om.commit_timestamp  # noqa: E731
        else:
            if group.is_empty:
                ts = group.state_timestamp_ms
                base = lambda om: ts  # noqa: E731
            else:
                subscribed = group.subscribed_topic_names()
                base = lambda om: om.commit_timestamp  # noqa: E731
        out = []
        for tp, om in offsets.items():
            if tp[0] in subscribed or self.offsets.has_pending(group_id, tp):
                continue
            if om.expire_timestamp >= 0:
                if now >= om.expire_timestamp:
                    out.append(tp)
            elif now - base(om) >= self.retention_ms:
                out.append(tp)
        return out

    async def expire_offsets(self) -> int:
        """Tombstone expired offsets; an empty classic group left without offsets becomes Dead."""
        now = self._now()
        removed = 0
        for group_id in list(set(self.offsets.committed) | set(self.groups)):
            if self.partition_for(group_id) not in self._loaded:
                continue
            group = self.groups.get(group_id)
            expired = self._expired_offsets(group, group_id, now)
            records: list[tuple[bytes, bytes | None]] = [
                (IR.offset_commit_key(group_id, t, p), None) for t, p in expired]
            drop_group = isinstance(group, ClassicGroup) and group.is_in(S.EMPTY) and group.is_empty and \
                len(expired) == len(self.offsets.group_offsets(group_id)) and \
                not self.offsets.has_pending_group(group_id) and not group.pending_members
            if drop_group:
                records.append((IR.group_metadata_key(group_id), None))
            if not records:
                continue
            try:
                await self._append(self.partition_for(group_id), records)
            except Exception as e:
                log.warning("could not write offset tombstones for group %s: %r", group_id, e)
                continue
            for tp in expired:
                self.offsets.delete(group_id, tp)
            removed += len(expired)
            if drop_group and self.groups.get(group_id) is group:
                assert isinstance(group, ClassicGroup)
                group.transition_to(S.DEAD, now)
                del self.groups[group_id]
        if removed:
            log.info("removed %d expired offsets", removed)
        return removed

    # --- admin -----------------------------------------------------------------------------------

    def list_groups(self, states: list[str] | None = None, types: list[str] | None = None) -> tuple[int, list[GroupListing]]:
        if not self._topic_ready and not self._loaded:
            return E.NONE, []
        state_filter = {s.lower() for s in states or []}
        type_filter = {t.lower() for t in types or []}
        out = []
        for group in self.groups.values():
            if self.partition_for(group.group_id) not in self._loaded:
                continue
            state = group.state.value if isinstance(group, ClassicGroup) else group.state_name
            if state_filter and state.lower() not in state_filter:
                continue
            if type_filter and group.group_type not in type_filter:
                continue
            ptype = ((group.protocol_type or "") if isinstance(group, ClassicGroup) else
                     SHARE_PROTOCOL_TYPE if isinstance(group, ShareGroup) else CONSUMER_PROTOCOL_TYPE)
            out.append(GroupListing(group.group_id, ptype, state, group.group_type))
        return E.NONE, out

    def describe_group(self, group_id: str) -> GroupDescription:
        err = self._coordinator_error(group_id)
        if err:
            return GroupDescription(err, group_id, "", "", "")
        group = self.groups.get(group_id)
        if group is None:
            return GroupDescription(E.GROUP_ID_NOT_FOUND, group_id, S.DEAD.value, "", "")
        if not isinstance(group, ClassicGroup):
            return GroupDescription(E.GROUP_ID_NOT_FOUND, group_id, S.DEAD.value, "", "")
        stable = group.is_in(S.STABLE)
        members = [MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                     m.metadata(group.protocol_name) if stable else b"",
                                     m.assignment if stable else b"") for m in group.members.values()]
        return GroupDescription(E.NONE, group_id, group.state.value, group.protocol_type or "",
                                (group.protocol_name or "") if stable else "", members)

    async def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for group_id in group_ids:
            # Serialized with the group's heartbeats: a member joining while the tombstones are
            # written would be lost with the group.
            async with self._cg_locks.hold(group_id):
                out[group_id] = await self._delete_group(group_id)
        return out

    async def _delete_group(self, group_id: str) -> int:
        if not group_id:
            return E.INVALID_GROUP_ID
        err = self._coordinator_error(group_id)
        if err:
            return err
        group = self.groups.get(group_id)
        if group is None or (isinstance(group, ClassicGroup) and group.is_in(S.DEAD)):
            return E.GROUP_ID_NOT_FOUND
        if isinstance(group, ShareGroup):
            return await self._delete_share_group(group, self._topic_view_sg)
        if (isinstance(group, ClassicGroup) and not group.is_in(S.EMPTY)) or \
                (isinstance(group, ConsumerGroup) and not group.is_empty):
            return E.NON_EMPTY_GROUP
        records: list[tuple[bytes, bytes | None]] = [
            (IR.offset_commit_key(group_id, t, p), None) for t, p in self.offsets.group_offsets(group_id)]
        if isinstance(group, ConsumerGroup):
            records += CR.tombstones(group_id, group.persisted)
        else:
            records.append((IR.group_metadata_key(group_id), None))
        try:
            await self._append(self.partition_for(group_id), records)
        except Exception as e:
            return _append_error(e)
        self.offsets.delete_group(group_id)
        if self.groups.get(group_id) is group:
            del self.groups[group_id]
            if isinstance(group, ClassicGroup):
                group.transition_to(S.DEAD, self._now())
            else:
                self._unload_consumer_group(group)
        return E.NONE
