"""Per-partition producer state for idempotence and transactions (Kafka's ProducerStateManager).

For every producer id seen on a partition it keeps the epoch, the metadata of the last
five batches (to answer retries of any in-flight batch with its original offsets), the
coordinator epoch of the last transaction marker and the first offset of the open
transaction. Open transactions are also indexed by first offset so the first unstable
offset (which bounds the LSO) is O(1).

The state is rebuilt on start-up from the newest ``<offset>.snapshot`` file (Kafka's
producer snapshot layout, byte for byte) plus a replay of the log tail; ``storage.log``
drives that through ``truncate_and_reload`` / ``update_from_log`` / ``take_snapshot``.
The produce path calls ``check_duplicate`` → ``validate`` → append → ``update``; the
WriteTxnMarkers path calls ``validate_marker`` → append marker → ``complete_txn``.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from storage.batch import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    BatchHeader,
    parse_control_key,
)
from storage.checkpoints import atomic_write_bytes
from storage.record_validation import first_record_key_value

log = logging.getLogger(__name__)

INT32_MAX = 0x7FFFFFFF
NUM_BATCHES_TO_RETAIN = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
SNAPSHOT_SUFFIX = ".snapshot"
PRODUCER_SNAPSHOT_VERSION = 1

# Snapshot layout: version int16, crc uint32 (CRC32C of every byte after it), then an
# int32-counted array of entries, each: producerId int64, producerEpoch int16,
# lastSequence int32, lastOffset int64, offsetDelta int32, timestamp int64,
# coordinatorEpoch int32, currentTxnFirstOffset int64 (-1 when none).
_SNAP_HEADER = struct.Struct(">hIi")
_SNAP_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_OFFSET = 2
_ENTRIES_OFFSET = 6  # where the CRC-covered part starts

# Kafka error codes (org.apache.kafka.common.protocol.Errors).
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
TRANSACTION_COORDINATOR_FENCED = 52
UNKNOWN_PRODUCER_ID = 59
INVALID_RECORD = 87


# --- errors ------------------------------------------------------------------------------------


class ProducerStateError(Exception):
    """A produce or marker append rejected by producer-state rules; carries the Kafka error code."""

    error_code: int = -1


class OutOfOrderSequenceError(ProducerStateError):
    error_code = OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceError(ProducerStateError):
    # Kafka brokers no longer raise this (duplicates of the cached batches are answered with
    # their offsets, older ones are out of order); kept so callers can name the code.
    error_code = DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(ProducerStateError):
    error_code = INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(ProducerStateError):
    error_code = INVALID_TXN_STATE


class TransactionCoordinatorFencedError(ProducerStateError):
    error_code = TRANSACTION_COORDINATOR_FENCED


class UnknownProducerIdError(ProducerStateError):
    # Not raised since KIP-360 (Kafka 2.5): an unknown producer may start at any sequence.
    error_code = UNKNOWN_PRODUCER_ID


class InvalidRecordError(ProducerStateError):
    error_code = INVALID_RECORD


class CorruptSnapshotError(Exception):
    """A producer snapshot file that cannot be trusted (bad version, CRC, or truncated)."""


# --- value types -------------------------------------------------------------------------------


def increment_sequence(sequence: int, increment: int) -> int:
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(slots=True, frozen=True)
class BatchMetadata:
    """One appended batch of a producer (Kafka keeps lastSeq, lastOffset, offsetDelta, timestamp)."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None
    batch_metadata: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))

    @property
    def is_empty(self) -> bool:
        return not self.batch_metadata

    @property
    def first_seq(self) -> int:
        return self.batch_metadata[0].first_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self.batch_metadata[0].first_offset if self.batch_metadata else -1

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batch_metadata[-1].offset_delta if self.batch_metadata else 0

    def maybe_update_epoch(self, epoch: int) -> None:
        # A new epoch starts a new sequence space: the cached batches no longer dedupe anything.
        if epoch != self.producer_epoch:
            self.batch_metadata.clear()
            self.producer_epoch = epoch

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int) -> None:
        self.maybe_update_epoch(epoch)
        self.batch_metadata.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batch_metadata:
            if b.last_seq == last_seq and b.first_seq == first_seq:
                return b
        return None


@dataclass(slots=True, frozen=True)
class CompletedTxn:
    """A transaction ended by a marker; ``last_stable_offset`` is what Kafka writes to .txnindex."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool
    last_stable_offset: int


@dataclass(slots=True)
class VerificationState:
    """KIP-890 transaction verification outcome for one produce (optional input to ``validate``).

    ``verified`` False makes a transactional batch that opens no known transaction fail
    with INVALID_TXN_STATE; ``lowest_sequence`` and ``supports_epoch_bump`` mirror Kafka's
    VerificationStateEntry sequence checks.
    """

    verified: bool = True
    lowest_sequence: int | None = None
    supports_epoch_bump: bool = False


# --- snapshot files ------------------------------------------------------------------------------


def snapshot_path(partition_dir: Path, offset: int) -> Path:
    return partition_dir / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def _snapshot_offset(name: str) -> int | None:
    if not name.endswith(SNAPSHOT_SUFFIX):
        return None
    stem = name[: -len(SNAPSHOT_SUFFIX)]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """Kafka's producer snapshot bytes for ``entries`` (written in producer-id order)."""
    items = sorted(entries, key=lambda e: e.producer_id)
    buf = bytearray(_SNAP_HEADER.size + _SNAP_ENTRY.size * len(items))
    _SNAP_HEADER.pack_into(buf, 0, PRODUCER_SNAPSHOT_VERSION, 0, len(items))
    pos = _SNAP_HEADER.size
    for e in items:
        txn = -1 if e.current_txn_first_offset is None else e.current_txn_first_offset
        _SNAP_ENTRY.pack_into(buf, pos, e.producer_id, e.producer_epoch, e.last_seq, e.last_data_offset,
                              e.last_offset_delta, e.last_timestamp, e.coordinator_epoch, txn)
        pos += _SNAP_ENTRY.size
    struct.pack_into(">I", buf, _CRC_OFFSET, crc32c.crc32c(memoryview(buf)[_ENTRIES_OFFSET:]))
    return bytes(buf)


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    if len(data) < _SNAP_HEADER.size:
        raise CorruptSnapshotError(f"snapshot too short: {len(data)} bytes")
    version, crc, count = _SNAP_HEADER.unpack_from(data, 0)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"Snapshot contained an unknown file version {version}")
    computed = crc32c.crc32c(memoryview(data)[_ENTRIES_OFFSET:])
    if crc != computed:
        raise CorruptSnapshotError(f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {crc}. Computed crc: {computed}")
    if count < 0 or len(data) < _SNAP_HEADER.size + count * _SNAP_ENTRY.size:
        raise CorruptSnapshotError(f"Snapshot failed schema validation: {count} entries do not fit in {len(data)} bytes")
    entries = []
    pos = _SNAP_HEADER.size
    for _ in range(count):
        pid, epoch, seq, offset, delta, ts, coord_epoch, txn_first = _SNAP_ENTRY.unpack_from(data, pos)
        pos += _SNAP_ENTRY.size
        entry = ProducerStateEntry(pid, epoch, coord_epoch, ts, txn_first if txn_first >= 0 else None)
        if offset >= 0:  # Kafka writes lastOffset -1 for an entry without batches (marker-only)
            entry.batch_metadata.append(BatchMetadata(seq, offset, delta, ts))
        entries.append(entry)
    return entries


def read_snapshot_file(path: Path | str) -> list[ProducerStateEntry]:
    """Entries of one snapshot file; raises CorruptSnapshotError if it cannot be trusted."""
    return decode_snapshot(Path(path).read_bytes())


def write_snapshot_file(path: Path | str, entries: Iterable[ProducerStateEntry], *, sync: bool = True) -> None:
    """Write a snapshot atomically (tmp file, fsync, rename, fsync the directory); with
    ``sync=False`` without the fsyncs, which the caller then owes (see Log.roll)."""
    # The log deletes stray *.tmp files at load.
    atomic_write_bytes(Path(path), encode_snapshot(entries), sync=sync)


# --- the manager -------------------------------------------------------------------------------


def _now_ms() -> int:
    return int(time.time() * 1000)


class ProducerStateManager:
    """Producer id → ProducerStateEntry for one partition, plus its open transactions."""

    def __init__(self, partition_dir: Path, *, producer_id_expiration_ms: int = 86400000) -> None:
        self.partition_dir = Path(partition_dir)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        # first offset -> producer id. Transactions start in offset order, so dict insertion
        # order is offset order and the first key is the first unstable offset.
        self._ongoing: dict[int, int] = {}
        # Completed transactions whose marker may still be above the high watermark (cluster mode):
        # first offset -> (producer id, marker offset). Only consulted when a caller passes the HW.
        self._unreplicated: dict[int, tuple[int, int]] = {}
        self.map_end_offset = 0
        # The offset of the newest snapshot on disk this state was loaded from or written to
        # (-1: none known), so that a close with nothing new writes none (Kafka's takeSnapshot
        # checks lastMapOffset > lastSnapOffset the same way).
        self.last_snapshot_offset = -1
        self._tp = self.partition_dir.name

    # --- snapshots / recovery ------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files on disk, ascending."""
        try:
            names = os.listdir(self.partition_dir)
        except FileNotFoundError:
            return []
        return sorted(o for o in map(_snapshot_offset, names) if o is not None)

    def latest_snapshot_offset(self) -> int | None:
        offsets = self.snapshot_offsets()
        return offsets[-1] if offsets else None

    def _delete_snapshot(self, offset: int) -> None:
        if offset == self.last_snapshot_offset:
            self.last_snapshot_offset = -1
        try:
            snapshot_path(self.partition_dir, offset).unlink()
        except FileNotFoundError:
            pass

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None:
        """Drop snapshots outside (log start, LEO]; if the in-memory map does not end at the
        LEO, reload it from the newest good snapshot (or empty at the log start). The caller
        then replays the log from ``map_end_offset``."""
        offsets = self.snapshot_offsets()
        for off in offsets:
            # Kafka also drops a snapshot at exactly the log start: it describes only deleted data.
            if off > log_end_offset or off <= log_start_offset:
                self._delete_snapshot(off)
        if log_end_offset != self.map_end_offset:
            self.producers.clear()
            self._ongoing.clear()
            self._unreplicated.clear()
            self._load_from_snapshot(log_start_offset, now_ms)
        elif self.map_end_offset < log_start_offset:
            self.map_end_offset = log_start_offset

    def _load_from_snapshot(self, log_start_offset: int, now_ms: int) -> None:
        for off in reversed(self.snapshot_offsets()):
            path = snapshot_path(self.partition_dir, off)
            try:
                entries = read_snapshot_file(path)
            except (CorruptSnapshotError, OSError) as e:
                log.warning("%s: ignoring producer snapshot %s: %s", self._tp, path.name, e)
                self._delete_snapshot(off)
                continue
            txns = []
            for entry in entries:
                if self._is_expired(entry, now_ms):
                    continue
                self.producers[entry.producer_id] = entry
                if entry.current_txn_first_offset is not None:
                    txns.append((entry.current_txn_first_offset, entry.producer_id))
            for first, pid in sorted(txns):
                self._ongoing[first] = pid
            self.map_end_offset = off
            self.last_snapshot_offset = off
            log.debug("%s: loaded producer state for %d producers from snapshot at offset %d",
                      self._tp, len(self.producers), off)
            return
        self.map_end_offset = log_start_offset

    def take_snapshot(self, offset: int, *, sync: bool = True) -> Path:
        """Persist the state as ``<offset>.snapshot`` and return its path; the caller guarantees
        it covers the log below offset. ``sync=False`` leaves the fsync to the caller (Kafka
        does the same at a segment roll): a snapshot torn by a crash fails its CRC on load and
        is dropped for an older one plus a longer replay."""
        self.map_end_offset = max(self.map_end_offset, offset)
        self.partition_dir.mkdir(parents=True, exist_ok=True)
        path = snapshot_path(self.partition_dir, offset)
        write_snapshot_file(path, self.producers.values(), sync=sync)
        self.last_snapshot_offset = offset
        return path

    def delete_snapshots_below(self, offset: int) -> None:
        for off in self.snapshot_offsets():
            if off < offset:
                self._delete_snapshot(off)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything (all snapshots included); the log now starts empty at ``offset``."""
        self.producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        for off in self.snapshot_offsets():
            self._delete_snapshot(off)
        self.map_end_offset = offset

    def update_from_log(self, header: BatchHeader, batch: bytes | bytearray | memoryview | None = None) -> CompletedTxn | None:
        """Replay a batch already in the log, without validation (recovery, replication).

        Control batches end the producer's open transaction. Pass the batch bytes (whole
        batch, or a buffer in which the header's ``position`` points at it) so the marker
        type and coordinator epoch are known; without them the transaction still ends but
        is reported as committed and the coordinator epoch is left unchanged.
        """
        self.map_end_offset = max(self.map_end_offset, header.last_offset + 1)
        if header.producer_id < 0:
            return None
        if header.is_control:
            if header.records_count == 0:
                return None  # the cleaner emptied it: the whole transaction is gone
            control_type, coord_epoch = CONTROL_TYPE_COMMIT, None
            if batch is not None:
                try:
                    control_type, coord_epoch = _read_marker(header, batch)
                except Exception as e:  # noqa: BLE001 - a garbled marker must not stop recovery
                    log.warning("%s: unreadable control batch at offset %d: %s", self._tp, header.base_offset, e)
            entry = self.producers.get(header.producer_id)
            if entry is None:
                entry = self.producers[header.producer_id] = ProducerStateEntry(header.producer_id)
            if coord_epoch is None:
                coord_epoch = entry.coordinator_epoch
            return self._end_txn(entry, header.producer_epoch, control_type == CONTROL_TYPE_ABORT, coord_epoch,
                                 header.base_offset, header.max_timestamp)
        self._apply_data_batch(header)
        return None

    # --- produce path ----------------------------------------------------------------------

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def check_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        """Metadata of the cached batch this one retries (same epoch and sequence range), if any."""
        entry = self.producers.get(header.producer_id)
        if entry is None or header.base_sequence < 0:
            return None
        return entry.find_duplicate(header.producer_epoch, header.base_sequence, header.last_sequence)

    def validate(self, header: BatchHeader, *, now_ms: int | None = None,
                 verification_state: VerificationState | None = None) -> None:
        """Raise ProducerStateError if a client batch may not be appended (Kafka's rules, in order:
        sequence present, transaction verification, epoch fencing, sequence continuity, a
        non-transactional write inside an open transaction)."""
        pid = header.producer_id
        if pid < 0:
            return
        epoch = header.producer_epoch
        first_seq = header.base_sequence
        if first_seq < 0:
            raise InvalidRecordError(
                f"Invalid sequence number {first_seq} in record batch with producerId {pid} in topic partition {self._tp}")
        entry = self.producers.get(pid)
        current_epoch = entry.producer_epoch if entry is not None else NO_PRODUCER_EPOCH

        if header.is_transactional and verification_state is not None and not (
            entry is not None and entry.current_txn_first_offset is not None and entry.producer_epoch == epoch
        ):
            if epoch < current_epoch:
                raise InvalidProducerEpochError(
                    f"Epoch of producer {pid} is {epoch}, which is smaller than the last seen epoch {current_epoch}")
            if not verification_state.verified:
                raise InvalidTxnStateError("Record was not part of an ongoing transaction")

        if epoch < current_epoch:
            raise InvalidProducerEpochError(
                f"Epoch of producer {pid} in {self._tp} is {epoch}, which is < the last seen epoch {current_epoch}")

        if verification_state is not None:
            if verification_state.supports_epoch_bump and first_seq != 0 and (entry is None or entry.is_empty):
                raise OutOfOrderSequenceError(
                    f"Invalid sequence number for producer {pid} in partition {self._tp}: {first_seq} (incoming seq. "
                    "number). Expected sequence 0 for transactions v2 idempotent producer with no existing state.")
            low = verification_state.lowest_sequence
            if low is not None and first_seq > low:
                raise OutOfOrderSequenceError(
                    f"Out of order sequence number for producer {pid} in partition {self._tp}: {first_seq} "
                    f"(incoming seq. number), {low} (earliest seen sequence)")

        if epoch != current_epoch:
            # A new (bumped) epoch restarts the sequence at 0. A producer with no state at all
            # may start anywhere (KIP-360: its earlier batches may have been removed by retention).
            if first_seq != 0 and current_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"Invalid sequence number for new epoch of producer {pid} in partition {self._tp}: {epoch} "
                    f"(request epoch), {first_seq} (seq. number), {current_epoch} (current producer epoch)")
        elif current_epoch != NO_PRODUCER_EPOCH:
            assert entry is not None
            last_seq = entry.last_seq
            if not _in_sequence(last_seq, first_seq):
                raise OutOfOrderSequenceError(
                    f"Out of order sequence number for producer {pid} in partition {self._tp}: {first_seq} "
                    f"(incoming seq. number), {last_seq} (current end sequence number)")

        if entry is not None and entry.current_txn_first_offset is not None and not header.is_transactional:
            raise InvalidTxnStateError(
                f"Expected transactional write from producer {pid} in partition {self._tp}")

    def update(self, header: BatchHeader, *, now_ms: int | None = None) -> None:
        """Record a batch just appended (offsets assigned): keep its metadata, open a transaction."""
        if header.producer_id < 0:
            return
        self.map_end_offset = max(self.map_end_offset, header.last_offset + 1)
        self._apply_data_batch(header)

    def _apply_data_batch(self, header: BatchHeader) -> None:
        pid = header.producer_id
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid)
        last = header.last_offset
        entry.add_batch(header.producer_epoch, header.last_sequence, last, last - header.base_offset,
                        header.max_timestamp)
        if header.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = header.base_offset
            self._ongoing[header.base_offset] = pid

    # --- transaction markers ---------------------------------------------------------------

    def validate_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, *,
                        transaction_version: int = 0) -> None:
        """Check a WriteTxnMarkers entry before its marker is appended (Kafka's ProducerAppendInfo
        rules: TV0/1 accept marker epoch >= current, TV2 needs > current unless it retries a
        marker of an already-finished transaction; a smaller coordinator epoch is a zombie)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        current = entry.producer_epoch
        invalid = producer_epoch <= current if transaction_version >= 2 else producer_epoch < current
        if invalid and not (transaction_version >= 2 and producer_epoch == current
                            and entry.current_txn_first_offset is None):
            cmp = "<=" if transaction_version >= 2 else "<"
            raise InvalidProducerEpochError(
                f"Epoch of producer {producer_id} in {self._tp} is {producer_epoch}, which is {cmp} the last seen "
                f"epoch {current} (TV{transaction_version})")
        if entry.coordinator_epoch > coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"Invalid coordinator epoch for producerId {producer_id} in partition {self._tp}: "
                f"{coordinator_epoch} (zombie), {entry.coordinator_epoch} (current)")

    def complete_txn(self, producer_id: int, producer_epoch: int, is_commit: bool, coordinator_epoch: int,
                     marker_offset: int, *, timestamp_ms: int | None = None,
                     transaction_version: int = 0) -> CompletedTxn | None:
        """Apply a COMMIT/ABORT marker appended at ``marker_offset`` (validating it first).

        Returns the completed transaction, or None when the producer had no open transaction
        on this partition (an empty transaction: nothing for .txnindex, the LSO is unaffected).
        """
        self.validate_marker(producer_id, producer_epoch, coordinator_epoch, transaction_version=transaction_version)
        self.map_end_offset = max(self.map_end_offset, marker_offset + 1)
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
        ts = _now_ms() if timestamp_ms is None else timestamp_ms
        return self._end_txn(entry, producer_epoch, not is_commit, coordinator_epoch, marker_offset, ts)

    def _end_txn(self, entry: ProducerStateEntry, epoch: int, aborted: bool, coordinator_epoch: int,
                 marker_offset: int, timestamp: int) -> CompletedTxn | None:
        completed = None
        first = entry.current_txn_first_offset
        if first is not None:
            self._ongoing.pop(first, None)
            completed = CompletedTxn(entry.producer_id, first, marker_offset, aborted,
                                     self._next_unstable_after(marker_offset))
            self._unreplicated[first] = (entry.producer_id, marker_offset)
        entry.maybe_update_epoch(epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.current_txn_first_offset = None
        entry.last_timestamp = timestamp
        return completed

    def _next_unstable_after(self, marker_offset: int) -> int:
        # Kafka's lastStableOffset(completedTxn): the first other open transaction, else marker + 1.
        # Called after this producer's transaction left _ongoing, so the first key is "another".
        first = next(iter(self._ongoing), None)
        return marker_offset + 1 if first is None else first

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO Kafka records in .txnindex for ``completed`` (also in ``completed.last_stable_offset``)."""
        for first, pid in self._ongoing.items():
            if pid != completed.producer_id:
                return first
        return completed.last_offset + 1

    # --- queries ---------------------------------------------------------------------------

    def first_unstable_offset(self, high_watermark: int | None = None) -> int | None:
        """Smallest first offset of an undecided transaction (LSO = min(this, HW)).

        With ``high_watermark`` (replicated partitions) transactions whose marker is not yet
        below it still count as unstable, as in Kafka; without it markers count as replicated.
        """
        first = next(iter(self._ongoing), None)
        if high_watermark is None or not self._unreplicated:
            if high_watermark is None:
                self._unreplicated.clear()
            return first
        self.on_high_watermark_updated(high_watermark)
        unrep = min(self._unreplicated, default=None)
        if unrep is None:
            return first
        return unrep if first is None else min(first, unrep)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        for first in [f for f, (_, last) in self._unreplicated.items() if last < high_watermark]:
            del self._unreplicated[first]

    def ongoing_txns(self) -> dict[int, int]:
        """producer id -> first offset of its open transaction, in first-offset order."""
        return {pid: first for first, pid in self._ongoing.items()}

    def _is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return (entry.current_txn_first_offset is None
                and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms)

    def remove_expired(self, now_ms: int) -> None:
        """Forget producers idle for producer.id.expiration.ms that have no open transaction."""
        for pid in [p for p, e in self.producers.items() if self._is_expired(e, now_ms)]:
            del self.producers[pid]

    def active_producers(self) -> list[ProducerStateEntry]:
        return list(self.producers.values())

    def __len__(self) -> int:
        return len(self.producers)


def _read_marker(header: BatchHeader, batch: bytes | bytearray | memoryview) -> tuple[int, int | None]:
    """(control type, coordinator epoch) of a control batch's single record."""
    data = batch
    if len(batch) != header.size:
        data = memoryview(batch)[header.position : header.position + header.size]
    key, value = first_record_key_value(header, data)
    if key is None or len(key) < 4:
        raise ValueError("control batch without a control record")
    _, control_type = parse_control_key(key)
    coord_epoch = None
    if value is not None and len(value) >= 6:
        coord_epoch = struct.unpack_from(">i", value, 2)[0]
    return control_type, coord_epoch


__all__ = [
    "BatchMetadata",
    "CompletedTxn",
    "CorruptSnapshotError",
    "DuplicateSequenceError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTxnStateError",
    "OutOfOrderSequenceError",
    "ProducerStateEntry",
    "ProducerStateError",
    "ProducerStateManager",
    "TransactionCoordinatorFencedError",
    "UnknownProducerIdError",
    "VerificationState",
    "decode_snapshot",
    "encode_snapshot",
    "read_snapshot_file",
    "snapshot_path",
    "write_snapshot_file",
]
