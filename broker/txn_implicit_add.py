"""Transaction version 2 at the partition leader: Produce v12 adds its partitions to the
producer's transaction itself (KIP-890 part 2, Kafka's ``addPartition`` transaction-supported
operation), instead of the client sending AddPartitionsToTxn first.

Before a v12 transactional produce is appended, every partition whose producer has no open
transaction at that epoch on the partition is added through the transaction coordinator
(its own coordinator directly; in a cluster, when another broker coordinates the transactional
id, AddPartitionsToTxn v5 to it, as Kafka's AddPartitionsToTxnManager: broker/txn_verification.py). The coordinator's answer becomes the
partition's produce error, translated as Kafka's ReplicaManager does for this operation:
PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH (what producers expect on Produce);
INVALID_PRODUCER_ID_MAPPING -> INVALID_TXN_STATE (kbroker's verification path does the same);
coordinator unavailable / loading / not coordinator -> NOT_ENOUGH_REPLICAS (retriable without a
metadata refresh); CONCURRENT_TRANSACTIONS is kept for TV2 (Kafka does not convert it: it is
common while the previous transaction completes). Partitions that were added then pass the
ordinary KIP-890 part 1 verification in the replica manager.
"""

from __future__ import annotations

from typing import Any

from broker.features import TV2_PRODUCE_VERSION, transaction_version
from broker.txn_verification import ask_coordinator
from protocol.errors import ErrorCode
from storage.batch import parse_header

_TO_NOT_ENOUGH_REPLICAS = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                           ErrorCode.NOT_COORDINATOR, ErrorCode.NETWORK_EXCEPTION}


def produce_error(code: int) -> int:
    """A coordinator answer as the Produce v12 partition error (see the module docstring)."""
    if code == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code == ErrorCode.INVALID_PRODUCER_ID_MAPPING:
        return ErrorCode.INVALID_TXN_STATE
    if code in _TO_NOT_ENOUGH_REPLICAS:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    return code


async def add_produce_partitions(broker: Any, request: Any, version: int) -> dict[tuple[str, int], int]:
    """Implicitly add the partitions of a TV2 transactional produce; (topic, partition) -> error
    for those that must not be appended. Empty unless the request is a TV2 one."""
    tid = request.transactional_id
    if not tid or transaction_version(broker, version, TV2_PRODUCE_VERSION) < 2:
        return {}
    rm = broker.replica_manager
    wanted: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for td in request.topic_data:
        for pd in td.partition_data:
            part, _ = rm.get_leader(td.name, pd.index)
            if part is None or pd.records is None or len(pd.records) < 61:
                continue  # answered by the normal path (unknown partition, invalid records)
            try:
                h = parse_header(pd.records)
            except Exception:  # noqa: BLE001 - malformed batches are answered by validation
                continue
            if not h.is_transactional or h.producer_id < 0:
                continue
            ps = part.producer_state
            entry = ps.last_entry(h.producer_id) if ps is not None else None
            if entry is not None and entry.current_txn_first_offset is not None \
                    and entry.producer_epoch == h.producer_epoch:
                continue  # already in this transaction on this partition
            wanted.setdefault((h.producer_id, h.producer_epoch), []).append((td.name, pd.index))
    errors: dict[tuple[str, int], int] = {}
    for (pid, epoch), tps in wanted.items():
        codes = await ask_coordinator(broker, tid, pid, epoch, tps, add=True)
        errors.update({tp: produce_error(code) for tp, code in codes.items() if code != ErrorCode.NONE})
    return errors
