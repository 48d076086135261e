"""One log segment: ``<base>.log`` plus its ``.index``, ``.timeindex`` and ``.txnindex``.

The ``.log`` file is held open (O_APPEND) for the segment's life: appends are one
``os.write`` of the caller's buffer, reads are ``os.pread`` of whole byte ranges. Index
entries are kept in memory and written at flush/roll/close (see offset_index).

A flush has a loop side and a blocking side: `Segment.prepare_flush` (on the event loop that
owns the segment) writes pending index entries, marks the segment clean and returns a
`SegmentSync`, whose `sync` only fsyncs the captured fd and index files and so may run in an
executor while the loop appends to, rolls, renames or closes the segment.

Indexing rule (Kafka's LogSegment.recover, equivalent to its append path): a batch at file
position P gets an offset-index entry (batch last offset -> P) when P - position of the
previous entry > index.interval.bytes; the time index gets (max timestamp so far, offset of
the batch that set it) at the same points, and once more when the segment becomes inactive.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from storage import batch as rb
from storage import write_behind
from storage.checkpoints import fsync_file
from storage.offset_index import IndexCorruptError, OffsetIndex
from storage.time_index import TimeIndex
from storage.txn_index import AbortedTxn, TransactionIndex

log = logging.getLogger("storage.log")

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
INT32_MAX = 0x7FFFFFFF
SCAN_CHUNK = 1 << 20
# A loaded segment holding more blocks than this past its size has a reservation left over.
_RESERVED_SLACK = 1 << 20

_BASE_LEN = struct.Struct(">qi")  # baseOffset, batchLength
_INT32 = struct.Struct(">i")
_LAST_DELTA_AT = 23  # lastOffsetDelta inside the header
_MAX_TS = struct.Struct(">q")
_MAX_TS_AT = 35


def filename_prefix(base_offset: int) -> str:
    return f"{base_offset:020d}"


def now_ms() -> int:
    return int(time.time() * 1000)


class BatchScanError(Exception):
    """Scanning stopped at an invalid or torn batch; ``position`` is where valid data ends."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(reason)
        self.position = position
        self.reason = reason


def scan_batches(
    fd: int, start: int, end: int, *, check: bool = False, chunk: int = SCAN_CHUNK, need_data: bool = True
) -> Iterator[tuple[rb.BatchHeader, memoryview]]:
    """Yield (header with absolute file ``position``, batch bytes) for batches in [start, end).

    Reads ``chunk``-sized ranges with pread; a batch larger than a chunk gets its own read.
    With ``check`` every batch is CRC/structure validated and a torn or invalid batch raises
    BatchScanError; without it, scanning stops quietly at the first batch that does not fit.
    With ``need_data=False`` (offset lookups) a batch that does not fit in the current chunk
    is skipped over by its header alone and yielded with empty bytes.
    """
    pos = start
    buf = b""
    buf_start = start  # buf holds the file range [buf_start, buf_start + len(buf))
    headers_only = not need_data and not check
    while pos < end:
        off = pos - buf_start
        if len(buf) - off < rb.HEADER_SIZE:
            buf = os.pread(fd, min(chunk, end - pos), pos)
            buf_start, off = pos, 0
            if len(buf) < rb.HEADER_SIZE:
                if check:
                    raise BatchScanError(pos, f"torn batch header ({len(buf)} bytes) at position {pos}")
                return
        _, length = _BASE_LEN.unpack_from(buf, off)
        size = length + rb.LOG_OVERHEAD
        if length < rb.HEADER_SIZE - rb.LOG_OVERHEAD:
            if check:
                raise BatchScanError(pos, f"invalid batch length {length} at position {pos}")
            return
        if pos + size > end:
            if check:
                raise BatchScanError(pos, f"torn batch at position {pos}: {size} bytes claimed, {end - pos} present")
            return
        if off + size > len(buf):
            if headers_only:
                header = rb.parse_header(buf, off)
                header.position = pos
                yield header, memoryview(b"")
                pos += size
                continue
            if size > chunk:
                data = os.pread(fd, size, pos)
                if len(data) < size:
                    if check:
                        raise BatchScanError(pos, f"torn batch at position {pos}")
                    return
                buf, buf_start, off = data, pos, 0
            else:
                buf = os.pread(fd, min(chunk, end - pos), pos)
                buf_start, off = pos, 0
                if len(buf) < size:
                    if check:
                        raise BatchScanError(pos, f"torn batch at position {pos}")
                    return
        header = rb.parse_header(buf, off)
        if check:
            try:
                rb.validate(buf, header)
            except rb.InvalidBatchError as e:
                raise BatchScanError(pos, f"{e} at position {pos}") from e
        header.position = pos
        yield header, memoryview(buf)[off : off + size]
        pos += size


_FIRST_HEADER = _LAST_DELTA_AT + 4  # bytes of a batch header up to and including lastOffsetDelta
# Header scans read the file in windows this large while batches are small (one window then covers
# many headers), and only the next header once a batch is at least _BIG_BATCH bytes long (a window
# would mostly copy record bytes that are about to be sent from the file anyway).
_SCAN_WINDOW = 64 * 1024
APPEND_HINTS = 16  # Segment._start_hints: the last appends whose start positions are kept
_BIG_BATCH = 16 * 1024


class _HeaderScan:
    """Batch headers of one segment file read through a small moving window (``Segment.read_range``)."""

    __slots__ = ("fd", "size", "buf", "start", "last_len")

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size = fd, size
        self.buf = b""
        self.start = 0
        self.last_len = 0

    def header(self, pos: int, need: int) -> tuple[int, int, int] | None:
        """(base offset, batch length, last offset delta or -1) of the batch at ``pos``; None
        when fewer than ``need`` bytes remain in the file."""
        if pos + need > self.size:
            return None
        at = pos - self.start
        if at < 0 or at + need > len(self.buf):
            window = need if self.last_len >= _BIG_BATCH else _SCAN_WINDOW
            self.buf = os.pread(self.fd, max(need, min(window, self.size - pos)), pos)
            self.start, at = pos, 0
            if len(self.buf) < need:
                return None
        base, length = _BASE_LEN.unpack_from(self.buf, at)
        self.last_len = length
        delta = _INT32.unpack_from(self.buf, at + _LAST_DELTA_AT)[0] if need >= _FIRST_HEADER else -1
        return base, length, delta


class Segment:
    """A segment's files and in-memory summary (size, next offset, max timestamp)."""

    def __init__(
        self,
        dir: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        suffix: str = "",
        new: bool,
        created_ms: int | None = None,
    ) -> None:
        self.dir = dir
        self.base_offset = base_offset
        self.suffix = suffix
        self.index_interval_bytes = index_interval_bytes
        self.log_path = dir / (filename_prefix(base_offset) + LOG_SUFFIX + suffix)
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND
        if new:
            flags |= os.O_TRUNC
        self.fd = os.open(self.log_path, flags, 0o644)
        st = os.fstat(self.fd)
        self.size = st.st_size
        if not new and st.st_blocks * 512 > self.size + _RESERVED_SLACK:
            # Blocks reserved past the end (storage.write_behind's preallocation) by a process
            # that stopped before trimming them (a crash): free them; the size is unchanged.
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, self.size)
        prefix = filename_prefix(base_offset)
        self.offset_index = OffsetIndex(dir / (prefix + INDEX_SUFFIX + suffix), base_offset, max_index_bytes, new=new)
        self.time_index = TimeIndex(dir / (prefix + TIME_INDEX_SUFFIX + suffix), base_offset, max_index_bytes, new=new)
        self.txn_index = TransactionIndex(dir / (prefix + TXN_INDEX_SUFFIX + suffix), base_offset, new=new)
        self.offset_index.on_corrupt = self._rebuild_after_corrupt
        self.time_index.on_corrupt = self._rebuild_after_corrupt
        self.created_ms = now_ms() if created_ms is None else created_ms
        # None = not yet computed (only the active segment needs it eagerly)
        self.next_offset: int | None = base_offset if new else None
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.first_batch_timestamp: int | None = None
        self.last_index_pos = 0
        self.dirty = new  # data written since the last fsync
        self.closed = False
        # storage.write_behind: bytes handed over for writeback / dropped from the page cache so
        # far. A loaded segment's bytes are left to the OS (they may be old, cached or not).
        self.wb_pos = self.drop_pos = self.size
        # Blocks reserved past the end while this segment fills fast (write_behind.Preallocation),
        # up to prealloc_end; wb_time: when the last CHUNK was handed over.
        self.prealloc: write_behind.Preallocation | None = None
        self.prealloc_end = 0
        self.wb_time = time.monotonic()
        # The previous active segment's un-dropped tail (path, start, end), dropped once this one
        # is CACHE_WINDOW long: set by Log.roll.
        self.predecessor_tail: tuple[Path, int, int] | None = None
        # Where the batches of the last APPEND_HINTS appends start (base offset -> file position):
        # a follower or a consumer at the tail fetches from exactly such an offset, and starting
        # there skips the scan of batch headers from the sparse index entry below it (up to
        # index.interval.bytes of small batches, read on every fetch). Cleared when the file is
        # cut (truncate_to, recover); a hint is also checked against the batch it points at.
        self._start_hints: dict[int, int] = {}

    # --- creation / loading -----------------------------------------------------------------

    @classmethod
    def create(cls, dir: Path, base_offset: int, *, index_interval_bytes: int, max_index_bytes: int,
               suffix: str = "", created_ms: int | None = None) -> Segment:
        return cls(dir, base_offset, index_interval_bytes=index_interval_bytes, max_index_bytes=max_index_bytes,
                   suffix=suffix, new=True, created_ms=created_ms)

    @classmethod
    def load(cls, dir: Path, base_offset: int, *, index_interval_bytes: int, max_index_bytes: int) -> Segment:
        return cls(dir, base_offset, index_interval_bytes=index_interval_bytes, max_index_bytes=max_index_bytes,
                   new=False)

    def check_indexes(self) -> None:
        """Cheap open-time sanity check; raises IndexCorruptError. Sets the max timestamp."""
        self.offset_index.check_against_log(self.size)
        last = self.time_index.check_against_log()
        if last is not None:
            self.max_timestamp, self.offset_of_max_timestamp = last
        # A missing .txnindex is an empty one (created with the first aborted transaction, as Kafka).

    def _rebuild_after_corrupt(self, err: IndexCorruptError) -> None:
        log.warning("%s: rebuilding indexes of %s: %s", self.dir, self.log_path.name, err)
        self.recover(check=False)

    def load_tail(self) -> None:
        """Compute next offset, max timestamp and indexing state by scanning from the last
        offset-index entry (clean load of the last segment; no CRC checks)."""
        self.offset_index._ensure()
        self.time_index._ensure()
        last = self.offset_index.last_entry()
        start = last[1] if last else 0
        self.last_index_pos = start
        next_offset = self.base_offset
        if last is not None:
            next_offset = last[0] + 1
        end = start
        for header, _ in scan_batches(self.fd, start, self.size, need_data=False):
            next_offset = header.next_offset
            end = header.position + header.size
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
        if end < self.size:
            # Bytes after the last whole batch (a torn write, or a file damaged while the broker
            # was down, even after a clean shutdown): appends would land behind garbage that
            # every read stops at. Validate and truncate the whole segment instead.
            log.warning("%s: %d bytes after the last complete batch (position %d) of %s; recovering it",
                        self.dir, self.size - end, end, self.log_path.name)
            self.recover()
            return
        self.next_offset = next_offset

    def recover(self, *, check: bool = True, on_batch: Callable[[rb.BatchHeader], None] | None = None) -> int:
        """Rebuild all of this segment's indexes from the log, validating every batch (CRC,
        structure, increasing offsets); truncate the log at the first invalid one.
        Returns the number of bytes truncated. The txn index is kept (it cannot be rebuilt
        without producer state) but loses entries beyond the new end."""
        self.offset_index.reset()
        self.time_index.reset()
        self._start_hints.clear()
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.first_batch_timestamp = None
        self.last_index_pos = 0
        next_offset = self.base_offset
        valid = 0
        reason = ""
        try:
            for header, _ in scan_batches(self.fd, 0, self.size, check=check):
                if header.base_offset < next_offset or header.last_offset - self.base_offset > INT32_MAX:
                    raise BatchScanError(
                        header.position,
                        f"batch offsets {header.base_offset}..{header.last_offset} out of order at position "
                        f"{header.position} (expected >= {next_offset})",
                    )
                self._index_batch(header, header.position)
                if on_batch is not None:
                    on_batch(header)
                next_offset = header.next_offset
                valid = header.position + header.size
        except BatchScanError as e:
            valid = e.position
            reason = e.reason
        truncated = self.size - valid
        if truncated > 0:
            log.warning("Truncated %d invalid bytes at position %d of %s: %s", truncated, valid, self.log_path, reason)
            os.ftruncate(self.fd, valid)
            self.size = valid
        self.next_offset = next_offset
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        try:
            self.txn_index.truncate_to(next_offset)
        except IndexCorruptError as e:
            log.warning("Dropping corrupt transaction index %s: %s", self.txn_index.path, e)
            self.txn_index = TransactionIndex(self.txn_index.path, self.base_offset, new=True)
        self.offset_index.flush()
        self.time_index.flush()
        self.dirty = True
        self.wb_pos = min(self.wb_pos, self.size)
        self.drop_pos = min(self.drop_pos, self.size)
        return truncated

    def _index_batch(self, header: rb.BatchHeader, pos: int) -> None:
        """Update max timestamp and sparse indexes for one batch about to sit at ``pos``."""
        if self.first_batch_timestamp is None and pos == 0:
            self.first_batch_timestamp = header.max_timestamp
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.base_offset + header.last_offset_delta
        if pos - self.last_index_pos > self.index_interval_bytes:
            self.offset_index.append(header.base_offset + header.last_offset_delta, pos)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.last_index_pos = pos

    # --- append -----------------------------------------------------------------------------

    def should_roll(self, size: int, max_timestamp: int, last_offset: int, now: int,
                    segment_bytes: int, segment_ms: int) -> bool:
        """Kafka's LogSegment.shouldRoll (without roll jitter)."""
        if self.size == 0:
            # An empty segment is never replaced by another empty one, unless offsets overflow.
            return last_offset - self.base_offset > INT32_MAX
        if (
            self.size > segment_bytes - size
            or last_offset - self.base_offset > INT32_MAX
            or self.offset_index.is_full
            or self.time_index.is_full
        ):
            return True
        first_ts = self.first_batch_timestamp
        if first_ts is None:
            first_ts = self._read_first_batch_timestamp()
        waited = max_timestamp - first_ts if first_ts >= 0 else now - self.created_ms
        return waited > segment_ms

    def _read_first_batch_timestamp(self) -> int:
        if self.size < rb.HEADER_SIZE:
            ts = -1
        else:
            ts = _MAX_TS.unpack(os.pread(self.fd, 8, _MAX_TS_AT))[0]
        self.first_batch_timestamp = ts
        return ts

    def append(self, buf: bytes | bytearray | memoryview, start: int, end: int,
               headers: list[rb.BatchHeader]) -> None:
        """Write ``buf[start:end]`` (the batches ``headers`` describe, offsets assigned). All or
        nothing: a write that fails part way (no space left) cuts the file back to where it was
        before raising, and the batches are indexed only once they are written."""
        pos = self.size
        view = memoryview(buf)[start:end]
        try:
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, pos)  # O_APPEND: the next write lands at pos again
            raise
        index_batch = self._index_batch
        for h in headers:
            index_batch(h, pos + h.position - start)
        self.size = pos + end - start
        hints = self._start_hints
        hints[headers[0].base_offset] = pos + headers[0].position - start
        if len(hints) > APPEND_HINTS:
            del hints[next(iter(hints))]
        last = headers[-1]
        self.next_offset = last.base_offset + last.last_offset_delta + 1
        self.dirty = True
        if self.size - self.wb_pos >= write_behind.CHUNK:
            self._write_behind()

    def _write_behind(self) -> None:
        """Hand the bytes appended since the last call to storage.write_behind (writeback starts
        now, off the loop), with the range that fell more than CACHE_WINDOW behind the end to drop
        from the page cache once written."""
        size = self.size
        window = write_behind.CACHE_WINDOW
        # Page-aligned, so that consecutive drops meet without leaving a page between them cached.
        drop_end = (size - window) & ~(write_behind.PAGE - 1) if window >= 0 else 0
        drop_start = self.drop_pos
        wb = write_behind.instance()
        if drop_end <= drop_start:
            drop_start = drop_end = 0
        else:
            self.drop_pos = drop_end
            tail, self.predecessor_tail = self.predecessor_tail, None
            if tail is not None:  # the last segment's end is now more than CACHE_WINDOW behind too
                wb.submit(tail[0], 0, 0, tail[1], tail[2])
        # Filling fast: reserve the next two chunks' blocks (at most, past what is reserved already).
        prealloc = None
        now = time.monotonic()
        if (write_behind.PREALLOCATE and now - self.wb_time < write_behind.PREALLOC_FILL_S
                and write_behind.preallocates(self.dir)):
            p = self.prealloc
            if p is None:
                p = self.prealloc = write_behind.Preallocation()
            start, end = max(size, self.prealloc_end), size + 2 * write_behind.CHUNK
            if end > start:
                prealloc = (p, start, end)
                self.prealloc_end = end
        self.wb_time = now
        # Not queued (queue full): the kernel's flusher writes the range back as it otherwise would.
        wb.submit(self.log_path, self.wb_pos, size, drop_start, drop_end, prealloc)
        self.wb_pos = size

    def trim_preallocation(self) -> None:
        """Free the blocks reserved past the end (the segment stops being appended to): stop the
        reservation first, so none is made after the trim."""
        p, self.prealloc = self.prealloc, None
        self.prealloc_end = 0
        if p is None:
            return
        p.stop()
        if not self.closed:
            try:
                os.ftruncate(self.fd, self.size)  # to its own size: only the blocks past it go
            except OSError as e:
                log.warning("%s: could not free the blocks reserved past its end: %s", self.log_path, e)

    def undropped_tail(self) -> tuple[Path, int, int] | None:
        """At a roll: the range appended by this process and not yet dropped from the page cache
        (None if none), for the next segment to drop once it is CACHE_WINDOW long. Its writeback
        needs no start here: the flush that follows a roll fsyncs the segment."""
        if self.drop_pos >= self.size:
            return None
        return self.log_path, self.drop_pos, self.size

    # --- reads ------------------------------------------------------------------------------

    def start_position(self, offset: int) -> int:
        """Where a scan for ``offset`` starts: the batch appended at exactly that offset, if it
        is one of the last few, else the sparse index entry at or below it."""
        hinted = self._start_hints.get(offset)
        return self.offset_index.lookup(offset)[1] if hinted is None else hinted

    def find_position(self, offset: int, start_pos: int | None = None) -> rb.BatchHeader | None:
        """Header (with file position) of the first batch whose last offset >= offset."""
        pos = self.offset_index.lookup(offset)[1] if start_pos is None else start_pos
        for header, _ in scan_batches(self.fd, pos, self.size, chunk=65536, need_data=False):
            if header.base_offset + header.last_offset_delta >= offset:
                return header
        return None

    def read(self, offset: int, max_bytes: int, max_offset: int | None,
             min_one_batch: bool) -> tuple[memoryview | bytes, int] | None:
        """Whole batches from the one containing ``offset``: (bytes, its base offset), or None
        when no batch of this segment reaches ``offset``."""
        size = self.size
        unpack = _BASE_LEN.unpack_from
        hinted = self._start_hints.get(offset)
        if hinted is not None:
            # A batch starts at ``offset``: no scan, so only what the range needs is read.
            pos = hinted
            buf = os.pread(self.fd, min(size - pos, max(max_bytes, rb.HEADER_SIZE)), pos)
            if len(buf) < rb.HEADER_SIZE or unpack(buf, 0)[0] != offset:
                hinted = None
        if hinted is None:
            pos = self.offset_index.lookup(offset)[1]
            # One pread usually covers both the short scan from the index entry and the range.
            want = min(size - pos, max_bytes + min(self.index_interval_bytes, 1 << 18) + 65536)
            if want <= 0:
                return None
            buf = os.pread(self.fd, want, pos)
        n = len(buf)
        delta = _INT32.unpack_from
        p = 0
        while True:
            if n - p < rb.HEADER_SIZE:
                break
            base, length = unpack(buf, p)
            if base + delta(buf, p + _LAST_DELTA_AT)[0] >= offset:
                break
            p += length + rb.LOG_OVERHEAD
        if n - p < rb.HEADER_SIZE:
            # the start lies beyond this buffer (large batches): find it the slow way
            if pos + p >= size:
                return None
            header = self.find_position(offset, pos + p)
            if header is None:
                return None
            pos = header.position
            # At least the header, even for max_bytes 0 (a fetch whose response limit is used up).
            buf = os.pread(self.fd, min(size - pos, max(max_bytes, rb.HEADER_SIZE)), pos)
            n = len(buf)
            p = 0
        first_base, first_len = unpack(buf, p)
        if max_offset is not None and first_base >= max_offset:
            return b"", first_base
        limit = p + max_bytes
        q = p
        reread = False
        while n - q >= rb.LOG_OVERHEAD:
            base, length = unpack(buf, q)
            if max_offset is not None and base >= max_offset:
                break
            e = q + length + rb.LOG_OVERHEAD
            if e > limit or e > n:
                if e <= limit and pos + n < size and not reread:
                    # the buffer ended before max_bytes did: read the whole range afresh
                    reread = True
                    pos += p
                    buf = os.pread(self.fd, min(size - pos, max_bytes), pos)
                    n = len(buf)
                    limit = max_bytes
                    q -= p
                    p = 0
                    continue
                break
            q = e
        if q == p:
            if not min_one_batch:
                return b"", first_base
            total = first_len + rb.LOG_OVERHEAD
            if p + total <= n:
                return memoryview(buf)[p : p + total], first_base
            return os.pread(self.fd, total, pos + p), first_base
        return memoryview(buf)[p:q], first_base

    def read_range(self, offset: int, max_bytes: int, max_offset: int | None,
                   min_one_batch: bool) -> tuple[int, int, int] | None:
        """The byte range of the whole batches a read from ``offset`` returns, as (file position,
        length, base offset of the first batch), or None when no batch of this segment reaches
        ``offset``: the same batches as `read` (from the one containing ``offset``, while they fit
        in ``max_bytes`` and start below ``max_offset``; the first alone when none fits and
        ``min_one_batch``), found by reading batch headers only, so the record bytes can be sent
        from the file (os.sendfile) without passing through Python."""
        size = self.size
        scan = _HeaderScan(self.fd, size)
        p = self._start_hints.get(offset, -1)
        if p < 0 or (h := scan.header(p, _FIRST_HEADER)) is None or h[0] != offset:
            p = self.offset_index.lookup(offset)[1]  # no hint, or one that does not hold (see _start_hints)
        while True:
            h = scan.header(p, _FIRST_HEADER)
            if h is None:
                return None
            base, length, delta = h
            if base + delta >= offset:
                break
            p += length + rb.LOG_OVERHEAD
        first_base, first_len = base, length
        if max_offset is not None and first_base >= max_offset:
            return p, 0, first_base
        limit = p + max_bytes
        q = p
        while True:
            e = q + length + rb.LOG_OVERHEAD
            if e > limit or e > size:
                break
            q = e
            h = scan.header(q, rb.LOG_OVERHEAD)
            if h is None:
                break
            base, length, _ = h
            if max_offset is not None and base >= max_offset:
                break
        if q == p:
            return p, (first_len + rb.LOG_OVERHEAD if min_one_batch else 0), first_base
        return p, q - p, first_base

    def iter_from(self, offset: int, end_offset: int | None = None) -> Iterator[tuple[rb.BatchHeader, memoryview]]:
        """Batches whose last offset >= offset and base offset < end_offset, header positions absolute."""
        header = self.find_position(offset)
        if header is None:
            return
        for h, data in scan_batches(self.fd, header.position, self.size):
            if end_offset is not None and h.base_offset >= end_offset:
                return
            yield h, data

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with ts >= timestamp and offset >= starting_offset."""
        _, ts_offset = self.time_index.lookup(timestamp)
        for h, data in self.iter_from(max(ts_offset, starting_offset)):
            if h.max_timestamp >= timestamp and h.last_offset >= starting_offset:
                log_append = h.timestamp_type == 1
                for rec in rb.decode_records(data):
                    ts = h.max_timestamp if log_append else rec.timestamp
                    if ts >= timestamp and rec.offset >= starting_offset:
                        return rec.offset, ts
        return None

    def max_timestamp_record(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record carrying this segment's max timestamp."""
        if self.max_timestamp < 0:
            return None
        target = self.max_timestamp
        for h, data in self.iter_from(self.offset_index.lookup(self.offset_of_max_timestamp)[0]):
            if h.max_timestamp == target:
                if h.timestamp_type == 1:
                    recs = rb.decode_records(data)
                    return target, recs[0].offset if recs else h.base_offset
                for rec in rb.decode_records(data):
                    if rec.timestamp == target:
                        return target, rec.offset
                return target, h.last_offset
        return None

    def largest_timestamp(self) -> int:
        """For retention.ms: the max record timestamp, or the file mtime when there is none."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        try:
            return int(os.fstat(self.fd).st_mtime * 1000)
        except OSError:
            return 0

    def read_next_offset(self) -> int:
        if self.next_offset is None:
            self.load_tail()
        return self.next_offset  # type: ignore[return-value]

    # --- transactions -----------------------------------------------------------------------

    def add_aborted_txn(self, txn: AbortedTxn) -> None:
        self.txn_index.append(txn)

    # --- truncation / lifecycle ----------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset >= offset (the batch containing it included);
        returns bytes removed. Indexes are rebuilt from the remaining data."""
        header = self.find_position(offset)
        if header is None:
            return 0
        removed = self.size - header.position
        self._start_hints.clear()
        os.ftruncate(self.fd, header.position)
        self.size = header.position
        self.recover(check=False)
        self.txn_index.truncate_to(offset)
        return removed

    def on_become_inactive(self) -> None:
        """Like Kafka on roll: final time-index entry, index files written out; blocks reserved
        past the end freed."""
        self.trim_preallocation()
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.offset_index.flush()
        self.time_index.flush()

    def prepare_flush(self) -> SegmentSync | None:
        """Loop side of a flush: write pending index entries (plain writes, as on roll), mark the
        segment clean and capture what the fsync needs; None if the segment is closed. Clearing
        ``dirty`` here, before the fsync, is what keeps a write made while the fsync runs from
        being lost: it marks the segment dirty again for the next flush."""
        if self.closed:
            return None
        self.offset_index.flush()
        self.time_index.flush()
        self.dirty = False
        return SegmentSync(self, self.fd, (self.offset_index.path, self.time_index.path, self.txn_index.path))

    def flush(self) -> None:
        """fsync the log and its indexes in the calling thread (blocking)."""
        sync = self.prepare_flush()
        if sync is not None:
            sync.sync()

    def close(self) -> None:
        if self.closed:
            return
        self.trim_preallocation()
        if self.offset_index.loaded:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.offset_index.flush()
        self.time_index.flush()
        self.closed = True
        os.close(self.fd)

    def close_fd(self) -> None:
        if not self.closed:
            if self.prealloc is not None:
                self.prealloc.stop()  # no reservation into a file at this path from now on
                self.prealloc = None
            self.closed = True
            os.close(self.fd)

    def all_paths(self) -> list[Path]:
        return [self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path]

    def change_suffix(self, new_suffix: str) -> None:
        """Rename every file of the segment from its current suffix to ``new_suffix``."""
        prefix = filename_prefix(self.base_offset)
        new_log = self.dir / (prefix + LOG_SUFFIX + new_suffix)
        os.replace(self.log_path, new_log)
        self.log_path = new_log
        self.offset_index.rename(self.dir / (prefix + INDEX_SUFFIX + new_suffix))
        self.time_index.rename(self.dir / (prefix + TIME_INDEX_SUFFIX + new_suffix))
        self.txn_index.rename(self.dir / (prefix + TXN_INDEX_SUFFIX + new_suffix))
        self.suffix = new_suffix

    def delete_files(self, *, background: bool = False) -> None:
        """Close and remove the segment's files; with ``background`` the unlinks run on the
        write-behind thread (storage.write_behind.unlink), not in the caller."""
        self.close_fd()
        if background:
            write_behind.instance().unlink(self.all_paths())
            return
        write_behind.unlink_files(self.all_paths())

    def __repr__(self) -> str:
        return f"Segment(base={self.base_offset}, size={self.size}, path={self.log_path})"

    def __lt__(self, other: Segment) -> bool:
        return self.base_offset < other.base_offset


@dataclass(slots=True)
class SegmentSync:
    """The blocking half of a segment flush, captured on the loop by `Segment.prepare_flush`."""

    segment: Segment
    fd: int
    index_paths: tuple[Path, ...]

    def sync(self) -> None:
        """fsync the captured ``.log`` fd and index files. Reads no segment state but ``closed``,
        so it may run in an executor while the loop keeps using the segment."""
        try:
            os.fsync(self.fd)
        except OSError:
            # Closed meanwhile (retention, topic deletion): EBADF, or EINVAL once the number was
            # reused by a socket. Deleted data needs no fsync (and the broker lets flushes in
            # flight finish before closing logs at shutdown).
            if not self.segment.closed:
                raise
        for path in self.index_paths:
            fsync_file(path)
