"""One partition's log: an ordered list of segments plus offsets, leader epochs and recovery.

Owned by the broker's event loop: append/read/retention run on the loop (plain os.write /
os.pread, no fsync). Offsets are assigned by patching each batch's baseOffset in the caller's
buffer, which is then written with one os.write: no per-record work and no copy of the batch
bytes.

fsync is the one blocking step, and the only one allowed off the loop, so a flush is split in
three: `plan_flush` (loop) picks the dirty segments below the target offset and captures their
fds and index paths; `FlushPlan.sync` (an executor) only fsyncs those; `complete_flush` (loop)
advances the recovery point, never backwards. At most one flush per log is in flight. `append`
never fsyncs: it reports flush.messages being reached in `AppendResult.flush_due` and the caller
flushes (the broker before acknowledging). The synchronous `flush` runs all three steps in the
calling thread, for close, shutdown and tests.

Crash safety follows Kafka: segments below the recovery point were fsynced and are trusted;
after an unclean shutdown every segment from the recovery point on is re-validated (CRC,
structure) and truncated at the first torn/corrupt batch, and indexes are rebuilt. Deleted
segments are renamed ``*.deleted`` and removed after file.delete.delay.ms; compaction swaps
segments in through ``*.cleaned`` -> ``*.swap`` -> final names, completed on the next open.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import uuid
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from storage import batch as rb
from storage import dir_failure
from storage.batch import BatchHeader
from storage.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    CheckpointError,
    LeaderEpochCheckpointFile,
    fsync_dir,
    fsync_file,
)
from storage.log_config import LogConfig
from storage.offset_index import IndexCorruptError
from storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    Segment,
    SegmentSync,
    now_ms,
)
from storage.txn_index import AbortedTxn

__all__ = [
    "AbortedTxn",
    "AppendResult",
    "FileSlice",
    "FlushPlan",
    "Log",
    "OffsetOutOfRangeError",
    "ProducerStateHook",
    "ReadResult",
    "SliceGoneError",
    "parse_topic_partition",
]

log = logging.getLogger("storage.log")

_BASE_OFFSET = struct.Struct(">q")
_INT32 = struct.Struct(">i")

DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETE_DIR_SUFFIX = "-delete"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class OffsetOutOfRangeError(Exception):
    """Requested offset below the log start offset or above the log end offset."""


@dataclass(slots=True)
class AppendResult:
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1 unless message.timestamp.type=LogAppendTime
    # flush.messages reached: the caller should flush (and, to acknowledge, wait for it)
    flush_due: bool = False


@dataclass(slots=True)
class ReadResult:
    chunks: list[bytes | memoryview]  # whole batches, back to back
    size: int
    first_offset: int | None  # base offset of the first batch returned


_EMPTY_READ = ReadResult([], 0, None)

# Reads of at least this many bytes are returned as a FileSlice (sent with os.sendfile); smaller ones
# are copied: for them one pread is cheaper than a header scan plus separate sendfile calls.
ZERO_COPY_MIN_BYTES = 64 * 1024


class SliceGoneError(OSError):
    """A FileSlice's bytes are no longer in the file: its segment was closed or the log truncated."""


class FileSlice:
    """Whole batches in a segment's .log file, by position: what a zero-copy read returns in place
    of their bytes. ``len()`` is the byte count, so it counts and encodes like the bytes it stands for.
    The server sends it with os.sendfile from ``fd()``, or copies it with ``read()`` (TLS, or when
    the socket already has data queued). Both check first that the bytes are still there: the slice
    is sent after the handler returns, and meanwhile its segment may be deleted (closed) or the log
    truncated (the same positions may then hold other batches)."""

    __slots__ = ("log", "segment", "position", "size", "generation")

    def __init__(self, log: Log, segment: Segment, position: int, size: int) -> None:
        self.log, self.segment, self.position, self.size = log, segment, position, size
        self.generation = log._generation

    def __len__(self) -> int:
        return self.size

    def fd(self) -> int:
        """The segment's file descriptor, valid until control returns to the event loop."""
        if self.segment.closed or self.log._generation != self.generation:
            raise SliceGoneError(f"{self.segment.log_path}: closed or truncated since it was read")
        return self.segment.fd

    def read(self) -> bytes:
        data = os.pread(self.fd(), self.size, self.position)
        if len(data) != self.size:
            raise SliceGoneError(f"{self.segment.log_path}: {len(data)} of {self.size} bytes at {self.position}")
        return data

    def __repr__(self) -> str:
        return f"FileSlice({self.segment.log_path.name}, position={self.position}, size={self.size})"


@dataclass(slots=True)
class FlushPlan:
    """A flush planned on the loop by `Log.plan_flush`: all that its blocking part needs."""

    log: Log
    end_offset: int  # the recovery point once this flush completes
    planned_ms: int
    generation: int  # Log._generation when planned; a truncation since voids the recovery point
    segments: list[SegmentSync]
    dir: Path | None  # the partition dir, when segment files were created since the last flush
    files: list[tuple[int, Path]]  # written unsynced (Log._unsynced_files) and due with this flush

    def sync(self) -> None:
        """The blocking part: fsync the captured files (and the dir). Touches no Log state, so it
        may run in an executor while the loop appends, rolls, truncates or retires segments."""
        try:
            for seg in self.segments:
                seg.sync()
            for _, path in self.files:
                fsync_file(path)  # a file deleted meanwhile is simply gone
            if self.dir is not None:
                fsync_dir(self.dir)
        except OSError as e:
            dir_failure.failed(self.log.dir.parent, e)
            raise


class ProducerStateHook(Protocol):
    """Implemented by storage/producer_state.py; the log drives its reload and snapshots."""

    map_end_offset: int
    last_snapshot_offset: int  # of the newest snapshot written or loaded (-1: none)

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None: ...

    def update_from_log(self, header: BatchHeader, batch: bytes | None = None) -> object: ...

    def take_snapshot(self, offset: int, *, sync: bool = True) -> Path: ...

    def delete_snapshots_below(self, offset: int) -> None: ...


def parse_topic_partition(name: str) -> tuple[str, int]:
    """``<topic>-<partition>``; the partition number follows the LAST '-'."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        raise ValueError(f"not a partition directory name: {name!r}")
    return topic, int(part)


def _base_of(filename: str) -> int | None:
    prefix = filename.split(".", 1)[0]
    if len(prefix) == 20 and prefix.isdigit():
        return int(prefix)
    return None


class Log:
    """A partition's segments, offsets and leader epoch cache."""

    def __init__(self, dir: Path, config: LogConfig, producer_state: ProducerStateHook | None) -> None:
        self.dir = dir
        self.topic, self.partition = parse_topic_partition(dir.name)
        self.config = config
        self.producer_state = producer_state
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.recovery_point = 0
        self.leader_epoch_entries: list[tuple[int, int]] = []
        self._epoch_file = LeaderEpochCheckpointFile(dir / LEADER_EPOCH_CHECKPOINT)
        # What the leader-epoch-checkpoint holds (None: unknown), and whether the entries changed
        # while open() deferred writing them: load truncates epochs beyond the log end, and the
        # broker often assigns the same epoch right after, so writing at load rewrote the file of
        # every partition of a restarting broker for nothing.
        self._epochs_on_disk: list[tuple[int, int]] | None = None
        self._defer_epoch_writes = False
        self._epochs_unwritten = False
        self._pending_deletes: list[tuple[int, Segment]] = []
        self._last_flush_ms = now_ms()
        self._roll_flush_offset = 0  # rolled segments below this wait for a flush
        self._dir_dirty = False
        # Files written without fsync, for the first flush reaching their offset to fsync:
        # (offset, path) of the producer snapshot of a roll; (-1, path) of leader-epoch-checkpoint.
        self._unsynced_files: list[tuple[int, Path]] = []
        self._flushing: FlushPlan | None = None  # planned, not yet completed or failed
        self._generation = 0  # bumped by every truncation (see FlushPlan.generation)
        self._log_append_time = config.log_append_time
        self.closed = False
        # What the last open recovered, for the log manager's one summary line per log dir (the
        # per-partition lines are DEBUG: an unclean shutdown of a broker with hundreds of partitions
        # would otherwise log hundreds of INFO lines, where Kafka's LogManager logs a summary).
        self.recovered_segments = 0
        self.replayed_batches = 0

    # ------------------------------------------------------------------------------------------
    # opening and recovery
    # ------------------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        dir: Path,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        producer_state: ProducerStateHook | None = None,
        now_ms: int | None = None,
    ) -> Log:
        dir = Path(dir)
        dir.mkdir(parents=True, exist_ok=True)
        self = cls(dir, config, producer_state)
        now = _now(now_ms)
        self._remove_temp_files_and_complete_swaps()
        needs_rebuild = self._load_segments()
        if not self.segments:
            self._add_segment(self._new_segment(log_start_offset, now))
        self._read_leader_epochs()
        self._defer_epoch_writes = True
        self._recover(needs_rebuild, recovery_point, clean_shutdown)
        last = self.segments[-1]
        self.log_end_offset = last.read_next_offset()
        self.log_start_offset = max(log_start_offset, self.segments[0].base_offset)
        if self.log_start_offset > self.log_end_offset:
            log.warning(
                "%s: log start offset %d is beyond the log end offset %d; truncating fully",
                self.dir, self.log_start_offset, self.log_end_offset,
            )
            self._truncate_fully_and_start_at(self.log_start_offset, now)
        if clean_shutdown:
            self.recovery_point = self.log_end_offset
        else:
            self.recovery_point = min(recovery_point, self.log_end_offset)
        self._roll_flush_offset = self.recovery_point
        self._truncate_epochs_from_end(self.log_end_offset)
        self._truncate_epochs_from_start(self.log_start_offset)
        self._defer_epoch_writes = False
        self._rebuild_producer_state(now)
        return self

    def _remove_temp_files_and_complete_swaps(self) -> None:
        swaps: set[int] = set()
        for entry in os.scandir(self.dir):
            name = entry.name
            if name.endswith(DELETED_SUFFIX) or name.endswith(CLEANED_SUFFIX) or name.endswith(".tmp"):
                os.unlink(entry.path)
            elif name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                base = _base_of(name)
                if base is not None:
                    swaps.add(base)
        for entry in os.scandir(self.dir):  # index swaps without their log are leftovers
            if entry.name.endswith(SWAP_SUFFIX) and _base_of(entry.name) not in swaps:
                os.unlink(entry.path)
        for base in sorted(swaps):
            seg = Segment(self.dir, base, index_interval_bytes=self.config.index_interval_bytes,
                          max_index_bytes=self.config.segment_index_bytes, suffix=SWAP_SUFFIX, new=False)
            seg.recover()
            end = seg.read_next_offset()
            for entry in list(os.scandir(self.dir)):
                b = _base_of(entry.name)
                if b is not None and base <= b < end and not entry.name.endswith(SWAP_SUFFIX) and (
                    entry.name.endswith((LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX))
                ):
                    os.unlink(entry.path)
            seg.change_suffix("")
            seg.close()
            log.warning("%s: completed interrupted segment swap for offsets %d..%d", self.dir, base, end)
        if swaps:
            fsync_dir(self.dir)

    def _load_segments(self) -> dict[int, str]:
        """Open every segment; returns base offset -> reason for those whose indexes need a rebuild."""
        bases = []
        index_files: list[tuple[int, str]] = []
        for entry in os.scandir(self.dir):
            base = _base_of(entry.name)
            if base is None:
                continue
            if entry.name.endswith(LOG_SUFFIX):
                bases.append(base)
            elif entry.name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)):
                index_files.append((base, entry.path))
        known = set(bases)
        for base, path in index_files:
            if base not in known:  # orphaned index (Kafka deletes these too)
                log.warning("%s: deleting orphaned index file %s", self.dir, path)
                os.unlink(path)
        needs: dict[int, str] = {}
        for base in sorted(bases):
            seg = Segment.load(self.dir, base, index_interval_bytes=self.config.index_interval_bytes,
                               max_index_bytes=self.config.segment_index_bytes)
            try:
                seg.check_indexes()
            except IndexCorruptError as e:
                needs[base] = str(e)
            self._add_segment(seg)
        return needs

    def _recover(self, needs_rebuild: dict[int, str], recovery_point: int, clean_shutdown: bool) -> None:
        start = len(self.segments)
        if not clean_shutdown:
            start = max(0, bisect_right(self._bases, recovery_point) - 1)
        i = 0
        while i < len(self.segments):
            seg = self.segments[i]
            reason = needs_rebuild.get(seg.base_offset)
            if i >= start or reason:
                if reason:
                    log.warning("%s: rebuilding indexes of %s: %s", self.dir, seg.log_path.name, reason)
                else:
                    log.debug("%s: recovering segment %s (unclean shutdown)", self.dir, seg.log_path.name)
                self.recovered_segments += 1
                truncated = seg.recover(on_batch=self._epoch_from_batch)
                if truncated:
                    self._drop_segments_after(i, "it follows a truncated segment")
                    break
            i += 1
        last = self.segments[-1]
        if last.next_offset is None:
            try:
                last.load_tail()
            except IndexCorruptError as e:
                log.warning("%s: rebuilding indexes of %s: %s", self.dir, last.log_path.name, e)
                last.recover()

    def _drop_segments_after(self, i: int, why: str) -> None:
        for seg in self.segments[i + 1 :]:
            log.warning("%s: deleting segment %s because %s", self.dir, seg.log_path.name, why)
            seg.delete_files()
        del self.segments[i + 1 :]
        del self._bases[i + 1 :]

    def _read_leader_epochs(self) -> None:
        try:
            self.leader_epoch_entries = self._epoch_file.read()
            self._epochs_on_disk = list(self.leader_epoch_entries)
        except CheckpointError as e:
            log.warning("%s: ignoring malformed leader epoch checkpoint: %s", self.dir, e)
            self.leader_epoch_entries = []

    def _epoch_from_batch(self, header: BatchHeader) -> None:
        """During recovery, like Kafka: a batch with a newer leader epoch starts that epoch."""
        epoch = header.partition_leader_epoch
        if epoch >= 0 and epoch > self.latest_epoch:
            self.assign_leader_epoch(epoch, header.base_offset)

    def _rebuild_producer_state(self, now: int) -> None:
        ps = self.producer_state
        if ps is None:
            return
        ps.truncate_and_reload(self.log_start_offset, self.log_end_offset, now)
        start = max(ps.map_end_offset, self.log_start_offset)
        if start >= self.log_end_offset:
            return
        replayed = 0
        for header, data in self._iter_segment_batches(start, self.log_end_offset):
            if header.is_control:
                # The marker type (COMMIT/ABORT) and coordinator epoch live in the record itself.
                header.position = 0
                ps.update_from_log(header, bytes(data))
            else:
                ps.update_from_log(header)
            replayed += 1
        self.replayed_batches += replayed
        if replayed:
            log.debug("%s: replayed %d batches from offset %d into producer state", self.dir, replayed, start)
            ps.take_snapshot(self.log_end_offset)

    # ------------------------------------------------------------------------------------------
    # segments list
    # ------------------------------------------------------------------------------------------

    def _new_segment(self, base: int, now: int | None = None, suffix: str = "") -> Segment:
        self._dir_dirty = True
        return Segment.create(self.dir, base, index_interval_bytes=self.config.index_interval_bytes,
                              max_index_bytes=self.config.segment_index_bytes, suffix=suffix, created_ms=now)

    def _add_segment(self, seg: Segment) -> None:
        i = bisect_right(self._bases, seg.base_offset)
        self.segments.insert(i, seg)
        self._bases.insert(i, seg.base_offset)

    def _remove_segment(self, seg: Segment) -> None:
        i = self.segments.index(seg)
        del self.segments[i]
        del self._bases[i]

    def _retire(self, seg: Segment, now: int) -> None:
        """Take a segment out of the log: rename to .deleted now, delete after the delay."""
        self._remove_segment(seg)
        try:
            seg.change_suffix(DELETED_SUFFIX)
        except FileNotFoundError:
            pass
        if self.config.file_delete_delay_ms <= 0:
            seg.delete_files()
        else:
            # The fd stays open meanwhile: a read running in an executor may still use it.
            self._pending_deletes.append((now + self.config.file_delete_delay_ms, seg))

    def delete_expired_files(self, now_ms: int | None = None) -> int:
        """Remove ``.deleted`` segments whose delay has passed; returns how many."""
        now = _now(now_ms)
        keep, done = [], 0
        for deadline, seg in self._pending_deletes:
            if deadline <= now:
                # Off the loop: freeing a GiB segment's blocks (and, with the discard mount
                # option, waiting for the discards) blocked the event loop up to 0.7 s.
                seg.delete_files(background=True)
                done += 1
            else:
                keep.append((deadline, seg))
        self._pending_deletes = keep
        return done

    @property
    def active_segment(self) -> Segment:
        return self.segments[-1]

    def segment_for(self, offset: int) -> Segment | None:
        i = bisect_right(self._bases, offset) - 1
        return self.segments[i] if i >= 0 else None

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # ------------------------------------------------------------------------------------------
    # append
    # ------------------------------------------------------------------------------------------

    def append(self, buf: bytearray, headers: list[BatchHeader], *, leader_epoch: int, now_ms: int) -> AppendResult:
        if not headers:
            raise ValueError("append of no batches")
        first = offset = self.log_end_offset
        log_append_time = self._log_append_time
        max_ts = -1
        size = 0
        # storage.batch.set_base_offset / set_partition_leader_epoch, inlined (hot path)
        pack_base = _BASE_OFFSET.pack_into
        pack_epoch = _INT32.pack_into
        for h in headers:
            pos = h.position
            pack_base(buf, pos, offset)
            h.base_offset = offset
            pack_epoch(buf, pos + rb.PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
            h.partition_leader_epoch = leader_epoch
            if log_append_time:
                rb.set_max_timestamp_log_append_time(buf, h, now_ms)
            if h.max_timestamp > max_ts:
                max_ts = h.max_timestamp
            offset += h.last_offset_delta + 1
            size += h.batch_length + rb.LOG_OVERHEAD
        self._write_batches(buf, headers, size, max_ts, offset - 1, now_ms)
        self.log_end_offset = offset
        if leader_epoch >= 0:
            entries = self.leader_epoch_entries
            if not entries or leader_epoch > entries[-1][0]:
                self.assign_leader_epoch(leader_epoch, first)
        # No fsync here (it would block the loop): the caller schedules a flush.
        return AppendResult(first, offset - 1, max_ts, now_ms if log_append_time else -1,
                            self.flush_messages_due())

    def _write_batches(self, buf: bytearray | memoryview, headers: list[BatchHeader], size: int, max_ts: int,
                       last_offset: int, now_ms: int) -> None:
        """Write ``headers``' batches (``size`` bytes in all) to the active segment, rolling first when due."""
        seg = self.segments[-1]
        cfg = self.config
        if seg.should_roll(size, max_ts, last_offset, now_ms, cfg.segment_bytes, cfg.segment_ms):
            self.roll(now_ms)
            seg = self.segments[-1]
        start = headers[0].position
        end = headers[-1].position + headers[-1].batch_length + rb.LOG_OVERHEAD
        try:
            if end - start == size:
                seg.append(buf, start, end, headers)
            else:  # batches not back to back in buf: write each one
                for h in headers:
                    seg.append(buf, h.position, h.position + h.size, [h])
        except OSError as e:
            dir_failure.failed(self.dir.parent, e)  # the broker halts here (storage/dir_failure.py)
            raise

    def append_as_follower(self, buf: bytearray | memoryview, headers: list[BatchHeader], *, now_ms: int) -> AppendResult:
        """Replication: append batches exactly as the leader wrote them (offsets, leader epochs and
        timestamps kept, so replicas are byte-identical). They must continue the log: the first
        base offset is the log end offset and the batches are contiguous. A batch with a newer
        partition leader epoch starts that epoch in the cache, as Kafka's follower append does."""
        if not headers:
            raise ValueError("append of no batches")
        first = expected = self.log_end_offset
        max_ts = -1
        size = 0
        for h in headers:
            if h.base_offset != expected:
                raise ValueError(f"{self.dir.name}: replicated batch at offset {h.base_offset}, expected {expected}")
            expected = h.base_offset + h.last_offset_delta + 1
            if h.max_timestamp > max_ts:
                max_ts = h.max_timestamp
            size += h.batch_length + rb.LOG_OVERHEAD
        self._write_batches(buf, headers, size, max_ts, expected - 1, now_ms)
        self.log_end_offset = expected
        for h in headers:
            epoch = h.partition_leader_epoch
            if epoch >= 0 and epoch > self.latest_epoch:
                self.assign_leader_epoch(epoch, h.base_offset)
        return AppendResult(first, expected - 1, max_ts, -1, self.flush_messages_due())

    @dir_failure.reports_failure
    def roll(self, now_ms: int | None = None) -> None:
        """Start a new active segment at the log end offset (no-op if the active one is empty there)."""
        now = _now(now_ms)
        active = self.segments[-1]
        new_base = self.log_end_offset
        if active.size == 0:
            if active.base_offset == new_base:
                return
            self._retire(active, now)  # an empty segment at a stale base: replace it
        else:
            active.on_become_inactive()
            self._roll_flush_offset = new_base
        new = self._new_segment(new_base, now)
        if active.size:
            # Write-behind: the old segment's tail leaves the page cache once the new one is
            # CACHE_WINDOW long, as it would have had the segment gone on (storage/write_behind.py).
            new.predecessor_tail = active.undropped_tail()
        self._add_segment(new)
        if self.producer_state is not None:
            # Unsynced, as Kafka does at a roll: the flush that covers new_base fsyncs it (and
            # the dir, dirty from the new segment) off the loop.
            self._unsynced_files.append((new_base, self.producer_state.take_snapshot(new_base, sync=False)))

    # ------------------------------------------------------------------------------------------
    # reads
    # ------------------------------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True, zero_copy: bool = False) -> ReadResult:
        """Whole batches from the one containing ``start_offset``, within one segment. With
        ``zero_copy`` a range of at least ZERO_COPY_MIN_BYTES comes back as one FileSlice
        (same batches, not read into memory)."""
        leo = self.log_end_offset
        if start_offset == leo and start_offset >= self.log_start_offset:
            return ReadResult([], 0, None)
        if start_offset < self.log_start_offset or start_offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is out of range [{self.log_start_offset}, {leo}] for {self.dir.name}"
            )
        if max_offset is not None and max_offset <= start_offset:
            return ReadResult([], 0, None)
        segments = self.segments
        i = max(0, bisect_right(self._bases, start_offset) - 1)
        while i < len(segments):
            seg = segments[i]
            if max_offset is not None and seg.base_offset >= max_offset:
                break
            # The bytes from where a read starts (an append hint, or the index entry below) to the
            # segment end bound the read:
            # a consumer at the tail of the log is copied without a header scan first.
            if zero_copy and min(seg.size - seg.start_position(start_offset),
                                 max_bytes) >= ZERO_COPY_MIN_BYTES:
                rng = seg.read_range(start_offset, max_bytes, max_offset, min_one_batch)
                if rng is not None:
                    pos, size, first = rng
                    if not size:
                        return ReadResult([], 0, None)
                    if size >= ZERO_COPY_MIN_BYTES:
                        return ReadResult([FileSlice(self, seg, pos, size)], size, first)
                    return ReadResult([os.pread(seg.fd, size, pos)], size, first)
                i += 1
                continue
            found = seg.read(start_offset, max_bytes, max_offset, min_one_batch)
            if found is not None:
                data, first = found
                if not data:
                    return ReadResult([], 0, None)
                return ReadResult([data], len(data), first)
            i += 1
        return ReadResult([], 0, None)

    def _iter_segment_batches(self, start_offset: int, end_offset: int | None) -> Iterator[tuple[BatchHeader, memoryview]]:
        i = max(0, bisect_right(self._bases, start_offset) - 1)
        for seg in list(self.segments[i:]):
            if end_offset is not None and seg.base_offset >= end_offset:
                return
            yield from seg.iter_from(start_offset, end_offset)

    def _iter_headers(self, start_offset: int, end_offset: int | None = None) -> Iterator[BatchHeader]:
        for h, _ in self._iter_segment_batches(start_offset, end_offset):
            yield h

    def iter_batches(self, start_offset: int, end_offset: int | None = None) -> Iterator[tuple[BatchHeader, bytes]]:
        """Batches with last offset >= start_offset and base offset < end_offset, as (header, bytes);
        the header's ``position`` is 0 so it matches the bytes it comes with."""
        for h, data in self._iter_segment_batches(max(start_offset, self.log_start_offset), end_offset):
            h.position = 0
            yield h, bytes(data)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record (offset >= log start) with ts >= timestamp."""
        for seg in list(self.segments):
            if seg.max_timestamp >= timestamp:
                found = seg.find_offset_by_timestamp(timestamp, self.log_start_offset)
                if found is not None:
                    return found
        return None

    def latest_timestamp(self) -> tuple[int, int] | None:
        """(max timestamp, offset of the first record carrying it), for ListOffsets MAX_TIMESTAMP."""
        best: Segment | None = None
        for seg in self.segments:
            if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return None
        return best.max_timestamp_record()

    # ------------------------------------------------------------------------------------------
    # durability
    # ------------------------------------------------------------------------------------------

    def plan_flush(self, up_to: int | None = None, now_ms: int | None = None) -> FlushPlan | None:
        """Loop side, first step of a flush of the offsets below ``up_to`` (default: the log end
        offset): pick the dirty segments holding them and capture their files (see
        Segment.prepare_flush), and the partition dir if segments were created since the last
        flush. None when there is nothing to do. Run ``sync`` of the plan (blocking), then
        `complete_flush` or, if it raised, `flush_failed`. One flush at a time: a second one
        planned meanwhile would skip the segments the first marked clean, and could move the
        recovery point past data still being fsynced."""
        if self._flushing is not None:
            raise RuntimeError(f"{self.dir.name}: a flush is already in flight")
        if self.closed:
            return None
        end = self.log_end_offset if up_to is None else min(up_to, self.log_end_offset)
        if end <= self.recovery_point and not self._dir_dirty:
            return None
        syncs: list[SegmentSync] = []
        first = self.segments[0]
        for seg in self.segments:
            if seg.base_offset >= end and seg is not first:
                break
            if seg.dirty:
                sync = seg.prepare_flush()
                if sync is not None:
                    syncs.append(sync)
        dir = None
        if self._dir_dirty:
            self._dir_dirty = False
            dir = self.dir
        files = [(off, path) for off, path in self._unsynced_files if off <= end]
        if files:
            self._unsynced_files = [(off, path) for off, path in self._unsynced_files if off > end]
            dir = self.dir  # their renames
        plan = FlushPlan(self, end, _now(now_ms), self._generation, syncs, dir, files)
        self._flushing = plan
        return plan

    def complete_flush(self, plan: FlushPlan) -> None:
        """Loop side, last step: the plan's files are durable, advance the recovery point to its
        end offset (never backwards) unless the log was truncated since it was planned."""
        if plan is not self._flushing:
            raise RuntimeError(f"{self.dir.name}: completing a flush that is not in flight")
        self._flushing = None
        if plan.generation != self._generation:
            return  # offsets below plan.end_offset may have been rewritten after the plan
        end = min(plan.end_offset, self.log_end_offset)
        if end > self.recovery_point:
            self.recovery_point = end
        if plan.planned_ms > self._last_flush_ms:
            # The plan time, not now: data appended during the fsync is not covered by it.
            self._last_flush_ms = plan.planned_ms

    def flush_failed(self, plan: FlushPlan) -> None:
        """Loop side, instead of `complete_flush` when ``sync`` raised (or was abandoned): mark
        what the plan marked clean dirty again, so the next flush retries it."""
        if plan is self._flushing:
            self._flushing = None
        for sync in plan.segments:
            if not sync.segment.closed:
                sync.segment.dirty = True
        if plan.dir is not None:
            self._dir_dirty = True
        if plan.files:
            self._unsynced_files = plan.files + self._unsynced_files

    @property
    def flush_in_flight(self) -> bool:
        return self._flushing is not None

    @dir_failure.reports_failure
    def flush(self, up_to: int | None = None, *, sync: bool = True) -> None:
        """fsync segments holding offsets below ``up_to`` (default: all) and advance the recovery
        point: plan, sync and complete in the calling thread. Blocking; for close, shutdown and
        tests, where no event loop is using the log (the broker flushes through its executor).
        ``sync=False``: the caller makes the whole filesystem durable afterwards (one syncfs at
        shutdown) and writes nothing that trusts the new recovery point before it has."""
        plan = self.plan_flush(up_to)
        if plan is None:
            return
        try:
            if sync:
                plan.sync()
        except BaseException:
            self.flush_failed(plan)
            raise
        self.complete_flush(plan)

    def flush_messages_due(self) -> bool:
        """flush.messages policy: that many messages (or more) above the recovery point."""
        return self.log_end_offset - self.recovery_point >= self.config.flush_messages

    def flush_target(self, now_ms: int) -> int | None:
        """The offset the flush scheduler should flush below, or None: the log end offset when
        flush.ms has passed since the last flush, else the end of the segments rolled since
        then (Kafka fsyncs a segment right after rolling it, which is what advances the
        recovery point, and bounds recovery after a crash, with the default flush settings).
        With neither, the recovery point itself when files written unsynced are waiting (a
        leader-epoch-checkpoint after the log start moved): the flush then fsyncs just those."""
        if self.log_end_offset > self.recovery_point:
            if now_ms - self._last_flush_ms >= self.config.flush_ms:
                return self.log_end_offset
            if self._roll_flush_offset > self.recovery_point:
                return self._roll_flush_offset
        # An empty log's unsynced files (the leader-epoch-checkpoint of a partition just created)
        # describe nothing yet: the flush that first covers data fsyncs them with it. Flushing
        # them now cost every new partition its own fsyncs of the file, segment and dir.
        if self.log_end_offset > self.log_start_offset and any(
                off <= self.recovery_point for off, _ in self._unsynced_files):
            return self.recovery_point
        return None

    def needs_flush(self, now_ms: int) -> bool:
        """flush.ms policy, or a segment rolled since the last flush (see flush_target)."""
        return self.flush_target(now_ms) is not None

    def flush_rolled(self) -> None:
        """Flush segments rolled since the last flush (Kafka flushes them right after a roll)."""
        if self._roll_flush_offset > self.recovery_point:
            self.flush(self._roll_flush_offset)

    # ------------------------------------------------------------------------------------------
    # retention, truncation
    # ------------------------------------------------------------------------------------------

    @dir_failure.reports_failure
    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: raise the log start offset to ``offset`` and drop whole segments below it."""
        if offset > self.log_end_offset:
            raise OffsetOutOfRangeError(f"offset {offset} is beyond the log end offset {self.log_end_offset}")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._truncate_epochs_from_start(offset)
            self._delete_log_start_breached(now_ms())
        return self.log_start_offset

    @dir_failure.reports_failure
    def apply_retention(self, now_ms: int) -> int:
        """retention.ms / retention.bytes over whole non-active segments (cleanup.policy with
        delete), plus segments below the log start offset; returns how many were deleted."""
        deleted = 0
        cfg = self.config
        if cfg.delete_enabled:
            if cfg.retention_ms >= 0:
                deleted += self._delete_oldest(lambda s: now_ms - s.largest_timestamp() > cfg.retention_ms, now_ms,
                                               "retention.ms")
            if cfg.retention_bytes >= 0:
                diff = self.size_in_bytes() - cfg.retention_bytes

                def over_size(s: Segment) -> bool:
                    nonlocal diff
                    if diff - s.size >= 0:
                        diff -= s.size
                        return True
                    return False

                deleted += self._delete_oldest(over_size, now_ms, "retention.bytes")
        deleted += self._delete_log_start_breached(now_ms)
        self.delete_expired_files(now_ms)
        return deleted

    def _delete_log_start_breached(self, now: int) -> int:
        lso = self.log_start_offset
        next_base = dict(zip(self._bases, self._bases[1:], strict=False))
        return self._delete_oldest(lambda s: next_base.get(s.base_offset, lso + 1) <= lso, now, "log start offset")

    def _delete_oldest(self, predicate: Callable[[Segment], bool], now: int, why: str) -> int:
        doomed = []
        for seg in self.segments[:-1]:  # never the active segment
            if not predicate(seg):
                break
            doomed.append(seg)
        for seg in doomed:
            log.info("%s: deleting segment %s (%s)", self.dir, seg.log_path.name, why)
            self._retire(seg, now)
        if doomed:
            new_start = self.segments[0].base_offset
            if new_start > self.log_start_offset:
                self.log_start_offset = new_start
                self._truncate_epochs_from_start(new_start)
            if self.producer_state is not None:
                self.producer_state.delete_snapshots_below(self.segments[0].base_offset)
        return len(doomed)

    @dir_failure.reports_failure
    def truncate_to(self, offset: int) -> None:
        """Drop everything at offsets >= offset (follower truncation)."""
        if offset >= self.log_end_offset:
            # Nothing to cut, but as Kafka's UnifiedLog.truncateTo: an epoch that starts at the
            # log end holds no batch (this replica led it briefly and appended nothing) and would
            # make the leader answer diverging_epoch forever; drop it.
            self._truncate_epochs_from_end(self.log_end_offset)
            return
        now = now_ms()
        self._generation += 1
        if offset < self.log_start_offset or offset <= self.segments[0].base_offset:
            self._truncate_fully_and_start_at(offset, now)
        else:
            for seg in list(self.segments):
                if seg.base_offset >= offset:
                    self._retire(seg, now)
            seg = self.segments[-1]
            seg.truncate_to(offset)
            self.log_end_offset = seg.read_next_offset()
        log.info("%s: truncated to offset %d (log end offset now %d)", self.dir, offset, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self._truncate_epochs_from_end(self.log_end_offset)
        self._rebuild_producer_state(now)

    @dir_failure.reports_failure
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Replication: drop the whole log and continue at ``offset`` (a follower that fell below
        the leader's log start offset)."""
        now = now_ms()
        self._truncate_fully_and_start_at(offset, now)
        log.info("%s: truncated fully, log now starts at offset %d", self.dir, offset)
        self._rebuild_producer_state(now)

    def _truncate_fully_and_start_at(self, offset: int, now: int) -> None:
        self._generation += 1
        for seg in list(self.segments):
            self._retire(seg, now)
        self._add_segment(self._new_segment(offset, now))
        self.log_start_offset = self.log_end_offset = self.recovery_point = offset
        self.leader_epoch_entries = []
        self._write_epochs()

    # ------------------------------------------------------------------------------------------
    # transactions
    # ------------------------------------------------------------------------------------------

    @dir_failure.reports_failure
    def add_aborted_txn(self, txn: AbortedTxn) -> None:
        seg = self.segment_for(txn.last_offset) or self.segments[0]
        seg.add_aborted_txn(txn)

    def collect_aborted_txns(self, start_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start_offset, upper_offset), as Kafka collects them."""
        out: list[AbortedTxn] = []
        i = max(0, bisect_right(self._bases, start_offset) - 1)
        for seg in self.segments[i:]:
            found, complete = seg.txn_index.collect(start_offset, upper_offset)
            out.extend(found)
            if complete:
                break
        return out

    # ------------------------------------------------------------------------------------------
    # leader epochs
    # ------------------------------------------------------------------------------------------

    @dir_failure.reports_failure
    def assign_leader_epoch(self, epoch: int, start_offset: int) -> None:
        if epoch < 0:
            return
        entries = self.leader_epoch_entries
        if entries and entries[-1][0] == epoch and start_offset >= entries[-1][1]:
            return
        kept = [(e, o) for e, o in entries if e < epoch and o < start_offset]
        kept.append((epoch, start_offset))
        self.leader_epoch_entries = kept
        # An empty log (a partition just created) holds nothing the entry describes yet, and a
        # batch written under it passes the recovery point only through a flush, which fsyncs
        # the file first. So it is written unsynced: creating a topic of many partitions no
        # longer costs two fsyncs per partition on the event loop.
        self._write_epochs(sync=self.log_end_offset > self.log_start_offset)

    @property
    def latest_epoch(self) -> int:
        return self.leader_epoch_entries[-1][0] if self.leader_epoch_entries else UNDEFINED_EPOCH

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (largest epoch <= requested, the start offset of the next epoch
        or the log end offset for the latest), as Kafka's LeaderEpochFileCache.endOffsetFor: an
        epoch below the first entry answers (requested epoch, first entry's start offset); one
        above the latest, or none, answers (UNDEFINED_EPOCH, UNDEFINED_OFFSET)."""
        entries = self.leader_epoch_entries
        if epoch < 0 or not entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch == entries[-1][0]:
            return epoch, self.log_end_offset
        for i, (e, start) in enumerate(entries):
            if e > epoch:
                return (epoch, start) if i == 0 else (entries[i - 1][0], start)
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET

    def _truncate_epochs_from_end(self, end_offset: int) -> None:
        kept = [(e, o) for e, o in self.leader_epoch_entries if o < end_offset]
        if kept != self.leader_epoch_entries:
            self.leader_epoch_entries = kept
            self._write_epochs(sync=False)  # as for the start (below); load truncates again

    def _truncate_epochs_from_start(self, start_offset: int) -> None:
        entries = self.leader_epoch_entries
        below = [i for i, (_, o) in enumerate(entries) if o <= start_offset]
        if not below:
            return
        last = below[-1]
        kept = [(entries[last][0], start_offset)] + entries[last + 1 :]
        if kept != entries:
            self.leader_epoch_entries = kept
            self._write_epochs(sync=False)

    def _write_epochs(self, *, sync: bool = True) -> None:
        """A new epoch (assign_leader_epoch) on a log holding data is written synced, so the
        file never misses an entry. Truncations from either end are written unsynced, as Kafka does since
        KAFKA-15046 (retention and DeleteRecords run on the loop), and the log-flusher fsyncs
        them within a second: a power loss before that leaves the old file, whose extra entries
        load truncates away again, or a torn one, which load ignores with a warning, re-adding
        the epochs of the batches it recovers."""
        if self._defer_epoch_writes:
            self._epochs_unwritten = True
            return
        self._epochs_unwritten = False
        if self.leader_epoch_entries == self._epochs_on_disk:
            return
        self._epoch_file.write(self.leader_epoch_entries, sync=sync)
        self._epochs_on_disk = list(self.leader_epoch_entries)
        if not sync:
            self._dir_dirty = True  # the rename
            if (-1, self._epoch_file.path) not in self._unsynced_files:
                self._unsynced_files.append((-1, self._epoch_file.path))

    # ------------------------------------------------------------------------------------------
    # compaction support
    # ------------------------------------------------------------------------------------------

    def new_cleaned_segment(self, base_offset: int) -> Segment:
        """An empty ``*.cleaned`` segment for the cleaner to fill via Segment.append."""
        return self._new_segment(base_offset, suffix=CLEANED_SUFFIX)

    @dir_failure.reports_failure
    def replace_segments(self, old: list[Segment], new: list[Segment]) -> None:
        """Swap cleaned segments in for ``old`` (none of them the active segment), crash-safely:
        new files fsynced -> renamed ``.swap`` -> old renamed ``.deleted`` -> ``.swap`` renamed to
        final names. A crash anywhere is completed or rolled back by the next open. As in Kafka,
        new[0] must have old[0]'s base offset."""
        if self.segments[-1] in old:
            raise ValueError("cannot replace the active segment")
        if old and new and new[0].base_offset != old[0].base_offset:
            # swap recovery deletes old segments from the swap's base offset on: keep them aligned
            raise ValueError("the first cleaned segment must keep the base offset of the first old one")
        now = now_ms()
        for seg in new:
            seg.on_become_inactive()
            if seg.dirty:  # the cleaner already fsynced its segments in its executor
                seg.flush()
        for seg in new:
            seg.change_suffix(SWAP_SUFFIX)
        fsync_dir(self.dir)
        for seg in old:
            if seg in self.segments:
                self._retire(seg, now)
        for seg in new:
            seg.change_suffix("")
            self._add_segment(seg)
        fsync_dir(self.dir)

    # ------------------------------------------------------------------------------------------
    # lifecycle
    # ------------------------------------------------------------------------------------------

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        self._log_append_time = config.log_append_time
        for seg in self.segments:
            seg.index_interval_bytes = config.index_interval_bytes

    def close(self, *, sync: bool = True) -> None:
        """Write out indexes, close files, snapshot producer state at the log end offset.
        ``sync=False``: as for `flush`, the caller syncs the filesystem afterwards."""
        if self.closed:
            return
        self.closed = True
        for seg in self.segments:
            seg.close()
        for _, seg in self._pending_deletes:
            seg.delete_files()
        self._pending_deletes = []
        if self._epochs_unwritten:
            self._write_epochs(sync=False)  # fsynced just below
        if sync:
            for _, path in self._unsynced_files:
                fsync_file(path)
            if self._unsynced_files:
                fsync_dir(self.dir)
        self._unsynced_files = []
        ps = self.producer_state
        # Nothing to keep for an empty log (a snapshot at its start is dropped at load), nor when
        # the newest snapshot is already at the log end (nothing was appended since).
        if ps is not None and self.log_end_offset > self.log_start_offset \
                and ps.last_snapshot_offset != self.log_end_offset:
            ps.take_snapshot(self.log_end_offset, sync=sync)  # synced (dir included) unless deferred

    def delete(self) -> None:
        """Remove the partition: rename the dir ``<topic>-<p>.<uuid>-delete``, then delete it."""
        self.closed = True
        for seg in self.segments:
            seg.close_fd()
        for _, seg in self._pending_deletes:
            seg.close_fd()
        self._pending_deletes = []
        target = self.dir.with_name(f"{self.dir.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        try:
            os.replace(self.dir, target)
            fsync_dir(self.dir.parent)
        except OSError:
            target = self.dir
        shutil.rmtree(target, ignore_errors=True)

    def __repr__(self) -> str:
        return (f"Log({self.dir.name}, start={self.log_start_offset}, end={self.log_end_offset}, "
                f"segments={len(self.segments)})")


def _now(value: int | None) -> int:
    return now_ms() if value is None else value
