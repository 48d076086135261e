"""Log compaction (cleanup.policy=compact), following Kafka's LogCleaner/Cleaner semantics.

One cleaning round of a partition:
1. The dirty section runs from the cleaner checkpoint (``cleaner-offset-checkpoint`` in the
   log dir) to the first uncleanable offset: the active segment, the last stable offset and
   min.compaction.lag.ms all bound it, rounded down to a segment boundary.
2. A key -> latest offset map is built over the dirty section, skipping aborted transactions.
3. Every non-active segment up to the end of the map is rewritten (grouped up to
   segment.bytes) keeping, per key, only the latest record. Batches keep their offsets,
   producer fields and codec; tombstones and transaction markers get a delete horizon
   (KIP-534: attribute bit 6, baseTimestamp) the first time they are kept and are removed
   once it has passed; aborted data is dropped; the last batch of each active producer is
   kept, empty if need be, so producer state (sequence, epoch) survives.
4. The rewritten segment is written with a ``.cleaned`` suffix and swapped in by
   Log.replace_segments; the checkpoint then moves to the end of the map.

Threading: the log belongs to the event loop. :func:`snapshot_log` (on the loop) captures
what a round needs, :meth:`LogCleaner.prepare` (in an executor) does all the file work
through its own descriptors, :meth:`CleanPlan.commit` (on the loop) swaps the segments in.
:meth:`LogCleaner.clean_log_async` strings the three together. Readers keep the old
segment objects until the swap, and the log deletes replaced files only after
file.delete.delay.ms. The batch-level functions (offset map, filtering, batch encoding)
work on (BatchHeader, bytes) sequences and are tested without a Log.
"""

from __future__ import annotations

import bisect
import heapq
import os
import struct
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import crc32c

from storage import batch as rb

CHECKPOINT_FILE = "cleaner-offset-checkpoint"
CLEANED_SUFFIX = ".cleaned"

# Kafka's OffsetMap is bounded by log.cleaner.dedupe.buffer.size (128 MiB, ~5M keys); ours by
# entries, at roughly 150 bytes each in a dict. A full map just ends the round early.
DEFAULT_MAX_MAP_ENTRIES = 1_000_000

_checkpoint_lock = threading.Lock()  # one checkpoint file per log dir, shared by partitions


class AbortedTxnLike(Protocol):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


@dataclass(slots=True)
class LastRecord:
    """Last data offset (None if the current epoch has none) and epoch of an active producer."""

    last_data_offset: int | None
    producer_epoch: int


@dataclass(slots=True)
class CleanStats:
    """What one cleaning round did (Kafka's CleanerStats, trimmed)."""

    first_dirty_offset: int = 0
    end_offset: int = 0  # first offset not cleaned: the new checkpoint
    segments_cleaned: int = 0
    groups: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    messages_read: int = 0
    messages_written: int = 0
    invalid_messages: int = 0  # null keys: dropped, as Kafka's cleaner does
    map_messages_read: int = 0
    map_entries: int = 0
    skipped: bool = False  # nothing was cleanable
    abandoned: bool = False  # the log changed underneath (retention/truncation): swap dropped


# --- offset map -------------------------------------------------------------------------------------


class OffsetMap:
    """key -> offset of its latest record in the dirty section, plus the last offset mapped."""

    def __init__(self, max_entries: int = DEFAULT_MAX_MAP_ENTRIES) -> None:
        self.max_entries = max_entries
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1

    def put(self, key: bytes, offset: int) -> None:
        self._map[key] = offset

    def get(self, key: bytes) -> int:
        return self._map.get(key, -1)

    def __contains__(self, key: bytes) -> bool:
        return key in self._map

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = max(self.latest_offset, offset)

    @property
    def full(self) -> bool:
        return len(self._map) >= self.max_entries

    def __len__(self) -> int:
        return len(self._map)


# --- transaction bookkeeping while cleaning ---------------------------------------------------------


class CleanedTransactionMetadata:
    """Tracks which transactions are aborted/committed as the cleaner walks the log in order.

    Decides whether a data batch belongs to an aborted transaction (discard) and whether a
    marker may go: an ABORT marker stays while data of its transaction was still seen in
    this pass (and its aborted-txn entry is carried into the new segment's .txnindex); a
    COMMIT marker stays while data of its transaction was seen.
    """

    def __init__(self) -> None:
        self._aborted: list[tuple[int, int, Any]] = []  # heap by first offset
        self._seq = 0
        self._ongoing_aborted: dict[int, list[Any]] = {}  # pid -> [txn, last observed batch offset|None]
        self._ongoing_committed: set[int] = set()
        self.retained_aborted: list[Any] = []  # entries for the cleaned .txnindex

    def add_aborted_transactions(self, txns: Iterable[AbortedTxnLike]) -> None:
        for t in txns:
            heapq.heappush(self._aborted, (t.first_offset, self._seq, t))
            self._seq += 1

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            _, _, txn = heapq.heappop(self._aborted)
            self._ongoing_aborted.setdefault(txn.producer_id, [txn, None])

    def on_control_batch_read(self, header: rb.BatchHeader, control_type: int | None) -> bool:
        """True if the marker may be discarded (``control_type`` None: an already-emptied batch)."""
        self._consume_aborted_up_to(header.last_offset)
        if control_type is None:
            return True
        pid = header.producer_id
        if control_type == rb.CONTROL_TYPE_ABORT:
            meta = self._ongoing_aborted.pop(pid, None)
            if meta is not None and meta[1] is not None:
                self.retained_aborted.append(meta[0])
                return False
            return True
        if control_type == rb.CONTROL_TYPE_COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False

    def on_batch_read(self, header: rb.BatchHeader) -> bool:
        """True if the data batch belongs to an aborted transaction."""
        self._consume_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        meta = self._ongoing_aborted.get(header.producer_id)
        if meta is not None:
            meta[1] = header.last_offset
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def take_retained_aborted(self) -> list[Any]:
        out, self.retained_aborted = self.retained_aborted, []
        return out


def control_type_of(data: bytes | memoryview, header: rb.BatchHeader) -> int | None:
    """Type of a control batch's (single) record, None if the batch has no records."""
    if header.records_count == 0:
        return None
    recs = rb.decode_records(data)
    if not recs or recs[0].key is None or len(recs[0].key) < 4:
        return -1
    return rb.parse_control_key(recs[0].key)[1]


# --- phase 1: offset map -----------------------------------------------------------------------------


def build_offset_map_for_batches(
    batches: Iterable[tuple[rb.BatchHeader, bytes]],
    start_offset: int,
    omap: OffsetMap,
    txn_meta: CleanedTransactionMetadata,
    stats: CleanStats | None = None,
) -> bool:
    """Add the keys of these batches (offsets >= start_offset) to the map; True if it filled up."""
    for header, data in batches:
        if header.is_control:
            txn_meta.on_control_batch_read(header, control_type_of(data, header))
        elif txn_meta.on_batch_read(header):
            pass  # aborted data never enters the map
        else:
            for rec in rb.decode_records(data):
                if rec.key is not None and rec.offset >= start_offset:
                    if omap.full and rec.key not in omap:
                        return True
                    omap.put(rec.key, rec.offset)
                if stats is not None:
                    stats.map_messages_read += 1
        if header.last_offset >= start_offset:
            omap.update_latest_offset(header.last_offset)
    return False


# --- phase 2: filtering -------------------------------------------------------------------------------


@dataclass(slots=True)
class FilterContext:
    """Everything the per-batch retention decision needs besides the batch itself."""

    omap: OffsetMap
    txn_meta: CleanedTransactionMetadata
    last_records: dict[int, LastRecord]
    upper_bound_offset: int  # next offset after the last batch of this cleaning round
    now_ms: int
    delete_retention_ms: int
    stats: CleanStats = field(default_factory=CleanStats)


def _is_last_batch_of_producer(header: rb.BatchHeader, last_records: dict[int, LastRecord]) -> bool:
    last = last_records.get(header.producer_id)
    if last is None:
        return False
    if last.last_data_offset is not None:
        return header.last_offset == last.last_data_offset
    return header.is_control and header.producer_epoch == last.producer_epoch


def filter_batch(header: rb.BatchHeader, data: bytes, ctx: FilterContext) -> bytes | None:
    """The cleaned form of one batch: the original bytes, a rewritten batch, an empty batch, or None."""
    stats = ctx.stats
    stats.bytes_read += header.size
    control_type = control_type_of(data, header) if header.is_control else None
    if header.is_control:
        can_discard = ctx.txn_meta.on_control_batch_read(header, control_type)
        discard_records = can_discard and header.has_delete_horizon and header.base_timestamp <= ctx.now_ms
    else:
        can_discard = ctx.txn_meta.on_batch_read(header)
        discard_records = can_discard
    marker_for_empty_txn = can_discard and header.is_control

    if header.has_producer_id and _is_last_batch_of_producer(header, ctx.last_records):
        retention = "retain_empty"
    elif header.next_offset == ctx.upper_bound_offset:
        # keep the round's last batch, even empty, so the last offset is not lost
        retention = "retain_empty"
    elif discard_records:
        return None
    else:
        retention = "delete_empty"

    records = rb.decode_records(data) if header.records_count else []
    stats.messages_read += len(records)
    if discard_records:
        retained: list[rb.Record] = []
    elif header.is_control:
        retained = records
    else:
        retained = [r for r in records if _retain_record(header, r, ctx)]

    if retained:
        has_tombstone = any(r.value is None for r in retained)
        set_horizon = (has_tombstone or marker_for_empty_txn) and not header.has_delete_horizon
        stats.messages_written += len(retained)
        if len(retained) == len(records) and not set_horizon:
            stats.bytes_written += header.size
            return data
        if set_horizon:
            horizon: int | None = ctx.now_ms + ctx.delete_retention_ms
        else:
            horizon = header.base_timestamp if header.has_delete_horizon else None
        out = encode_batch(header, retained, delete_horizon_ms=horizon)
        stats.bytes_written += len(out)
        return out
    if retention == "retain_empty":
        out = encode_empty_batch(header)
        stats.bytes_written += len(out)
        return out
    return None


def _retain_record(header: rb.BatchHeader, rec: rb.Record, ctx: FilterContext) -> bool:
    if rec.offset > ctx.omap.latest_offset:
        return True  # beyond what this round mapped: untouched
    if rec.key is None:
        ctx.stats.invalid_messages += 1  # compacted topics need keys; Kafka's cleaner drops these
        return False
    latest_for_key = rec.offset >= ctx.omap.get(rec.key)
    retain_deletes = not header.has_delete_horizon or ctx.now_ms < header.base_timestamp
    return latest_for_key and (rec.value is not None or retain_deletes)


def filter_batches(batches: Iterable[tuple[rb.BatchHeader, bytes]], ctx: FilterContext) -> Iterator[bytes]:
    for header, data in batches:
        out = filter_batch(header, data, ctx)
        if out is not None:
            yield out


# --- batch encoding -----------------------------------------------------------------------------------

_HEADER = struct.Struct(">qiibIhiqqqhii")


def _write_varint(value: int, out: bytearray) -> None:
    value = (value << 1) ^ (value >> 63)  # zigzag
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _encode_records(records: Sequence[rb.Record], base_offset: int, base_timestamp: int) -> bytearray:
    out = bytearray()
    for r in records:
        body = bytearray(b"\x00")  # record attributes: unused
        _write_varint(r.timestamp - base_timestamp, body)
        _write_varint(r.offset - base_offset, body)
        for blob in (r.key, r.value):
            if blob is None:
                _write_varint(-1, body)
            else:
                _write_varint(len(blob), body)
                body += blob
        _write_varint(len(r.headers), body)
        for hkey, hval in r.headers:
            kb = hkey.encode("utf-8")
            _write_varint(len(kb), body)
            body += kb
            if hval is None:
                _write_varint(-1, body)
            else:
                _write_varint(len(hval), body)
                body += hval
        _write_varint(len(body), out)
        out += body
    return out


def _compress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    from kafka import codec as kc

    if codec == 1:
        return kc.gzip_encode(data)
    if codec == 2:
        return kc.snappy_encode(data)
    if codec == 3:
        return kc.lz4_encode(data)
    if codec == 4:
        return kc.zstd_encode(data)
    raise ValueError(f"unknown compression codec {codec}")


def _pack_batch(
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records_count: int,
    body: bytes,
) -> bytes:
    buf = bytearray(rb.HEADER_SIZE)
    buf += body
    _HEADER.pack_into(
        buf,
        0,
        base_offset,
        len(buf) - rb.LOG_OVERHEAD,
        partition_leader_epoch,
        2,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
    )
    struct.pack_into(">I", buf, rb.CRC_OFFSET, crc32c.crc32c(memoryview(buf)[rb.ATTRIBUTES_OFFSET :]))
    return bytes(buf)


def encode_batch(
    header: rb.BatchHeader, records: Sequence[rb.Record], *, delete_horizon_ms: int | None
) -> bytes:
    """Rebuild a batch from its retained records, keeping its offsets, producer fields and codec.

    lastOffsetDelta stays that of the original batch so the producer's last sequence
    survives; with a delete horizon the baseTimestamp carries it and record timestamps
    are stored relative to it (KIP-534).
    """
    attrs = header.attributes & ~rb.DELETE_HORIZON_MASK
    if delete_horizon_ms is not None:
        attrs |= rb.DELETE_HORIZON_MASK
        base_ts = delete_horizon_ms
    else:
        base_ts = records[0].timestamp
    if header.timestamp_type == 1:
        max_ts = header.max_timestamp  # LogAppendTime: the append time, as stored
    else:
        max_ts = max(r.timestamp for r in records)
    body = _compress(header.compression, bytes(_encode_records(records, header.base_offset, base_ts)))
    return _pack_batch(
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=attrs,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        records_count=len(records),
        body=body,
    )


def encode_empty_batch(header: rb.BatchHeader) -> bytes:
    """A record-less batch keeping the producer fields and offset span (Kafka's writeEmptyHeader)."""
    attrs = header.attributes & (rb.TIMESTAMP_TYPE_MASK | rb.TRANSACTIONAL_MASK | rb.CONTROL_MASK)
    return _pack_batch(
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=attrs,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=-1,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        records_count=0,
        body=b"",
    )


# --- reading segment files ------------------------------------------------------------------------------


def iter_file_batches(path: str, start_position: int = 0) -> Iterator[tuple[rb.BatchHeader, bytes]]:
    """(header, batch bytes) of each complete batch in a segment file; stops at a torn tail.

    Reads with pread through a descriptor of its own (no mmap: a file truncated meanwhile
    must end the scan, not raise SIGBUS), and keeps reading the file it opened even if the
    log deletes or renames it concurrently.
    """
    from storage.segment import scan_batches

    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        for header, data in scan_batches(fd, start_position, size):
            yield header, bytes(data)
    finally:
        os.close(fd)


def last_records_from_batches(batches: Iterable[rb.BatchHeader]) -> dict[int, LastRecord]:
    """Kafka's lastRecordsOfActiveProducers, derived from the batch headers of the whole log.

    A new epoch (data or marker) clears the producer's batch history, so its last data
    offset only counts batches written with the latest epoch.
    """
    out: dict[int, LastRecord] = {}
    for h in batches:
        if not h.has_producer_id:
            continue
        cur = out.get(h.producer_id)
        if cur is None or cur.producer_epoch != h.producer_epoch:
            cur = LastRecord(None, h.producer_epoch)
            out[h.producer_id] = cur
        if not h.is_control:
            cur.last_data_offset = h.last_offset
    return out


# --- cleaner checkpoint (Kafka's OffsetCheckpointFile text format) --------------------------------------


def read_checkpoint(log_dir: str) -> dict[tuple[str, int], int]:
    """``0`` / count / ``topic partition offset`` lines; a missing or malformed file reads as empty."""
    path = os.path.join(log_dir, CHECKPOINT_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return {}
    if len(lines) < 2 or lines[0].strip() != "0":
        return {}
    try:
        count = int(lines[1])
        out: dict[tuple[str, int], int] = {}
        for line in lines[2 : 2 + count]:
            topic, part, off = line.rsplit(" ", 2)
            out[(topic, int(part))] = int(off)
        return out
    except ValueError:
        return {}


def write_checkpoint(log_dir: str, entries: dict[tuple[str, int], int]) -> None:
    """Atomic replace: write a temp file, fsync, rename, fsync the dir."""
    path = os.path.join(log_dir, CHECKPOINT_FILE)
    tmp = path + ".tmp"
    lines = ["0", str(len(entries))] + [f"{t} {p} {o}" for (t, p), o in sorted(entries.items())]
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(log_dir, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def update_checkpoint(log_dir: str, topic: str, partition: int, offset: int | None) -> None:
    """Set (or with None remove) one partition's entry."""
    with _checkpoint_lock:
        entries = read_checkpoint(log_dir)
        if offset is None:
            entries.pop((topic, partition), None)
        else:
            entries[(topic, partition)] = offset
        write_checkpoint(log_dir, entries)


# --- integration with a partition Log ---------------------------------------------------------------
#
# The log is owned by the event loop. What a round needs from it (segment list, offsets,
# config, aborted transactions, producer state) is captured in a LogView on the loop thread;
# the executor then only reads segment files through descriptors of its own, and the swap
# runs back on the loop (CleanPlan.commit).

_NO_NEXT = 1 << 63


def _value(obj: Any, *names: str, default: Any = None) -> Any:
    """An attribute or zero-argument method, whichever the object has."""
    for name in names:
        if hasattr(obj, name):
            v = getattr(obj, name)
            return v() if callable(v) else v
    return default


@dataclass
class LogView:
    """A consistent picture of a log for one cleaning round (take it on the log's thread)."""

    dir: Path
    topic: str
    partition: int
    config: Any
    segments: list[Any]  # sorted by base offset; the last one is the active segment
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int
    aborted: list[Any] | None = None  # aborted txns of the whole log (None: not captured)
    last_records: dict[int, LastRecord] | None = None  # None: derive from the segment files

    def next_base(self, seg: Any) -> int:
        """Base offset of the segment after ``seg`` (bisect, not a scan)."""
        segs = self.segments
        i = bisect.bisect_right([s.base_offset for s in segs], seg.base_offset)
        return segs[i].base_offset if i < len(segs) else _NO_NEXT

    @property
    def checkpoint_dir(self) -> str:
        return os.path.dirname(os.path.normpath(str(self.dir)))

    def collect_aborted(self, start: int, upper: int) -> list[Any]:
        """Aborted transactions overlapping [start, upper), like Kafka's collectAbortedTransactions."""
        if self.aborted is not None:
            return [t for t in self.aborted if t.last_offset >= start and t.first_offset < upper]
        out: list[Any] = []
        for seg in self.segments:
            if self.next_base(seg) <= start:
                continue
            found, complete = seg.txn_index.collect(start, upper)
            out.extend(found)
            if complete:
                break
        return out


def snapshot_log(log: Any, last_stable_offset: int | None = None, *, full: bool = True) -> LogView:
    """Capture a LogView. ``last_stable_offset``: the partition's LSO (bounded by the high
    watermark); without it the log end offset is used, which is only right when no
    transaction is open and every replica has everything. ``full`` also captures aborted
    transactions and producer state, which a round needs and should_clean does not."""
    segs = log.segments
    if hasattr(segs, "values"):
        segs = segs.values()
    segs = sorted(segs, key=lambda s: s.base_offset)
    topic = getattr(log, "topic", None)
    partition = getattr(log, "partition", None)
    if not (isinstance(topic, str) and isinstance(partition, int)):
        t, _, p = os.path.basename(os.path.normpath(str(log.dir))).rpartition("-")
        topic, partition = t, int(p)
    leo = int(_value(log, "log_end_offset"))
    if last_stable_offset is None:
        last_stable_offset = _value(log, "last_stable_offset", "high_watermark", default=leo)
        # at least never past an open transaction the log's producer state knows of
        first_unstable = getattr(getattr(log, "producer_state", None), "first_unstable_offset", None)
        unstable = first_unstable() if callable(first_unstable) else None
        if isinstance(unstable, int):
            last_stable_offset = min(int(last_stable_offset), unstable)  # type: ignore[call-overload]
    view = LogView(
        dir=Path(log.dir),
        topic=topic,
        partition=partition,
        config=log.config,
        segments=segs,
        log_start_offset=int(_value(log, "log_start_offset", default=segs[0].base_offset if segs else 0)),
        log_end_offset=leo,
        last_stable_offset=int(last_stable_offset),  # type: ignore[arg-type]
    )
    if full:
        collect = getattr(log, "collect_aborted_txns", None)
        if collect is not None:
            view.aborted = list(collect(view.log_start_offset, leo + 1))
        view.last_records = _last_records_from_producer_state(log)
    return view


def _last_records_from_producer_state(log: Any) -> dict[int, LastRecord] | None:
    """Kafka's lastRecordsOfActiveProducers, from the log's producer state if it has one."""
    fn = getattr(log, "last_records_of_active_producers", None)
    if fn is not None:
        out: dict[int, LastRecord] = {}
        for pid, r in fn().items():
            last = _value(r, "last_data_offset", default=None)
            out[pid] = LastRecord(last if last is not None and last >= 0 else None, int(r.producer_epoch))
        return out
    ps = getattr(log, "producer_state", None)
    producers = getattr(ps, "producers", None) if ps is not None else None
    if not isinstance(producers, dict):
        return None
    out = {}
    for pid, entry in list(producers.items()):
        last = _value(entry, "last_data_offset", default=None)
        if last is None:
            batches = _value(entry, "batch_metadata", "batches", default=None) or []
            last = batches[-1].last_offset if batches else None
        epoch = _value(entry, "producer_epoch", "epoch", default=-1)
        out[pid] = LastRecord(last if last is not None and last >= 0 else None, int(epoch))
    return out


def _segment_largest_timestamp(seg: Any) -> int:
    """Max record timestamp, or the file's mtime without one (Kafka's LogSegment.largestTimestamp)."""
    v = _value(seg, "largest_timestamp", default=None)
    return int(v if v is not None else _value(seg, "max_timestamp", default=-1))


def _segment_first_batch_timestamp(seg: Any) -> int:
    """The first batch's max timestamp (what max.compaction.lag.ms is measured from)."""
    ts = getattr(seg, "first_batch_timestamp", None)
    if ts is not None:
        return int(ts)
    try:
        fd = os.open(str(seg.log_path), os.O_RDONLY)
    except OSError:
        return -1
    try:
        head = os.pread(fd, rb.HEADER_SIZE, 0)
    finally:
        os.close(fd)
    return rb.parse_header(head).max_timestamp if len(head) == rb.HEADER_SIZE else -1


@dataclass(slots=True)
class CleanableRange:
    """Kafka's OffsetsToClean + LogToClean for one log at one instant."""

    first_dirty_offset: int
    first_uncleanable_offset: int  # a segment base offset: cleaning never splits a segment
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool
    force_update_checkpoint: bool

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def cleanable_range(
    log: Any, now_ms: int, checkpoint: int | None = None, last_stable_offset: int | None = None
) -> CleanableRange:
    """Where the dirty section starts and where cleaning must stop (LogCleanerManager.cleanableOffsets).

    ``log`` is a Log or a LogView; ``checkpoint`` defaults to the cleaner checkpoint file.
    """
    view = log if isinstance(log, LogView) else snapshot_log(log, last_stable_offset, full=False)
    segs = view.segments
    cfg = view.config
    if checkpoint is None:
        checkpoint = read_checkpoint(view.checkpoint_dir).get((view.topic, view.partition))
    force = False
    first_dirty = view.log_start_offset if checkpoint is None else checkpoint
    if first_dirty < view.log_start_offset or first_dirty > view.log_end_offset:
        first_dirty, force = view.log_start_offset, checkpoint is not None
    active = segs[-1]
    # never past the LSO (bounded by the high watermark), the active segment, min.compaction.lag.ms
    bounds = [view.last_stable_offset, active.base_offset]
    non_active_dirty = [s for s in segs[:-1] if view.next_base(s) > first_dirty]
    if cfg.min_compaction_lag_ms > 0:
        for s in non_active_dirty:
            if _segment_largest_timestamp(s) > now_ms - cfg.min_compaction_lag_ms:
                bounds.append(s.base_offset)
                break
    uncleanable = max(first_dirty, min(bounds))
    first_uncleanable = active.base_offset  # rounded down to the segment holding `uncleanable`
    for s in segs[:-1]:
        if view.next_base(s) > uncleanable:
            first_uncleanable = s.base_offset
            break
    clean_bytes = sum(s.size for s in segs if s.base_offset < first_dirty)
    lo = min(first_dirty, first_uncleanable)
    cleanable_bytes = sum(
        s.size for s in segs if view.next_base(s) > lo and s.base_offset < first_uncleanable
    )
    need_now = False
    max_lag = max(cfg.max_compaction_lag_ms, 0)
    if max_lag < (1 << 62):
        firsts = [ts for s in non_active_dirty if (ts := _segment_first_batch_timestamp(s)) > 0]
        need_now = bool(firsts) and min(firsts) < now_ms - max_lag
    return CleanableRange(first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, need_now, force)


def should_clean(log: Any, now_ms: int, last_stable_offset: int | None = None) -> bool:
    """Whether this log is due for compaction: cleanup.policy has compact and either the dirty
    ratio exceeds min.cleanable.dirty.ratio or max.compaction.lag.ms has passed.

    Cheap enough for the event loop: segment sizes, cached timestamps, the checkpoint file,
    and with max.compaction.lag.ms set one 61-byte read per dirty segment at most.
    """
    if not log.config.compact_enabled or len(log.segments) < 2:
        return False
    r = cleanable_range(log, now_ms, last_stable_offset=last_stable_offset)
    if r.total_bytes <= 0:
        return False
    return (
        r.need_compaction_now and r.cleanable_bytes > 0
    ) or r.cleanable_ratio > log.config.min_cleanable_dirty_ratio


def group_segments_by_size(
    segs: list[Any], max_size: int, first_uncleanable: int, max_offset_span: int = 0x7FFFFFFF
) -> list[list[Any]]:
    """Consecutive segments whose total size fits in segment.bytes (and whose offsets fit the
    int32 relative offsets of one index) form one group, rewritten into one segment."""
    groups: list[list[Any]] = []
    i = 0
    while i < len(segs):
        group = [segs[i]]
        size = segs[i].size
        i += 1
        while i < len(segs) and size + segs[i].size <= max_size:
            last_offset = segs[i + 1].base_offset - 1 if i + 1 < len(segs) else first_uncleanable - 1
            if segs[i].size > 0 and last_offset - group[0].base_offset > max_offset_span:
                break
            group.append(segs[i])
            size += segs[i].size
            i += 1
        groups.append(group)
    return groups


@dataclass
class PreparedGroup:
    old: list[Any]
    new: Any  # a storage.segment.Segment with the .cleaned suffix


@dataclass
class CleanPlan:
    """The result of the blocking phase: cleaned segments ready to swap in on the log's thread."""

    log: Any
    view: LogView
    groups: list[PreparedGroup]
    stats: CleanStats

    def commit(self) -> CleanStats:
        """Swap the cleaned segments in (call on the thread that owns the log).

        If some group's old segments are no longer all in the log (retention or truncation
        ran meanwhile), that group and the ones after it are dropped, since swapping them
        would resurrect removed data, and the checkpoint stays where it was.
        """
        for i, g in enumerate(self.groups):
            current = {id(s) for s in self.log.segments}
            if getattr(self.log, "closed", False) or not all(id(s) in current for s in g.old):
                for rest in self.groups[i:]:
                    rest.new.delete_files()
                self.groups = self.groups[:i]
                self.stats.end_offset = self.stats.first_dirty_offset
                self.stats.abandoned = True
                break
            self.log.replace_segments(g.old, [g.new])
        return self.stats

    def abort(self) -> None:
        """Throw the prepared segments away (e.g. the partition is being deleted)."""
        for g in self.groups:
            g.new.delete_files()
        self.groups = []

    def write_checkpoint(self) -> None:
        """Record the new first dirty offset (blocking: fsyncs; run it after commit)."""
        if self.stats.abandoned or (self.stats.skipped and self.stats.end_offset <= 0):
            return
        update_checkpoint(
            self.view.checkpoint_dir, self.view.topic, self.view.partition, self.stats.end_offset
        )


class LogCleaner:
    """Compacts logs: :meth:`prepare` is the blocking part, :meth:`CleanPlan.commit` the swap."""

    def __init__(
        self, max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES, write_chunk_bytes: int = 1 << 20
    ) -> None:
        self.max_map_entries = max_map_entries
        self.write_chunk_bytes = write_chunk_bytes

    def clean_log(self, log: Any, now_ms: int, last_stable_offset: int | None = None) -> CleanStats:
        """One whole round (prepare, swap, checkpoint) in the calling thread. For callers that own
        the log meanwhile (tests, tools); the broker uses :meth:`clean_log_async`."""
        plan = self.prepare(log, now_ms, last_stable_offset)
        stats = plan.commit()
        plan.write_checkpoint()
        return stats

    async def clean_log_async(
        self, log: Any, now_ms: int, last_stable_offset: int | None = None, executor: Any = None
    ) -> CleanStats:
        """Snapshot and swap on the event loop that owns the log, file work in an executor."""
        import asyncio

        loop = asyncio.get_running_loop()
        view = snapshot_log(log, last_stable_offset)
        plan = await loop.run_in_executor(executor, self.prepare, log, now_ms, last_stable_offset, view)
        stats = plan.commit()
        await loop.run_in_executor(executor, plan.write_checkpoint)
        return stats

    def prepare(
        self, log: Any, now_ms: int, last_stable_offset: int | None = None, view: LogView | None = None
    ) -> CleanPlan:
        """Build the cleaned segments (blocking). Given a ``view`` taken on the log's thread it
        touches no log state: it reads old segments through its own descriptors, so a
        concurrent retention delete cannot pull a file away underneath it; the new segments
        carry the ``.cleaned`` suffix until commit."""
        if view is None:
            view = snapshot_log(log, last_stable_offset)
        stats = CleanStats()
        segs = view.segments
        rng = cleanable_range(view, now_ms)
        stats.first_dirty_offset = rng.first_dirty_offset
        upper = rng.first_uncleanable_offset
        if rng.force_update_checkpoint:
            stats.end_offset = rng.first_dirty_offset
        if upper <= rng.first_dirty_offset or len(segs) < 2:
            stats.skipped = True
            return CleanPlan(log, view, [], stats)

        try:
            prepared = self._prepare_groups(view, now_ms, rng, stats)
        except FileNotFoundError:
            # a segment was deleted (retention, truncation) after the snapshot: try again later
            stats.abandoned = True
            return CleanPlan(log, view, [], stats)
        return CleanPlan(log, view, prepared, stats)

    def _prepare_groups(
        self, view: LogView, now_ms: int, rng: CleanableRange, stats: CleanStats
    ) -> list[PreparedGroup]:
        cfg = view.config
        segs = view.segments
        upper = rng.first_uncleanable_offset

        # 1. key -> latest offset over the dirty section
        omap = OffsetMap(self.max_map_entries)
        meta = CleanedTransactionMetadata()
        meta.add_aborted_transactions(view.collect_aborted(rng.first_dirty_offset, upper))
        dirty = [s for s in segs[:-1] if view.next_base(s) > rng.first_dirty_offset and s.base_offset < upper]
        for seg in dirty:
            batches = iter_file_batches(str(seg.log_path))
            if build_offset_map_for_batches(batches, rng.first_dirty_offset, omap, meta, stats):
                break
            omap.update_latest_offset(min(view.next_base(seg), upper) - 1)
        stats.map_entries = len(omap)
        end_offset = omap.latest_offset + 1
        stats.end_offset = end_offset

        # 2. rewrite every segment below end_offset, in groups bounded by segment.bytes
        last_records = view.last_records
        if last_records is None:
            last_records = last_records_from_batches(
                h for seg in segs for h, _ in iter_file_batches(str(seg.log_path))
            )
        to_clean = [s for s in segs[:-1] if s.base_offset < end_offset]
        ctx = FilterContext(
            omap, CleanedTransactionMetadata(), last_records, upper, now_ms, cfg.delete_retention_ms, stats
        )
        prepared: list[PreparedGroup] = []
        try:
            for group in group_segments_by_size(to_clean, cfg.segment_bytes, upper):
                prepared.append(PreparedGroup(group, self._clean_group(view, group, ctx)))
                stats.groups += 1
                stats.segments_cleaned += len(group)
        except BaseException:
            for g in prepared:
                g.new.delete_files()
            raise
        return prepared

    def _clean_group(self, view: LogView, group: list[Any], ctx: FilterContext) -> Any:
        from storage.segment import Segment
        from storage.txn_index import AbortedTxn

        cfg = view.config
        cleaned = Segment.create(
            view.dir,
            group[0].base_offset,
            index_interval_bytes=cfg.index_interval_bytes,
            max_index_bytes=cfg.segment_index_bytes,
            suffix=CLEANED_SUFFIX,
        )
        try:
            for seg in group:
                nxt = view.next_base(seg)
                seg_upper = nxt if nxt < _NO_NEXT else view.log_end_offset
                # the whole segment's range: the new .txnindex must be complete
                ctx.txn_meta.add_aborted_transactions(view.collect_aborted(seg.base_offset, seg_upper))
                buf = bytearray()
                for header, data in iter_file_batches(str(seg.log_path)):
                    out = filter_batch(header, data, ctx)
                    if out is not None:
                        buf += out
                    for t in ctx.txn_meta.take_retained_aborted():
                        cleaned.add_aborted_txn(
                            AbortedTxn(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
                        )
                    if len(buf) >= self.write_chunk_bytes:
                        self._write(cleaned, buf)
                self._write(cleaned, buf)
            cleaned.on_become_inactive()
            cleaned.flush()
            # keep the replaced segments' mtime, as Kafka does (time-based retention falls back to it)
            mtime = os.stat(group[-1].log_path).st_mtime
            os.utime(cleaned.log_path, (mtime, mtime))
        except BaseException:
            cleaned.delete_files()
            raise
        return cleaned

    @staticmethod
    def _write(cleaned: Any, buf: bytearray) -> None:
        if not buf:
            return
        cleaned.append(buf, 0, len(buf), list(rb.iter_headers(buf, check=False)))
        buf.clear()
