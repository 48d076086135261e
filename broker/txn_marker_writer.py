"""Transaction markers written on this broker's partition leaders: the code both a WriteTxnMarkers
request (broker/handlers/txn_markers.py) and this broker's own transaction coordinator reach.

For each partition the COMMIT/ABORT control batch goes through the partition's one append path
(broker.append_path.LeaderAppends.write_marker: Kafka's marker checks, the producer's open
transaction closed, an ABORT in the ``.txnindex``), read_committed fetchers parked on it wake, and
markers landing in ``__consumer_offsets`` settle the group offsets committed in that transaction.
The answer waits until flush.messages is honoured and, in a cluster, until the ISR has the markers
(Kafka appends them with acks=all): NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT or
NOT_LEADER_OR_FOLLOWER otherwise, which the coordinator retries. Only leaders write markers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from broker import log_flusher
from broker.replica_manager import ReplicaManager
from coordinator import txn_records
from coordinator.partition_access import TxnMarkerEntry
from protocol.errors import ErrorCode
from storage.batch import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT

MARKER_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms for the marker append
OFFSETS_TOPIC = "__consumer_offsets"


def marker_batch(m: TxnMarkerEntry) -> bytes:
    """The COMMIT/ABORT control batch of ``m``: the same bytes on every partition of the entry
    (the log patches in each partition's base offset and leader epoch), so it is built once."""
    return txn_records.marker_batch(CONTROL_TYPE_COMMIT if m.committed else CONTROL_TYPE_ABORT, m.producer_id,
                                    m.producer_epoch, m.coordinator_epoch, int(time.time() * 1000))


class MarkerWriter:
    """``group_coordinator()``: this broker's group coordinator (None while there is none)."""

    def __init__(self, partitions: ReplicaManager, group_coordinator: Callable[[], Any]) -> None:
        self.partitions = partitions
        self._group_coordinator = group_coordinator

    def write(self, m: TxnMarkerEntry, topic: str, partition: int, batch: bytes) -> ErrorCode:
        rm = self.partitions
        part, missing = rm.get_leader(topic, partition)
        if part is None:  # only the leader writes markers; a follower copies them
            return missing
        code = rm.appends.write_marker(part, bytearray(batch), producer_id=m.producer_id,
                                       producer_epoch=m.producer_epoch, coordinator_epoch=m.coordinator_epoch,
                                       transaction_version=m.transaction_version)
        if code == ErrorCode.NONE and topic == OFFSETS_TOPIC:
            gc = self._group_coordinator()
            if gc is not None:
                gc.complete_txn(partition, m.producer_id, m.committed)
        return code

    async def write_all(self, markers: list[TxnMarkerEntry]) -> dict[tuple[int, str, int], int]:
        """Write ``markers`` on the partitions this broker leads; a code per (producer id, topic, partition)."""
        rm = self.partitions
        out: dict[tuple[int, str, int], int] = {}
        touched = []
        for m in markers:
            batch = marker_batch(m)
            for topic, parts in m.partitions.items():
                for p in parts:
                    code = out[(m.producer_id, topic, p)] = self.write(m, topic, p, batch)
                    part = rm.get(topic, p)
                    if part is not None and code == ErrorCode.NONE:
                        touched.append((m.producer_id, topic, part))
        # Markers are answered (and CompleteCommit written) only once flush.messages is honoured.
        await log_flusher.flush_due(part for _, _, part in touched)
        # In a cluster, only once the ISR has them too (Kafka appends markers with acks=all).
        waits = [(pid, topic, part) for pid, topic, part in touched if part.replicated]
        if waits:
            codes = await asyncio.gather(*(rm.hw.wait_replicated(part, part.log.log_end_offset, MARKER_TIMEOUT_S)
                                           for _, _, part in waits))
            for (pid, topic, part), code in zip(waits, codes, strict=True):
                if code != ErrorCode.NONE:
                    out[(pid, topic, part.index)] = code
        return out
