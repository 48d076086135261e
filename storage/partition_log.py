"""A partition's log together with its producer state: the one append path of a partition.

Kafka keeps every append in ``UnifiedLog.append``, parameterised by its ``AppendOrigin``, so that
producer state, the leader-epoch cache, the ``.txnindex`` and the LSO are updated in one place
whoever writes. ``PartitionLog`` is that place here:

- ``append(..., origin=CLIENT)``: a producer's batch on the leader. A retry of one of the last
  five batches of its producer is answered with the original offsets and not written again
  (Kafka's duplicate check); a transactional batch that opens a transaction on this partition
  needs the verification guard handed out by ``start_verification`` (KIP-890); the producer's
  epoch and sequence are checked (``ProducerStateManager.validate``); offsets and the leader epoch
  are assigned.
- ``append(..., origin=COORDINATOR)``: coordinator records (group and transaction state,
  transactional offset commits) on the leader: offsets assigned, no client checks.
- ``append_marker``: a COMMIT/ABORT control batch written for the transaction coordinator, after
  Kafka's marker checks (producer epoch, coordinator epoch).
- ``append(..., origin=REPLICATION)``: a follower's copy of its leader's batches, kept as written.

After any of them ``_apply_producer_state`` replays the appended batches into the producer state
the same way: data batches record their sequence and may open a transaction, control batches end
one, and an ABORT adds its entry to the ``.txnindex``.

Errors are ``ProducerStateError`` subclasses (each with a Kafka ``error_code``) and
``TxnVerificationError``; the caller maps them to its protocol answer.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from storage.batch import BatchHeader
from storage.log import AbortedTxn, Log
from storage.producer_state import InvalidTxnStateError, ProducerStateManager


class AppendOrigin(enum.Enum):
    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


class TxnVerificationError(InvalidTxnStateError):
    """A transactional batch opening a transaction the coordinator did not confirm (KIP-890)."""


# A verification guard that lets any transactional batch through: the producer's transaction is
# already open on this partition, so there is nothing to verify (Kafka's VerificationGuard.SENTINEL).
NOT_REQUIRED = object()


@dataclass(slots=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    log_append_time: int = -1
    # flush.messages reached: the caller flushes (and, to acknowledge, waits for it)
    flush_due: bool = False
    # a retry of a batch already in the log: answered with its original offsets, nothing written
    duplicate: bool = False


class PartitionLog:
    """``log`` with its ``producer_state`` (None for logs kept without one, e.g. by tools)."""

    __slots__ = ("log", "producer_state", "_verifications")

    def __init__(self, log: Log) -> None:
        self.log = log
        self.producer_state: ProducerStateManager | None = getattr(log, "producer_state", None)
        # producer id -> the guard of the verification in progress for its next transaction here
        self._verifications: dict[int, object] = {}

    # --- KIP-890 transaction verification ---------------------------------------------------

    def has_ongoing_txn(self, producer_id: int, producer_epoch: int) -> bool:
        ps = self.producer_state
        entry = ps.last_entry(producer_id) if ps is not None else None
        return (entry is not None and entry.current_txn_first_offset is not None
                and entry.producer_epoch == producer_epoch)

    def start_verification(self, producer_id: int, producer_epoch: int) -> object:
        """The guard to pass to ``append`` once the coordinator confirmed the partition is in the
        producer's transaction (Kafka's maybeStartTransactionVerification). A marker for the
        producer written in between voids it, so a transaction that ended while the coordinator
        was asked cannot be reopened by the late batch."""
        if self.has_ongoing_txn(producer_id, producer_epoch):
            return NOT_REQUIRED
        guard = self._verifications.get(producer_id)
        if guard is None:
            guard = self._verifications[producer_id] = object()
        return guard

    def _check_verification(self, h: BatchHeader, guard: object | None) -> None:
        if guard is NOT_REQUIRED or self.has_ongoing_txn(h.producer_id, h.producer_epoch):
            return
        if guard is None or self._verifications.get(h.producer_id) is not guard:
            raise TxnVerificationError("Partition was not added to the transaction")

    # --- appends ------------------------------------------------------------------------------

    def append(self, buf: bytearray | memoryview, headers: list[BatchHeader], origin: AppendOrigin, *,
               leader_epoch: int = -1, now_ms: int, verification_guard: object | None = None) -> LogAppendInfo:
        """Append ``headers``' batches of ``buf`` (validated by the caller: CRC, records). CLIENT
        appends carry one batch (Produce v3+)."""
        lg = self.log
        ps = self.producer_state
        if origin is AppendOrigin.REPLICATION:
            result = lg.append_as_follower(buf, headers, now_ms=now_ms)
        else:
            if origin is AppendOrigin.CLIENT and ps is not None:
                h = headers[0]
                if h.has_producer_id:
                    dup = ps.check_duplicate(h)
                    if dup is not None:
                        # The original may still wait for its fsync: the retry is acknowledged no earlier.
                        due = dup.last_offset >= lg.recovery_point and lg.flush_messages_due()
                        return LogAppendInfo(dup.first_offset, dup.last_offset, flush_due=due, duplicate=True)
                    if h.is_transactional:
                        self._check_verification(h, verification_guard)
                    ps.validate(h, now_ms=now_ms)
            result = lg.append(buf, headers, leader_epoch=leader_epoch, now_ms=now_ms)
        self._apply_producer_state(buf, headers)
        return LogAppendInfo(result.first_offset, result.last_offset, result.log_append_time, result.flush_due)

    def append_marker(self, batch: bytearray, header: BatchHeader, *, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int, transaction_version: int, leader_epoch: int,
                      now_ms: int) -> LogAppendInfo:
        """Append a COMMIT/ABORT control batch for the transaction coordinator, after Kafka's marker
        checks (InvalidProducerEpochError, TransactionCoordinatorFencedError)."""
        if self.producer_state is not None:
            self.producer_state.validate_marker(producer_id, producer_epoch, coordinator_epoch,
                                                transaction_version=transaction_version)
        return self.append(batch, [header], AppendOrigin.COORDINATOR, leader_epoch=leader_epoch, now_ms=now_ms)

    def _apply_producer_state(self, buf: bytearray | memoryview, headers: list[BatchHeader]) -> None:
        ps = self.producer_state
        if ps is None:
            return
        for h in headers:
            if not h.has_producer_id:
                continue
            if h.is_control:
                self._verifications.pop(h.producer_id, None)
                done = ps.update_from_log(h, buf)
                if done is not None and done.is_aborted:
                    self.log.add_aborted_txn(AbortedTxn(done.producer_id, done.first_offset, done.last_offset,
                                                        done.last_stable_offset))
            else:
                if h.is_transactional:
                    self._verifications.pop(h.producer_id, None)  # the transaction is open now
                ps.update_from_log(h)
