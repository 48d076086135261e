"""Transaction metadata per transactional id and the state machine it moves through.

States and their wire codes follow Kafka's TransactionState; ``can_transition`` encodes the
allowed predecessor states, so an illegal move is a bug caught at the point it is attempted.
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
    TxnState.PREPARE_ABORT: {TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE},
    TxnState.COMPLETE_COMMIT: {TxnState.PREPARE_COMMIT},
    TxnState.COMPLETE_ABORT: {TxnState.PREPARE_ABORT},
    TxnState.DEAD: {TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
    TxnState.PREPARE_EPOCH_FENCE: {TxnState.ONGOING},
}

MAX_EPOCH = 32767  # Short.MAX_VALUE: an epoch that would reach it forces a new producer id


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
    # A transition written to the log but not yet applied (Kafka's pendingState): requests
    # arriving meanwhile get CONCURRENT_TRANSACTIONS.
    pending: TxnState | None = None

    def partitions_by_topic(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, p in sorted(self.partitions):
            out.setdefault(topic, []).append(p)
        return out

    @property
    def completing(self) -> bool:
        return self.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
