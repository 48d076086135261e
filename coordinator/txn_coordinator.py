"""TransactionCoordinator: transactional ids, producer epochs and the two-phase commit.

Every transition is appended to ``__transaction_state`` (partition = hash(transactional.id)
mod ``transaction.state.log.num.partitions``) before it is answered, and state is rebuilt by
replaying those partitions on start. EndTxn writes PrepareCommit/PrepareAbort, answers, then
sends WriteTxnMarkers to the leaders of every partition in the transaction (through
PartitionAccess, the path a cluster will use) and finally writes CompleteCommit/CompleteAbort.
A coordinator that loads a Prepare state finishes its markers. Ongoing transactions older than
their timeout are aborted with an epoch bump, which fences the producer that started them.

Transaction version 2 (KIP-890 part 2) runs through the same state machine; the differences
are confined to ``end_txn`` and ``_begin_end``: every commit or abort bumps the producer epoch
(Prepare* is written at epoch+1, the markers carry it, the client gets it back in EndTxn v5),
an exhausted epoch rotates to a new producer id at completion (``next_producer_id``), and the
epoch rules of Kafka's endTransaction for TV2 apply, so a late EndTxn of the previous
transaction is fenced instead of ending the next one (KAFKA-17754). Partitions may also be
added implicitly by a partition leader (Produce v12, TxnOffsetCommit v5) through
``add_partitions(..., txn_version=2)``.

Two-phase commit (KIP-939) is the same state machine too. ``init_producer_id(enable_2pc=True)``
stores the timeout Integer.MAX_VALUE (Kafka's 2PC flag), so ``abort_timed_out`` never aborts the
transaction: only its producer, a restarted producer or an operator ends it. With
``keep_prepared_txn`` an Ongoing 2PC transaction is kept instead of being aborted: the
coordinator bumps only the client-side identity (``next_producer_epoch``, persisted) and answers
it together with the ongoing transaction's id/epoch, so the new process can commit or abort it
with EndTxn under the new epoch (Kafka's completeTransaction). The old instance is fenced: the
coordinator accepts nothing more from the recovered transaction's own epoch (no AddPartitions, no
KIP-890 verification of a produce). ``keep_prepared_txn=False`` with ``enable_2pc`` is the
operator's forceTerminateTransaction: the Ongoing transaction is aborted under a bumped epoch, as
for any InitProducerId.

Fault injection for tests: the environment variable ``KBROKERTEST_CRASH_POINT`` names a point
("txn.after_prepare_commit", "txn.after_prepare_abort", "txn.after_markers") at which the
broker process kills itself with SIGKILL, so crash recovery is testable without timing luck.
``KBROKERTEST_DELAY_POINT=<point>:<ms>`` (point "txn.before_markers") instead holds the commit or
abort of a prepared transaction for ``ms`` milliseconds before its markers are written, with an
``asyncio.sleep`` (the event loop keeps serving), so requests that arrive while a transaction is
in PrepareCommit/PrepareAbort are testable deterministically.
``KBROKERTEST_TXN_FIRST_EPOCH=<n>`` makes a new transactional id start at epoch ``n`` instead
of 0, so epoch exhaustion (a new producer id after Short.MAX_VALUE - 1) is reachable in a test
without 32767 transactions.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Iterable
from typing import Any

from coordinator.partition_access import PartitionAccess, TxnMarkerEntry, partition_for
from coordinator.txn_metadata import (
    MAX_EPOCH,
    TWO_PC_TIMEOUT_MS,
    TxnMetadata,
    TxnState,
    can_transition,
    tv2_end_epochs,
)
from coordinator.txn_records import (
    TxnLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    state_batch,
)
from protocol.errors import ErrorCode
from storage.batch import decode_records

log = logging.getLogger("coordinator.txn")

TOPIC = "__transaction_state"
# Marker-write errors after which retrying cannot help: the partition is gone.
_GIVE_UP = {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.INVALID_PRODUCER_EPOCH,
            ErrorCode.TRANSACTION_COORDINATOR_FENCED}


def _append_error(e: BaseException) -> ErrorCode:
    """Kafka's TransactionStateManager mapping of a failed log append to the client's error."""
    code = getattr(e, "code", None)
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return ErrorCode.NOT_COORDINATOR  # NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR, anything else


def _now_ms() -> int:
    return int(time.time() * 1000)


# The fault-injection settings, read once: a broker's environment is fixed when it starts, and
# reading os.environ at every transaction's three check points was 0.5% of a broker's CPU under CTP.
_CRASH_POINT = os.environ.get("KBROKERTEST_CRASH_POINT")
_DELAY_POINT, _, _DELAY_MS = os.environ.get("KBROKERTEST_DELAY_POINT", "").rpartition(":")


def _crash_if(point: str) -> None:
    if _CRASH_POINT == point:
        log.warning("fault injection: crashing at %s", point)
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)


async def _delay_if(point: str) -> None:
    """Test-only: ``KBROKERTEST_DELAY_POINT=<point>:<ms>`` pauses this coroutine (never the loop) at ``point``."""
    if _DELAY_POINT == point and _DELAY_MS.isdigit():
        log.warning("fault injection: delaying %s by %s ms", point, _DELAY_MS)
        await asyncio.sleep(int(_DELAY_MS) / 1000)


# How long AddPartitionsToTxn / AddOffsetsToTxn wait for a transaction still completing before
# answering CONCURRENT_TRANSACTIONS (see TransactionCoordinator._validate_waiting).
CONCURRENT_WAIT_S = 0.1


class TransactionCoordinator:
    topic = TOPIC

    def __init__(self, access: PartitionAccess, config: Any, producer_ids: Any) -> None:
        self.access = access
        self.producer_ids = producer_ids
        self.num_partitions = int(config.get("transaction.state.log.num.partitions"))
        self.max_timeout_ms = int(config.get("transaction.max.timeout.ms"))
        self.id_expiration_ms = int(config.get("transactional.id.expiration.ms"))
        self.abort_interval_ms = int(config.get("transaction.abort.timed.out.transaction.cleanup.interval.ms"))
        self.remove_interval_ms = int(config.get("transaction.remove.expired.transaction.cleanup.interval.ms"))
        self.two_phase_commit_enable = _bool(config.get("transaction.two.phase.commit.enable"))
        self.segment_bytes = str(config.get("transaction.state.log.segment.bytes"))
        try:
            self.min_isr = int(config.get("transaction.state.log.min.isr") or 2)
        except KeyError:  # a configuration that predates the setting (tests)
            self.min_isr = 2
        self.coordinator_epoch = 0  # single node: every partition's
        # Cluster mode (issue 15): partitions are loaded and unloaded as this broker gains and
        # loses their leadership; each one's coordinator epoch is its leader epoch.
        self.follows_leadership = False
        self.coordinator_epochs: dict[int, int] = {}
        self.txns: dict[str, TxnMetadata] = {}
        self.timed_out_aborts = 0  # transactions aborted for their timeout (a metric, broker.metrics)
        self._loaded: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._timers: list[asyncio.Task[None]] = []
        self._topic_ready = False
        # Futures resolved at a transactional id's next state change (see _validate_waiting).
        self._state_changed: dict[str, asyncio.Future[None]] = {}

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        if self.follows_leadership:
            self._topic_ready = self.access.partition_exists(TOPIC, 0)
        elif self.access.partition_exists(TOPIC, 0):
            self._topic_ready = True
            for p in range(self.num_partitions):
                self._load_partition(p)
        self._timers.append(asyncio.create_task(self._every(self.abort_interval_ms, self.abort_timed_out)))
        self._timers.append(asyncio.create_task(self._every(self.remove_interval_ms, self.remove_expired_ids)))

    async def stop(self) -> None:
        for t in [*self._timers, *self._tasks]:
            t.cancel()
        await asyncio.gather(*self._timers, *self._tasks, return_exceptions=True)

    async def ensure_topic(self) -> None:
        if self._topic_ready:
            return
        await self.access.ensure_internal_topic(TOPIC, self.num_partitions, {
            "cleanup.policy": "compact", "segment.bytes": self.segment_bytes, "compression.type": "uncompressed",
            # Kafka: transaction.state.log.min.isr (a single node has an ISR of one and ignores it).
            "min.insync.replicas": str(self.min_isr), "unclean.leader.election.enable": "false",
        })
        self._topic_ready = True
        if self.follows_leadership:
            return
        for p in range(self.num_partitions):
            if p not in self._loaded:
                self._load_partition(p)

    def load_partition(self, p: int, epoch: int) -> None:
        """Cluster mode: this broker now leads partition ``p`` of __transaction_state at leader
        epoch ``epoch``, its coordinator epoch. Its transactions are replayed from the log and
        every PrepareCommit/PrepareAbort found is completed (markers carry the new epoch)."""
        if p in self._loaded and self.coordinator_epochs.get(p) == epoch:
            return
        self.unload_partition(p)
        self._topic_ready = True
        self.coordinator_epochs[p] = epoch
        self._load_partition(p)
        log.info("transaction coordinator: loaded %s-%d at coordinator epoch %d (%d transactional ids)", TOPIC, p,
                 epoch, sum(1 for tid in self.txns if self.partition_for(tid) == p))

    def unload_partition(self, p: int) -> None:
        """Cluster mode: the leadership of partition ``p`` moved away; its transactional ids
        answer NOT_COORDINATOR here from now on, and completions in flight stop."""
        if p not in self._loaded:
            return
        self._loaded.discard(p)
        self.coordinator_epochs.pop(p, None)
        for tid in [t for t in self.txns if self.partition_for(t) == p]:
            del self.txns[tid]
        log.info("transaction coordinator: unloaded %s-%d", TOPIC, p)

    def epoch_of(self, p: int) -> int:
        return self.coordinator_epochs.get(p, self.coordinator_epoch)

    def _still_owned(self, md: TxnMetadata, p: int, epoch: int) -> bool:
        return p in self._loaded and self.epoch_of(p) == epoch and self.txns.get(md.transactional_id) is md

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def is_loaded(self, partition: int) -> bool:
        return partition in self._loaded

    def _load_partition(self, p: int) -> None:
        loaded: dict[str, TxnMetadata | None] = {}
        for header, data in self.access.iter_batches(TOPIC, p):
            if header.is_control:
                continue
            for rec in decode_records(data):
                if rec.key is None:
                    continue
                tid = decode_key(rec.key)
                if rec.value is None:
                    loaded[tid] = None
                    continue
                v = decode_value(rec.value)
                parts = {(t, i) for t, ps in v.partitions.items() for i in ps}
                prev = loaded.get(tid)
                md = TxnMetadata(tid, v.producer_id, v.producer_epoch, v.timeout_ms, TxnState(v.status), parts,
                                 v.start_ms, v.last_update_ms, prev_producer_id=v.prev_producer_id,
                                 next_producer_id=v.next_producer_id, client_txn_version=v.client_txn_version,
                                 next_producer_epoch=v.next_producer_epoch)
                if prev is not None and prev.producer_id != v.producer_id:
                    md.last_producer_id, md.last_producer_epoch = prev.producer_id, prev.producer_epoch
                loaded[tid] = md
        for tid, md in loaded.items():
            if md is None:
                self.txns.pop(tid, None)
                continue
            self.txns[tid] = md
            if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                log.info("resuming %s of transaction %s (producer %d epoch %d) after load", md.state.wire_name,
                         tid, md.producer_id, md.producer_epoch)
                self._spawn(self._complete(md))
        self._loaded.add(p)

    # --- persistence -------------------------------------------------------------------------

    async def _persist(self, md: TxnMetadata, state: TxnState, *, replicated: bool = True,
                       **changes: Any) -> ErrorCode:
        """Append the target state to the log; apply it to ``md`` only once it is written (and, with
        ``replicated``, once the ISR has it)."""
        if not can_transition(md.state, state):
            log.error("illegal transition of %s from %s to %s", md.transactional_id, md.state.name, state.name)
            return ErrorCode.INVALID_TXN_STATE
        target = {
            "producer_id": md.producer_id, "producer_epoch": md.producer_epoch, "timeout_ms": md.timeout_ms,
            "partitions": md.partitions, "start_ms": md.start_ms, "prev_producer_id": md.prev_producer_id,
            "next_producer_id": md.next_producer_id, "client_txn_version": md.client_txn_version,
            "next_producer_epoch": md.next_producer_epoch,
        }
        target.update(changes)
        now = _now_ms()
        value = TxnLogValue(target["producer_id"], target["producer_epoch"], target["timeout_ms"], int(state),
                            _by_topic(target["partitions"]), now, target["start_ms"], target["prev_producer_id"],
                            target["next_producer_id"], target["client_txn_version"], target["next_producer_epoch"])
        batch = state_batch(encode_key(md.transactional_id), encode_value(value), now)
        md.pending = state
        try:
            await self.access.append(TOPIC, self.partition_for(md.transactional_id), batch, replicated=replicated)
        except Exception as e:  # the coordinator partition is not writable here
            log.warning("could not persist %s for %s: %s", state.name, md.transactional_id, e)
            return _append_error(e)
        finally:
            md.pending = None
            self._notify_state_change(md.transactional_id)
        for k, val in target.items():
            setattr(md, k, val)
        md.state = state
        md.last_update_ms = now
        return ErrorCode.NONE

    def _notify_state_change(self, tid: str) -> None:
        fut = self._state_changed.pop(tid, None)
        if fut is not None and not fut.done():
            fut.set_result(None)

    async def _validate_waiting(self, tid: str, pid: int, epoch: int) -> tuple[ErrorCode, TxnMetadata | None]:
        """_validate, but a CONCURRENT_TRANSACTIONS (the previous transaction's markers and Complete
        state still being written, or a transition in flight) is held for up to
        CONCURRENT_WAIT_S while the state settles, then re-checked. In a cluster the markers and
        the replicated Complete take a few ms, longer than a client waits before its next
        AddPartitionsToTxn (librdkafka: about 1 ms), and the client's retry backoff (20 ms and
        more) would otherwise be added to every back-to-back transaction. The answer is the one
        the client's retry would get; a completion that does not settle in time is answered
        CONCURRENT_TRANSACTIONS as before."""
        err, md = self._validate(tid, pid, epoch)
        if err != ErrorCode.CONCURRENT_TRANSACTIONS:
            return err, md
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONCURRENT_WAIT_S
        while err == ErrorCode.CONCURRENT_TRANSACTIONS:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            fut = self._state_changed.get(tid)
            if fut is None or fut.done():
                fut = self._state_changed[tid] = loop.create_future()
            # asyncio.wait neither cancels the shared future at the deadline nor wraps it in a task
            # (wait_for(shield(...)) did both; in a cluster nearly every transaction waits here once).
            done, _ = await asyncio.wait((fut,), timeout=remaining)
            if not done:
                break
            err, md = self._validate(tid, pid, epoch)
        return err, md

    async def _write_tombstone(self, md: TxnMetadata) -> None:
        batch = state_batch(encode_key(md.transactional_id), None, _now_ms())
        await self.access.append(TOPIC, self.partition_for(md.transactional_id), batch)

    # --- InitProducerId ----------------------------------------------------------------------

    def _check_loaded(self, tid: str) -> ErrorCode:
        if self.follows_leadership and self.partition_for(tid) not in self._loaded:
            return ErrorCode.NOT_COORDINATOR  # another broker leads its partition
        if not self._topic_ready or self.partition_for(tid) not in self._loaded:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self._topic_ready else ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE

    async def init_producer_id(self, tid: str, timeout_ms: int, expected_pid: int = -1,
                               expected_epoch: int = -1) -> tuple[ErrorCode, int, int]:
        """InitProducerId up to v5 (no 2PC): (error, producer id, epoch)."""
        err, pid, epoch, _, _ = await self.init_producer_id_2pc(tid, timeout_ms, expected_pid, expected_epoch)
        return err, pid, epoch

    async def init_producer_id_2pc(self, tid: str, timeout_ms: int, expected_pid: int = -1,
                                   expected_epoch: int = -1, enable_2pc: bool = False,
                                   keep_prepared_txn: bool = False) -> tuple[ErrorCode, int, int, int, int]:
        """InitProducerId v6 (KIP-939): (error, producer id, epoch, ongoing transaction's producer
        id, its epoch); the last two are -1 unless a prepared transaction was kept."""
        if keep_prepared_txn and not enable_2pc:
            return ErrorCode.INVALID_REQUEST, -1, -1, -1, -1
        if enable_2pc and not self.two_phase_commit_enable:
            # Kafka answers an authorization failure, so a client cannot probe the broker config.
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1, -1, -1
        if enable_2pc:
            timeout_ms = TWO_PC_TIMEOUT_MS  # the request's timeout is ignored (Kafka's resolvedTxnTimeoutMs)
        elif timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1, -1, -1
        if keep_prepared_txn:
            await self.ensure_topic()
            md = self.txns.get(tid)
            if md is not None and md.state == TxnState.ONGOING and (
                    err := self._check_loaded(tid)) == ErrorCode.NONE:
                return await self._keep_prepared(md)
        err, pid, epoch = await self._init_producer_id(tid, timeout_ms, expected_pid, expected_epoch)
        return err, pid, epoch, -1, -1

    async def _keep_prepared(self, md: TxnMetadata) -> tuple[ErrorCode, int, int, int, int]:
        """keepPreparedTxn on an Ongoing transaction: keep it, fence whoever held it, and hand the
        caller a new epoch to complete it with, plus the prepared transaction's own id/epoch."""
        if md.pending is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1, -1, -1
        if not md.two_phase_commit:
            # Only a 2PC transaction survives a producer restart (Kafka: INVALID_TXN_STATE).
            return ErrorCode.INVALID_TXN_STATE, -1, -1, -1, -1
        new_epoch = md.client_epoch + 1
        if new_epoch >= MAX_EPOCH - 1:
            # Deviation: the recovered identity never rotates to a new producer id (Kafka's
            # nextProducerId); an exhausted epoch leaves only forceTerminateTransaction.
            return ErrorCode.PRODUCER_FENCED, -1, -1, -1, -1
        err = await self._persist(md, TxnState.ONGOING, next_producer_epoch=new_epoch)
        if err != ErrorCode.NONE:
            return err, -1, -1, -1, -1
        log.info("kept prepared transaction %s (producer %d epoch %d) for a new instance at epoch %d",
                 md.transactional_id, md.producer_id, md.producer_epoch, new_epoch)
        return ErrorCode.NONE, md.producer_id, new_epoch, md.producer_id, md.producer_epoch

    async def _init_producer_id(self, tid: str, timeout_ms: int, expected_pid: int,
                                expected_epoch: int) -> tuple[ErrorCode, int, int]:
        await self.ensure_topic()
        if (err := self._check_loaded(tid)) != ErrorCode.NONE:
            return err, -1, -1
        md = self.txns.get(tid)
        if md is None:
            md = TxnMetadata(tid, self.producer_ids.generate(), -1, timeout_ms, TxnState.EMPTY)
            self.txns[tid] = md
            first = os.environ.get("KBROKERTEST_TXN_FIRST_EPOCH", "")
            epoch = min(int(first), MAX_EPOCH - 1) if first.isdigit() else 0
            err = await self._persist(md, TxnState.EMPTY, producer_epoch=epoch, timeout_ms=timeout_ms,
                                      partitions=set(), start_ms=-1)
            if err != ErrorCode.NONE:
                self.txns.pop(tid, None)
                return err, -1, -1
            return ErrorCode.NONE, md.producer_id, md.producer_epoch
        if md.pending is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if expected_pid != -1:
            current = (md.producer_id, md.producer_epoch)
            previous = (md.last_producer_id, md.last_producer_epoch)
            if (expected_pid, expected_epoch) not in (current, previous):
                return ErrorCode.PRODUCER_FENCED, -1, -1
            if (expected_pid, expected_epoch) != current and md.state in (
                    TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
                # A retry of a bump that already happened: hand back the current id and epoch.
                return ErrorCode.NONE, md.producer_id, md.producer_epoch
        if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE,
                        TxnState.DEAD):
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if md.state == TxnState.ONGOING:
            # Fence the previous instance: abort its transaction under a bumped epoch, and have
            # the new one retry (CONCURRENT_TRANSACTIONS) until the abort is complete.
            err = await self._begin_end(md, commit=False, bump_epoch=True)
            return (err if err != ErrorCode.NONE else ErrorCode.CONCURRENT_TRANSACTIONS), -1, -1
        if md.client_epoch >= MAX_EPOCH - 1:
            new_pid, new_epoch = self.producer_ids.generate(), 0
        else:
            new_pid, new_epoch = md.producer_id, md.client_epoch + 1
        # As Kafka's prepareIncrementProducerEpoch: the previous id/epoch is remembered only for a
        # caller that proved it held them (KIP-360), so only its retry is recognised; a plain
        # InitProducerId forgets it, and the instance it replaced stays fenced.
        if expected_pid != -1:
            last = (md.producer_id, md.producer_epoch)
        else:
            last = (md.producer_id if new_pid != md.producer_id else -1, -1)
        err = await self._persist(md, TxnState.EMPTY, producer_id=new_pid, producer_epoch=new_epoch,
                                  timeout_ms=timeout_ms, partitions=set(), start_ms=-1, next_producer_epoch=-1)
        if err != ErrorCode.NONE:
            return err, -1, -1
        md.last_producer_id, md.last_producer_epoch = last
        return ErrorCode.NONE, md.producer_id, md.producer_epoch

    # --- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------------

    def _validate(self, tid: str, pid: int, epoch: int) -> tuple[ErrorCode, TxnMetadata | None]:
        if (err := self._check_loaded(tid)) != ErrorCode.NONE:
            return err, None
        md = self.txns.get(tid)
        if md is None or md.producer_id != pid:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None
        if md.client_epoch != epoch:
            return ErrorCode.PRODUCER_FENCED, None
        if md.pending is not None or md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT,
                                                  TxnState.PREPARE_EPOCH_FENCE):
            return ErrorCode.CONCURRENT_TRANSACTIONS, None
        if md.next_producer_epoch != -1:
            # KIP-939: a recovered prepared transaction can only be completed, not extended.
            return ErrorCode.INVALID_TXN_STATE, None
        return ErrorCode.NONE, md

    async def add_partitions(self, tid: str, pid: int, epoch: int, partitions: Iterable[tuple[str, int]],
                             txn_version: int = 0) -> ErrorCode:
        """AddPartitionsToTxn / AddOffsetsToTxn (``txn_version`` 0), or the implicit add a
        partition leader asks for under TV2 (Produce v12, TxnOffsetCommit v5: ``txn_version`` 2,
        which the transaction then carries until it ends)."""
        err, md = await self._validate_waiting(tid, pid, epoch)
        if md is None:
            return err
        wanted = set(partitions)
        ongoing = md.state == TxnState.ONGOING
        tv = max(md.client_txn_version, txn_version) if ongoing else txn_version
        if ongoing and wanted <= md.partitions and tv == md.client_txn_version:
            return ErrorCode.NONE
        if md.state == TxnState.DEAD:
            return ErrorCode.INVALID_TXN_STATE
        start = md.start_ms if ongoing else _now_ms()
        return await self._persist(md, TxnState.ONGOING, partitions=md.partitions | wanted, start_ms=start,
                                   client_txn_version=tv)

    def verify_partition(self, tid: str, pid: int, epoch: int, topic: str, partition: int) -> ErrorCode:
        """KIP-890 part 1: is this partition part of the producer's ongoing transaction?"""
        md = self.txns.get(tid)
        if md is None or md.producer_id != pid:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if md.producer_epoch != epoch or md.next_producer_epoch != -1:  # recovered: the old instance is fenced
            return ErrorCode.PRODUCER_FENCED
        # As Kafka's handleVerifyPartitionsInTransaction: only PrepareCommit/PrepareAbort are
        # CONCURRENT_TRANSACTIONS. A transition in flight (another AddPartitionsToTxn being written)
        # is not checked: the partitions count once persisted, and the append is validated again.
        # (Answering it CONCURRENT_TRANSACTIONS cost a librdkafka TxnOffsetCommit a 500 ms backoff.)
        if md.completing:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if md.state != TxnState.ONGOING or (topic, partition) not in md.partitions:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    # --- EndTxn --------------------------------------------------------------------------------

    async def end_transaction(self, tid: str, pid: int, epoch: int, commit: bool,
                              txn_version: int = 0) -> tuple[ErrorCode, int, int]:
        """EndTxn: (error, producer id, producer epoch the client continues with). Under TV2 the
        id/epoch is the bumped (or rotated) one; on an error it is (-1, -1), as Kafka answers."""
        if (err := self._check_loaded(tid)) != ErrorCode.NONE:
            return err, -1, -1
        md = self.txns.get(tid)
        if md is not None and md.state == TxnState.ONGOING and md.next_producer_epoch != -1:
            return await self._complete_recovered(md, pid, epoch, commit, txn_version)
        if txn_version >= 2:
            return await self._end_txn_v2(tid, pid, epoch, commit)
        err = await self.end_txn(tid, pid, epoch, commit)
        md = self.txns.get(tid)
        if err != ErrorCode.NONE or md is None:
            return err, -1, -1
        return err, md.producer_id, md.producer_epoch

    async def _complete_recovered(self, md: TxnMetadata, pid: int, epoch: int, commit: bool,
                                  txn_version: int) -> tuple[ErrorCode, int, int]:
        """KIP-939 completeTransaction: EndTxn from the instance that recovered a prepared
        transaction with keepPreparedTxn, under the epoch it was given. The Prepare state (and the
        markers) carry that epoch (TV1) or one more (TV2, whose every end bumps it), so they
        are newer than anything the prepared transaction's own epoch wrote."""
        if md.producer_id != pid:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, -1, -1
        if md.next_producer_epoch != epoch:
            return ErrorCode.PRODUCER_FENCED, -1, -1
        if md.pending is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        err = await self._begin_end(md, commit=commit, bump_epoch=False, txn_version=txn_version)
        if err != ErrorCode.NONE:
            return err, -1, -1
        if md.next_producer_id != -1:
            return ErrorCode.NONE, md.next_producer_id, 0
        return ErrorCode.NONE, md.producer_id, md.producer_epoch

    async def _end_txn_v2(self, tid: str, pid: int, epoch: int, commit: bool) -> tuple[ErrorCode, int, int]:
        """Kafka's endTransaction for TV2 clients (TransactionCoordinator.scala)."""
        md = self.txns.get(tid)
        if md is None:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, -1, -1
        state = md.state
        # A retry of the EndTxn that already bumped the epoch (or rotated the id at overflow).
        retry_on_overflow = md.prev_producer_id == pid and epoch == MAX_EPOCH - 1 and md.producer_epoch == 0
        retry_on_bump = md.producer_epoch == epoch + 1
        if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            valid_epoch = retry_on_bump
        elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            valid_epoch = retry_on_bump or retry_on_overflow or epoch == md.producer_epoch
        else:  # Ongoing, Empty, Dead: the same epoch, never an older or newer one
            valid_epoch = epoch == md.producer_epoch
        is_retry = retry_on_bump or retry_on_overflow
        if md.producer_id != pid and not retry_on_overflow:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, -1, -1
        if not valid_epoch:
            return ErrorCode.PRODUCER_FENCED, -1, -1
        if md.pending is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        done = ErrorCode.NONE, md.producer_id, md.producer_epoch
        if state == TxnState.ONGOING:
            err = await self._begin_end(md, commit=commit, bump_epoch=False, txn_version=2)
        elif state == TxnState.COMPLETE_COMMIT:
            if commit:
                return done if is_retry else (ErrorCode.INVALID_TXN_STATE, -1, -1)
            if is_retry:
                return ErrorCode.INVALID_TXN_STATE, -1, -1
            err = await self._begin_end(md, commit=False, bump_epoch=False, txn_version=2)
        elif state == TxnState.COMPLETE_ABORT:
            if commit:
                return ErrorCode.INVALID_TXN_STATE, -1, -1
            if is_retry:
                return done
            err = await self._begin_end(md, commit=False, bump_epoch=False, txn_version=2)
        elif state == TxnState.EMPTY and not commit:
            err = await self._begin_end(md, commit=False, bump_epoch=False, txn_version=2)
        elif state == TxnState.PREPARE_COMMIT:
            err = ErrorCode.CONCURRENT_TRANSACTIONS if commit else ErrorCode.INVALID_TXN_STATE
        elif state == TxnState.PREPARE_ABORT:
            err = ErrorCode.CONCURRENT_TRANSACTIONS if not commit else ErrorCode.INVALID_TXN_STATE
        else:
            err = ErrorCode.INVALID_TXN_STATE
        if err != ErrorCode.NONE:
            return err, -1, -1
        # What the client continues with: the bumped epoch, or the next id at epoch 0.
        if md.next_producer_id != -1:
            return ErrorCode.NONE, md.next_producer_id, 0
        return ErrorCode.NONE, md.producer_id, md.producer_epoch

    async def end_txn(self, tid: str, pid: int, epoch: int, commit: bool) -> ErrorCode:
        """EndTxn of transaction versions 0/1: the epoch stays; a retry of the same end is NONE."""
        if (err := self._check_loaded(tid)) != ErrorCode.NONE:
            return err
        md = self.txns.get(tid)
        if md is None or md.producer_id != pid:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if md.producer_epoch != epoch:
            return ErrorCode.PRODUCER_FENCED
        if md.pending is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        state = md.state
        if state == TxnState.ONGOING:
            return await self._begin_end(md, commit=commit, bump_epoch=False)
        if state == TxnState.COMPLETE_COMMIT:
            return ErrorCode.NONE if commit else ErrorCode.INVALID_TXN_STATE
        if state == TxnState.COMPLETE_ABORT:
            return ErrorCode.NONE if not commit else ErrorCode.INVALID_TXN_STATE
        if state == TxnState.PREPARE_COMMIT:
            return ErrorCode.CONCURRENT_TRANSACTIONS if commit else ErrorCode.INVALID_TXN_STATE
        if state == TxnState.PREPARE_ABORT:
            return ErrorCode.CONCURRENT_TRANSACTIONS if not commit else ErrorCode.INVALID_TXN_STATE
        return ErrorCode.INVALID_TXN_STATE

    async def _begin_end(self, md: TxnMetadata, *, commit: bool, bump_epoch: bool,
                         txn_version: int | None = None) -> ErrorCode:
        """Write PrepareCommit/PrepareAbort and start the markers. ``bump_epoch`` fences the
        producer (timeout, a new instance); ``txn_version`` is the EndTxn's (None: the
        transaction's own, for coordinator-initiated aborts)."""
        target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        tv = md.client_txn_version if txn_version is None else txn_version
        # A recovered prepared transaction (KIP-939) ends from its newer, client-side epoch.
        changes: dict[str, Any] = {"client_txn_version": tv, "next_producer_epoch": -1}
        if md.next_producer_epoch != -1:
            changes["producer_epoch"] = md.next_producer_epoch
        base_epoch = md.client_epoch
        if tv >= 2:
            prepared, rotate = tv2_end_epochs(base_epoch, fence=bump_epoch)
            changes["producer_epoch"] = prepared
            changes["next_producer_id"] = self.producer_ids.generate() if rotate else -1
            if md.state != TxnState.ONGOING:  # an abort with no partitions: it starts now
                changes["start_ms"] = _now_ms()
        elif bump_epoch and base_epoch + 1 < MAX_EPOCH:
            changes["producer_epoch"] = base_epoch + 1
        err = await self._persist(md, target, **changes)
        if err != ErrorCode.NONE:
            return err
        _crash_if("txn.after_prepare_commit" if commit else "txn.after_prepare_abort")
        self._spawn(self._complete(md))
        return ErrorCode.NONE

    async def _complete(self, md: TxnMetadata) -> None:
        """Write the markers of a prepared transaction, then its Complete state."""
        commit = md.state == TxnState.PREPARE_COMMIT
        p = self.partition_for(md.transactional_id)
        epoch = self.epoch_of(p)
        await _delay_if("txn.before_markers")
        remaining = set(md.partitions)
        backoff = 0.05
        while remaining:
            if not self._still_owned(md, p, epoch):
                log.info("transaction %s: coordinator moved; the new one completes it", md.transactional_id)
                return
            entry = TxnMarkerEntry(md.producer_id, md.producer_epoch, commit, epoch,
                                   _by_topic(remaining), transaction_version=md.client_txn_version)
            try:
                results = await self.access.write_txn_markers([entry])
            except Exception:
                log.exception("writing markers for %s failed; retrying", md.transactional_id)
                results = {}
            for (_, topic, data_p), code in results.items():
                if code == ErrorCode.NONE or code in _GIVE_UP:
                    if code != ErrorCode.NONE:
                        log.warning("dropping marker for %s-%d of %s: %s", topic, data_p, md.transactional_id,
                                    ErrorCode(code).name)
                    remaining.discard((topic, data_p))
            if remaining:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
        _crash_if("txn.after_markers")
        target = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        changes: dict[str, Any] = {"partitions": set()}
        if md.next_producer_id != -1:
            # The epoch is exhausted: continue under the new id (Kafka's prepareComplete).
            changes.update(producer_id=md.next_producer_id, producer_epoch=0, prev_producer_id=md.producer_id,
                           next_producer_id=-1)
        # Complete is applied once appended, without waiting for the ISR: whatever the coordinator
        # acknowledges next for this transactional id is a later record of the same partition, whose
        # replication implies this one's; and a coordinator that takes over without it finds the
        # transaction prepared and writes its (idempotent) markers and Complete again. Waiting here
        # only held back the producer's next transaction (a deviation from Kafka, which waits).
        while await self._persist(md, target, replicated=False, **changes) != ErrorCode.NONE:
            if not self._still_owned(md, p, epoch):
                return
            await asyncio.sleep(0.5)
        log.debug("transaction %s %s", md.transactional_id, target.wire_name)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- timers --------------------------------------------------------------------------------

    async def _every(self, interval_ms: int, fn: Any) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await fn()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction coordinator timer failed")

    async def abort_timed_out(self, now_ms: int | None = None) -> None:
        now = _now_ms() if now_ms is None else now_ms
        for md in list(self.txns.values()):
            # A 2PC transaction (KIP-939) never times out: the external coordinator decides.
            if md.state == TxnState.ONGOING and md.pending is None and not md.two_phase_commit \
                    and md.start_ms + md.timeout_ms < now:
                log.info("aborting transaction %s (producer %d epoch %d): timed out after %d ms",
                         md.transactional_id, md.producer_id, md.producer_epoch, md.timeout_ms)
                self.timed_out_aborts += 1
                await self._begin_end(md, commit=False, bump_epoch=True)

    async def remove_expired_ids(self, now_ms: int | None = None) -> None:
        now = _now_ms() if now_ms is None else now_ms
        for tid, md in list(self.txns.items()):
            if md.pending is None and md.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) \
                    and md.last_update_ms + self.id_expiration_ms < now:
                await self._write_tombstone(md)
                self.txns.pop(tid, None)
                log.info("expired transactional id %s", tid)

    # --- admin -----------------------------------------------------------------------------------

    def list(self, states: set[str] | None = None, producer_ids: set[int] | None = None,
             min_duration_ms: int = -1) -> list[TxnMetadata]:
        now = _now_ms()
        out = []
        for md in self.txns.values():
            if states and md.state.wire_name not in states:
                continue
            if producer_ids and md.producer_id not in producer_ids:
                continue
            if min_duration_ms >= 0 and (md.state != TxnState.ONGOING or now - md.start_ms < min_duration_ms):
                continue
            out.append(md)
        return out


def _bool(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() == "true"


def _by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        out.setdefault(topic, []).append(p)
    return out
