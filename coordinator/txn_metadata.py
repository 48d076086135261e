"""Transaction metadata per transactional id and the state machine it moves through.

States and their wire codes follow Kafka's TransactionState; ``can_transition`` encodes the
allowed predecessor states, so an illegal move is a bug caught at the point it is attempted.

Transaction version 2 (KIP-890 part 2) shares this one state machine: it only adds that an
Empty or completed transaction may be aborted (PrepareAbort with no partitions: a TV2 client
aborts without knowing whether anything was added), and the fields Kafka's
TransactionMetadata keeps for the per-transaction epoch bump: ``next_producer_id`` (the id a
Prepare state rotates to when the bumped epoch is exhausted), ``prev_producer_id`` (the id it
rotated from, so a retried EndTxn of that id is recognised) and ``client_txn_version``.

Two-phase commit (KIP-939) adds no state either. As in Kafka, a 2PC transaction is one whose
timeout is ``TWO_PC_TIMEOUT_MS`` (Integer.MAX_VALUE, what InitProducerId with ``enable2Pc``
stores, so the flag survives in ``__transaction_state`` and the timeout sweeper skips it), and
a prepared transaction kept across a producer restart (``keepPreparedTxn``) is an Ongoing one
with a second, client-side identity: ``next_producer_epoch`` (Kafka's nextProducerEpoch, tagged
field 3 of TransactionLogValue) is the epoch the new producer instance holds, while the
transaction's data and markers stay under ``producer_id``/``producer_epoch``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def wire_name(self) -> str:
        """Names as DescribeTransactions/ListTransactions report them."""
        return {
            0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort", 4: "CompleteCommit",
            5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence",
        }[int(self)]


_PREVIOUS = {
    TxnState.EMPTY: {TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
    TxnState.ONGOING: {TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
    TxnState.PREPARE_COMMIT: {TxnState.ONGOING},
    # From Empty/Complete*: a TV2 abort of a transaction with no partitions (as Kafka 4.0).
    TxnState.PREPARE_ABORT: {TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE, TxnState.EMPTY,
                             TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
    TxnState.COMPLETE_COMMIT: {TxnState.PREPARE_COMMIT},
    TxnState.COMPLETE_ABORT: {TxnState.PREPARE_ABORT},
    TxnState.DEAD: {TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
    TxnState.PREPARE_EPOCH_FENCE: {TxnState.ONGOING},
}

MAX_EPOCH = 32767  # Short.MAX_VALUE: an epoch that would reach it forces a new producer id
TWO_PC_TIMEOUT_MS = 2147483647  # Integer.MAX_VALUE: Kafka's marker of a 2PC transaction


def tv2_end_epochs(epoch: int, fence: bool) -> tuple[int, bool]:
    """(epoch of the Prepare state and its markers, whether the producer id must rotate) for a
    TV2 commit/abort of a transaction at client-visible ``epoch``.

    Every end bumps the epoch once; an abort that fences the producer (timeout, a new instance)
    bumps it once more first, as Kafka's prepareFenceProducerEpoch followed by the TV2 bump.
    Markers may carry Short.MAX_VALUE, but a client never sees it: a Prepare state that reaches
    it completes under a new producer id at epoch 0 (Kafka's nextProducerId).
    """
    prepared = min(epoch + (2 if fence else 1), MAX_EPOCH)
    return prepared, prepared >= MAX_EPOCH


def can_transition(src: TxnState, dst: TxnState) -> bool:
    return src in _PREVIOUS[dst]


@dataclass(slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_id: int = -1
    last_producer_epoch: int = -1
    # KIP-890 part 2 (persisted as tagged fields of TransactionLogValue v1).
    prev_producer_id: int = -1
    next_producer_id: int = -1
    client_txn_version: int = 0
    # KIP-939: the epoch a producer restarted with keepPreparedTxn holds while the prepared
    # transaction it recovered is still Ongoing under producer_epoch (-1: none).
    next_producer_epoch: int = -1
    # A transition written to the log but not yet applied (Kafka's pendingState): requests
    # arriving meanwhile get CONCURRENT_TRANSACTIONS.
    pending: TxnState | None = None

    def partitions_by_topic(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, p in sorted(self.partitions):
            out.setdefault(topic, []).append(p)
        return out

    @property
    def two_phase_commit(self) -> bool:
        """KIP-939: Kafka's isDistributedTwoPhaseCommitTxn (the timeout is the flag)."""
        return self.timeout_ms == TWO_PC_TIMEOUT_MS

    @property
    def client_epoch(self) -> int:
        """The epoch the current producer instance holds (the recovered identity, if any)."""
        return self.next_producer_epoch if self.next_producer_epoch != -1 else self.producer_epoch

    @property
    def completing(self) -> bool:
        return self.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
