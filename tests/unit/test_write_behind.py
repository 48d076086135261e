"""storage.write_behind: segment appends hand their bytes over for writeback chunk by chunk, and
pages more than the cache window behind the segment's end leave the page cache once written."""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

import pytest

from storage import batch as rb
from storage import write_behind
from storage.log import Log
from storage.log_config import LogConfig

CHUNK = 64 * 1024
WINDOW = 256 * 1024
PAGE = mmap.PAGESIZE


@pytest.fixture
def small_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(write_behind, "CHUNK", CHUNK)
    monkeypatch.setattr(write_behind, "CACHE_WINDOW", WINDOW)


def append_kib(lg: Log, kib: int) -> None:
    value = os.urandom(1000)
    for _ in range(kib // 16):
        buf = bytearray(rb.build_batch([(None, value)] * 16, timestamp_ms=1))
        lg.append(buf, list(rb.iter_headers(buf)), leader_epoch=0, now_ms=10_000)


def resident_pages(path: Path) -> list[bool]:
    """Which pages of the file are in the page cache (mincore over a shared read-only mapping)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value)
        try:
            pages = (size + PAGE - 1) // PAGE
            vec = ctypes.create_string_buffer(pages)
            assert libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
            return [b & 1 == 1 for b in vec.raw[:pages]]
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def on_tmpfs(path: Path) -> bool:
    best, typ = "", ""
    with open("/proc/mounts") as f:
        for line in f:
            _, mnt, fs = line.split()[:3]
            if str(path).startswith(mnt.rstrip("/") + "/") and len(mnt) > len(best):
                best, typ = mnt, fs
    return typ in ("tmpfs", "ramfs")


@pytest.mark.skipif(not write_behind.instance().enabled, reason="no sync_file_range on this platform")
def test_appends_are_handed_over_and_old_pages_dropped(tmp_path: Path, small_window: None) -> None:
    lg = Log.open(tmp_path / "t-0", LogConfig())
    seg = lg.active_segment
    append_kib(lg, 1024)
    # Every CHUNK appended was handed over; everything more than WINDOW behind the end marked dropped.
    assert seg.size - seg.wb_pos < CHUNK
    assert seg.drop_pos > 0
    assert seg.size - WINDOW - CHUNK - PAGE <= seg.drop_pos <= seg.size - WINDOW
    write_behind.instance().wait_idle()
    if on_tmpfs(tmp_path):
        pytest.skip("tmpfs pages cannot leave the page cache")
    pages = resident_pages(seg.log_path)
    dropped = seg.drop_pos // PAGE
    cached = [i for i in range(dropped) if pages[i]]
    # Without write-behind all of them would be; a few pages re-dirtied or busy at the drop may stay.
    assert len(cached) <= dropped // 10, f"pages behind the window still cached: {cached} of {dropped}"
    assert all(pages[(seg.size - WINDOW) // PAGE + 1:]), "the window behind the end must stay cached"
    # The data is intact and still readable (from disk for the dropped part).
    first = lg.read(0, 1 << 20)
    assert first.first_offset == 0 and first.size > 0
    lg.close()


@pytest.mark.skipif(not write_behind.instance().enabled, reason="no sync_file_range on this platform")
def test_a_rolled_segments_tail_is_dropped_once_the_next_is_a_window_long(tmp_path: Path, small_window: None) -> None:
    lg = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=512 * 1024))
    append_kib(lg, 512 + 128)
    first = lg.segments[0]
    assert len(lg.segments) == 2 and lg.segments[1].predecessor_tail == (first.log_path, first.drop_pos, first.size)
    append_kib(lg, 320)  # the new active segment passes WINDOW: the first one's tail goes too
    assert lg.segments[1].predecessor_tail is None
    write_behind.instance().wait_idle()
    if on_tmpfs(tmp_path):
        pytest.skip("tmpfs pages cannot leave the page cache")
    pages = resident_pages(first.log_path)
    assert sum(pages) <= len(pages) // 10, f"{sum(pages)} of {len(pages)} pages of the rolled segment still cached"
    lg.close()


def test_loaded_segment_is_left_alone_and_truncation_rewinds(tmp_path: Path, small_window: None) -> None:
    lg = Log.open(tmp_path / "t-0", LogConfig())
    append_kib(lg, 512)
    lg.close()
    lg = Log.open(tmp_path / "t-0", LogConfig(), clean_shutdown=True)
    seg = lg.active_segment
    # Bytes written before the open are not handed over again (they may be old and long written).
    assert seg.wb_pos == seg.drop_pos == seg.size
    append_kib(lg, 16)
    lg.truncate_to(100)
    assert seg.wb_pos <= seg.size and seg.drop_pos <= seg.size
    append_kib(lg, 128)  # appends continue from the truncated end, handed over again
    assert seg.size - seg.wb_pos < CHUNK
    lg.close()


def test_a_file_gone_meanwhile_is_skipped(tmp_path: Path) -> None:
    wb = write_behind.WriteBehind()
    if not wb.enabled:
        pytest.skip("no sync_file_range on this platform")
    assert wb.submit(tmp_path / "renamed.log", 0, 1 << 20, 0, 1 << 20)
    f = tmp_path / "kept.log"
    f.write_bytes(b"x" * (3 * PAGE))
    assert wb.submit(f, 0, 3 * PAGE, PAGE // 2, 3 * PAGE)
    wb.wait_idle()
    assert wb.done == 2
    assert f.read_bytes() == b"x" * (3 * PAGE)



@pytest.mark.skipif(not write_behind.instance().enabled, reason="no sync_file_range on this platform")
def test_a_negative_cache_window_keeps_written_data_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kbroker.log.cache.window.bytes=-1: Kafka's behaviour, written data stays in the page cache;
    the writeback hints still run."""
    monkeypatch.setattr(write_behind, "CHUNK", CHUNK)
    write_behind.configure(-1)
    monkeypatch.setattr(write_behind, "CACHE_WINDOW", -1)  # restored after the test
    lg = Log.open(tmp_path / "t-0", LogConfig())
    seg = lg.active_segment
    append_kib(lg, 1024)
    assert seg.size - seg.wb_pos < CHUNK  # handed over for writeback
    assert seg.drop_pos == 0
    write_behind.instance().wait_idle()
    if not on_tmpfs(tmp_path):
        pages = resident_pages(seg.log_path)
        assert sum(pages) >= len(pages) * 9 // 10, f"only {sum(pages)} of {len(pages)} pages cached"
    lg.close()


# --- preallocation ahead (ext4) ---------------------------------------------------------------------

def reserved_past_end(path: Path) -> int:
    """Bytes of blocks the file holds past its size (rounded up to a page)."""
    st = path.stat()
    return st.st_blocks * 512 - -(-st.st_size // PAGE) * PAGE


needs_write_behind = pytest.mark.skipif(not write_behind.instance().enabled, reason="no sync_file_range on this platform")


@pytest.fixture
def ext4(tmp_path: Path) -> Path:
    if not write_behind.preallocates(tmp_path):
        pytest.skip("the test directory is not on ext4")
    return tmp_path


@needs_write_behind
def test_a_fast_filling_segment_reserves_blocks_ahead_and_a_roll_frees_them(
        ext4: Path, small_window: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(write_behind, "PREALLOCATE", True)
    lg = Log.open(ext4 / "t-0", LogConfig())
    seg = lg.active_segment
    append_kib(lg, 512)
    write_behind.instance().wait_idle()
    assert seg.prealloc is not None and seg.prealloc_end > seg.size
    # Blocks exist past the end, and the file's size is still exactly what was appended.
    assert reserved_past_end(seg.log_path) >= CHUNK
    assert seg.log_path.stat().st_size == seg.size
    before = seg.log_path.read_bytes()
    lg.roll()
    assert seg.prealloc is None
    assert reserved_past_end(seg.log_path) < CHUNK, "the roll must free the blocks reserved past the end"
    assert seg.log_path.stat().st_size == seg.size
    assert seg.log_path.read_bytes() == before
    append_kib(lg, 256)  # the new active segment reserves in its turn; close frees it
    write_behind.instance().wait_idle()
    active = lg.active_segment
    assert active is not seg and reserved_past_end(active.log_path) >= CHUNK
    lg.close()
    assert reserved_past_end(active.log_path) < CHUNK, "close must free the blocks reserved past the end"


@needs_write_behind
def test_a_slow_segment_and_a_switched_off_broker_reserve_nothing(
        ext4: Path, small_window: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(write_behind, "PREALLOC_FILL_S", 0.0)  # every chunk counts as slow
    lg = Log.open(ext4 / "slow-0", LogConfig())
    append_kib(lg, 512)
    write_behind.instance().wait_idle()
    assert lg.active_segment.prealloc is None and reserved_past_end(lg.active_segment.log_path) < CHUNK
    lg.close()
    monkeypatch.setattr(write_behind, "PREALLOC_FILL_S", 60.0)
    monkeypatch.setattr(write_behind, "PREALLOCATE", False)  # kbroker.log.preallocate.ahead=false
    lg = Log.open(ext4 / "off-0", LogConfig())
    append_kib(lg, 512)
    write_behind.instance().wait_idle()
    assert lg.active_segment.prealloc is None and reserved_past_end(lg.active_segment.log_path) < CHUNK
    lg.close()


@needs_write_behind
def test_a_reservation_left_by_a_crash_is_freed_when_the_log_loads(ext4: Path) -> None:
    lg = Log.open(ext4 / "t-0", LogConfig())
    append_kib(lg, 256)
    path = lg.active_segment.log_path
    data = path.read_bytes()
    lg.close()
    # What a broker killed while it was reserving leaves behind.
    write_behind.Preallocation().extend(path, 0, path.stat().st_size + (8 << 20))
    size = path.stat().st_size
    assert reserved_past_end(path) >= 8 << 20
    lg = Log.open(ext4 / "t-0", LogConfig())
    assert reserved_past_end(path) < 1 << 20 and path.stat().st_size == size
    assert path.read_bytes() == data and lg.log_end_offset == 256
    lg.close()


def test_a_stopped_preallocation_reserves_nothing_and_never_covers_appended_bytes(ext4: Path) -> None:
    f = ext4 / "seg.log"
    f.write_bytes(b"x" * (3 * PAGE))
    p = write_behind.Preallocation()
    p.extend(f, PAGE, 64 * PAGE)  # starts inside the data: only what lies past the end is reserved
    assert f.read_bytes() == b"x" * (3 * PAGE)
    assert reserved_past_end(f) >= 60 * PAGE
    os.truncate(f, 3 * PAGE)
    assert reserved_past_end(f) == 0
    p.stop()
    p.extend(f, 3 * PAGE, 64 * PAGE)
    assert reserved_past_end(f) == 0
    p.extend(ext4 / "gone.log", 0, 64 * PAGE)  # a file renamed or deleted meanwhile: nothing happens


def test_only_ext4_gets_reservations() -> None:
    shm = Path("/dev/shm")
    if shm.is_dir() and on_tmpfs(shm / "x"):
        assert not write_behind.preallocates(shm)
    assert not write_behind.preallocates(Path("/no/such/dir"))
