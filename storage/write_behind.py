"""Write-behind for segment files: start the writeback of appended bytes early, in small steps, and
drop them from the page cache once they are on disk and a window behind the segment's end; and
remove the files of deleted segments, all on one daemon thread instead of the event loop.

Why (issue 32, benchmarks/results/disk_steady.md): appends are plain buffered ``os.write`` calls on
the event loop, and Kafka leaves the rest to the OS. Left alone, the page cache grows into memory
never used before, and on the benchmark VM a never-used (or returned-to-the-host) page costs a
hypervisor fault on first touch: the same ``write`` took 2-6x the kernel time per MB once the
cache grew (0.35-1.2 ms against 0.19-0.20 ms per MB; benchmarks/results/disk_steady.md), and the
dirty backlog built up to dirty_background_ratio (~2 GB) before the kernel flusher wrote it in
bursts. Writing back every CHUNK as it fills and dropping what lies more than CACHE_WINDOW behind
the end keeps the broker's cache footprint small and recycled, and the dirty backlog well below
the kernel's thresholds.

Durability is unchanged and stays Kafka's: no fsync on append. ``sync_file_range`` only starts (or
waits for) writeback and promises nothing; fsync at flush/roll remains what advances the recovery
point. The hints run on one daemon thread, never on the loop: the loop only queues (path, range)
work items, and the thread opens the file by path itself (its own open file description, so a
writeback error it sees is still reported by the segment's fsync), which also makes a segment
renamed, deleted or closed meanwhile harmless (the item is skipped). When the queue is full the
item is dropped: the kernel's flusher then does that range's writeback as it would without us.

Departure from Kafka: data more than CACHE_WINDOW behind a segment's end leaves the page cache
once written, so a consumer reading that far behind reads from disk (Kafka keeps it cached until
memory pressure evicts it). ``kbroker.log.cache.window.bytes=-1`` keeps Kafka's behaviour.

Preallocation ahead (ext4 only; ``kbroker.log.preallocate.ahead``): while a segment fills a CHUNK
in under PREALLOC_FILL_S, the thread also reserves the blocks of the next two chunks past its end
(``fallocate`` with FALLOC_FL_KEEP_SIZE: the file's size, and so every read, recovery and size
figure, is unchanged). An append then lands in blocks that exist, and ext4 skips its delayed-
allocation bookkeeping per page, the largest kernel cost of a one-node produce (perf: 27 % of the
broker's CPU in ``write``). Measured on this project's VM: 1 MiB writes with this write-behind cost
0.26 CPU-ms per MB without and 0.18 with (machine-wide 0.28-0.31 against 0.19-0.22, the
conversion of the reserved blocks at writeback included). The reservation is bounded: at most two
chunks per segment being written that fast, freed when the segment stops being the active one
(roll, close: `Segment` trims the file to its size) or when a broker that crashed loads it again.
"""

from __future__ import annotations

import ctypes
import logging
import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("storage.write_behind")

CHUNK = 8 << 20  # start writeback once this many appended bytes are not yet handed over
# Bytes behind a segment's end kept in the page cache; negative: written data is never dropped
# (Kafka's behaviour). Set once at broker start from kbroker.log.cache.window.bytes (configure).
CACHE_WINDOW = 256 << 20
PAGE = 4096  # page-cache granularity of the drops (segment.py aligns to it)

# Reserve blocks past a segment's end only while it fills a CHUNK at least this fast (8 MiB/s), so
# slow and idle partitions never hold reserved blocks. Set by configure().
PREALLOCATE = True
PREALLOC_FILL_S = 1.0

_SFR_WAIT_BEFORE, _SFR_WRITE, _SFR_WAIT_AFTER = 1, 2, 4
_FALLOC_FL_KEEP_SIZE = 1
_EXT4_SUPER_MAGIC = 0xEF53


def _libc_fn(name: str, argtypes: tuple) -> Any:
    """A libc function returning int, or None where this libc has none."""
    try:
        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn


def _sync_file_range() -> Any:
    return _libc_fn("sync_file_range", (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint))


_FALLOCATE = _libc_fn("fallocate", (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64))
_STATFS = _libc_fn("statfs", (ctypes.c_char_p, ctypes.c_char_p))
_FS_BY_DEV: dict[int, bool] = {}


def preallocates(dir: Path) -> bool:
    """Whether segments in ``dir`` get blocks reserved ahead: ext4 (its delayed allocation is what
    the reservation saves; XFS reserves ahead by itself, a copy-on-write file system should not,
    and on tmpfs a reservation would be memory). Cached per device."""
    try:
        dev = os.stat(dir).st_dev
    except OSError:
        return False
    known = _FS_BY_DEV.get(dev)
    if known is None:
        buf = ctypes.create_string_buffer(256)  # struct statfs; f_type is its first field (a long)
        known = (_FALLOCATE is not None and _STATFS is not None and _STATFS(os.fsencode(dir), buf) == 0
                 and int.from_bytes(buf.raw[:ctypes.sizeof(ctypes.c_long)], "little") == _EXT4_SUPER_MAGIC)
        _FS_BY_DEV[dev] = known
    return known


class Preallocation:
    """The blocks reserved past one segment's end while it is the active one. The loop `stop`s it
    before trimming the file; `extend` (on the thread) reserves nothing once stopped, and the two
    exclude each other, so nothing is reserved after the trim."""

    __slots__ = ("_lock", "stopped")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.stopped = False

    def stop(self) -> None:
        with self._lock:
            self.stopped = True

    def extend(self, path: Path, start: int, end: int) -> None:
        with self._lock:
            if self.stopped or _FALLOCATE is None:
                return
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            except OSError:
                return  # renamed or deleted meanwhile
            try:
                # Never over bytes already appended (the loop may have outrun this thread).
                start = max(start, os.fstat(fd).st_size)
                if end > start:
                    # A failure (no space, not supported) leaves the file as it was: appends then
                    # allocate as they would without this.
                    _FALLOCATE(fd, _FALLOC_FL_KEEP_SIZE, start, end - start)
            finally:
                os.close(fd)


class WriteBehind:
    """A bounded queue of writeback/drop work and the daemon thread that does it."""

    def __init__(self, maxsize: int = 1024) -> None:
        self._sfr = _sync_file_range()
        self.enabled = self._sfr is not None and hasattr(os, "posix_fadvise")
        self._queue: queue.Queue[Callable[[], None]] = queue.Queue(maxsize)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.skipped = 0  # items dropped because the queue was full
        self.done = 0  # items completed

    def submit(self, path: Path, write_start: int, write_end: int, drop_start: int = 0, drop_end: int = 0,
               prealloc: tuple[Preallocation, int, int] | None = None) -> bool:
        """Queue: start writeback of [write_start, write_end) of ``path``; reserve the blocks of
        ``prealloc``'s range past the file's end (unless stopped meanwhile); then wait for the
        writeback of [drop_start, drop_end) and drop it from the page cache. Never blocks; False
        when the item was not queued (disabled, or the queue is full)."""
        if not self.enabled:
            return False
        return self._put(lambda: self._do(path, write_start, write_end, drop_start, drop_end, prealloc))

    def unlink(self, paths: list[Path]) -> None:
        """Remove files off the loop: the unlink of a segment's last link frees its blocks, and on
        ext4 mounted with ``discard`` the unlinking thread then waits for the device's discards
        (seen as the event loop blocked in submit_bio_wait for up to 0.7 s while retention removed
        1 GiB segments). Done here when the queue is full, so a file is never left behind."""
        if not self._put(lambda: unlink_files(paths)):
            unlink_files(paths)

    def _put(self, job: Callable[[], None]) -> bool:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="write-behind", daemon=True)
                    self._thread.start()
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            self.skipped += 1
            return False
        return True

    def wait_idle(self) -> None:
        """Block until every queued item is done (tests)."""
        self._queue.join()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                job()
            except Exception:  # a hint failing must never stop the thread
                log.exception("write-behind job failed")
            finally:
                self.done += 1
                self._queue.task_done()

    def _do(self, path: Path, write_start: int, write_end: int, drop_start: int, drop_end: int,
            prealloc: tuple[Preallocation, int, int] | None = None) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return  # renamed (retention), deleted or its dir gone: nothing to help with
        try:
            sfr = self._sfr
            assert sfr is not None
            if write_end > write_start:
                sfr(fd, write_start, write_end - write_start, _SFR_WRITE)
            if prealloc is not None:
                prealloc[0].extend(path, prealloc[1], prealloc[2])
            # Whole pages only: a partial page at either end stays cached.
            start = -(-drop_start // PAGE) * PAGE
            end = drop_end // PAGE * PAGE
            if end > start:
                # Wait for that range to be on disk (it was handed over CACHE_WINDOW ago, so this
                # rarely waits), then drop it: only clean pages are dropped.
                sfr(fd, start, end - start, _SFR_WAIT_BEFORE | _SFR_WRITE | _SFR_WAIT_AFTER)
                os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def unlink_files(paths: list[Path]) -> None:
    """Remove ``paths``, skipping any already gone (used by foreground deletes and by the thread)."""
    for p in paths:
        try:
            p.unlink()
        except FileNotFoundError:
            pass


_INSTANCE = WriteBehind()


def configure(cache_window: int, preallocate_ahead: bool = True) -> None:
    """kbroker.log.cache.window.bytes: how much of a segment's written tail stays cached; < 0 never
    drops written data from the page cache (the writeback hints stay on).
    kbroker.log.preallocate.ahead: reserve blocks ahead of fast-filling segments (ext4)."""
    global CACHE_WINDOW, PREALLOCATE
    CACHE_WINDOW = cache_window
    PREALLOCATE = preallocate_ahead


def instance() -> WriteBehind:
    return _INSTANCE
