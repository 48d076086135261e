"""retention.ms, retention.bytes, DeleteRecords (log start offset) and delayed file deletion."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage import batch as rb
from storage import write_behind
from storage.log import Log, OffsetOutOfRangeError
from storage.log_config import LogConfig
from storage.log_manager import LogManager


def _append(lg: Log, ts: int, n: int = 2) -> None:
    buf = bytearray(rb.build_batch([(b"k", b"v" * 60)] * n, timestamp_ms=ts))
    lg.append(buf, list(rb.iter_headers(buf)), leader_epoch=0, now_ms=ts)


def _cfg(**kw: object) -> LogConfig:
    base = {"segment_bytes": 1000, "index_interval_bytes": 200, "file_delete_delay_ms": 0}
    base.update(kw)
    return LogConfig(**base)  # type: ignore[arg-type]


def _segment_files(d: Path) -> list[str]:
    return sorted(p.name for p in d.glob("*.log"))


def test_retention_ms(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", _cfg(retention_ms=10_000))
    for i in range(30):
        _append(lg, ts=1000 * i)  # 0 .. 29 s
    nseg = len(lg.segments)
    assert nseg > 4
    maxes = [s.max_timestamp for s in lg.segments]
    now = 20_000
    expected = 0
    for m in maxes[:-1]:
        if now - m > 10_000:
            expected += 1
        else:
            break
    assert 0 < expected < nseg - 1
    assert lg.apply_retention(now) == expected
    assert len(lg.segments) == nseg - expected
    assert lg.log_start_offset == lg.segments[0].base_offset
    assert len(_segment_files(tmp_path / "t-0")) == nseg - expected
    # far future: everything but the active segment goes
    lg.apply_retention(10**12)
    assert len(lg.segments) == 1 and lg.log_start_offset == lg.segments[0].base_offset
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(0, 100)


def test_retention_forever_and_compact(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", _cfg(retention_ms=-1))
    for i in range(30):
        _append(lg, ts=i)
    n = len(lg.segments)
    assert lg.apply_retention(10**12) == 0
    lg.update_config(_cfg(retention_ms=1, cleanup_policy="compact"))
    assert lg.apply_retention(10**12) == 0 and len(lg.segments) == n
    lg.update_config(_cfg(retention_ms=1, cleanup_policy="compact,delete"))
    assert lg.apply_retention(10**12) == n - 1


def test_retention_bytes(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", _cfg(retention_ms=-1, retention_bytes=3000))
    for i in range(40):
        _append(lg, ts=i)
    sizes = [s.size for s in lg.segments]
    total = sum(sizes)
    diff, expected = total - 3000, 0
    for s in sizes[:-1]:
        if diff - s >= 0:
            diff -= s
            expected += 1
        else:
            break
    assert lg.apply_retention(0) == expected
    assert lg.size_in_bytes() >= 3000 - max(sizes)
    assert lg.size_in_bytes() <= 3000 + max(sizes)
    assert lg.apply_retention(0) == 0


def test_delete_records_before(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", _cfg())
    for i in range(30):
        _append(lg, ts=i)
    bases = [s.base_offset for s in lg.segments]
    target = bases[2] + 3
    assert lg.delete_records_before(target) == target
    assert lg.log_start_offset == target
    assert lg.segments[0].base_offset == bases[2]  # whole segments below only
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(target - 1, 100)
    assert lg.read(target, 100).first_offset == target - 1  # the batch holding target
    assert lg.offset_for_timestamp(0) == (target, (target - 1) // 2)
    assert lg.delete_records_before(5) == target  # never moves backwards
    with pytest.raises(OffsetOutOfRangeError):
        lg.delete_records_before(lg.log_end_offset + 1)
    lg.delete_records_before(lg.log_end_offset)
    assert len(lg.segments) == 1 and lg.read(lg.log_end_offset, 100).size == 0


def test_file_delete_delay(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    lg = Log.open(d, _cfg(retention_ms=0, file_delete_delay_ms=60_000))
    for i in range(20):
        _append(lg, ts=i)
    n = lg.apply_retention(1000)
    assert n > 0
    assert len(list(d.glob("*.log.deleted"))) == n
    assert lg.delete_expired_files(1000 + 59_999) == 0
    assert lg.delete_expired_files(1000 + 60_000) == n
    write_behind.instance().wait_idle()  # the unlinks run there, off the caller's thread
    assert not list(d.glob("*.deleted"))
    lg.close()


def test_expired_files_are_unlinked_off_the_calling_thread(tmp_path: Path) -> None:
    """Removing a deleted segment's files (which, on ext4 with discard, waits for the device) runs on
    the write-behind thread: delete_expired_files returns with the files closed and queued."""
    import threading

    d = tmp_path / "t-0"
    lg = Log.open(d, _cfg(retention_ms=0, file_delete_delay_ms=60_000))
    for i in range(20):
        _append(lg, ts=i)
    n = lg.apply_retention(1000)
    gate = threading.Event()
    wb = write_behind.instance()
    wb._put(gate.wait)  # hold the thread: nothing queued after this runs until the gate opens
    try:
        assert lg.delete_expired_files(1000 + 60_000) == n
        assert len(list(d.glob("*.log.deleted"))) == n  # not removed by the caller
    finally:
        gate.set()
    wb.wait_idle()
    assert not list(d.glob("*.deleted"))
    lg.close()


def test_deleted_files_removed_on_open(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    lg = Log.open(d, _cfg(retention_ms=0, file_delete_delay_ms=60_000))
    for i in range(20):
        _append(lg, ts=i)
    lg.apply_retention(1000)
    leo = lg.log_end_offset
    for s in lg.segments:
        s.close()
    assert list(d.glob("*.deleted"))
    lg = Log.open(d, _cfg(), clean_shutdown=True)
    assert not list(d.glob("*.deleted")) and lg.log_end_offset == leo
    lg.close()


def test_log_manager_retention_and_restart(tmp_path: Path) -> None:
    mgr = LogManager([tmp_path], _cfg(retention_ms=-1))
    mgr.startup()
    lg = mgr.get_or_create_log("t", 0, _cfg(retention_ms=-1))
    for i in range(30):
        _append(lg, ts=i)
    target = lg.segments[3].base_offset + 1
    lg.delete_records_before(target)
    assert mgr.apply_retention(0) == 0
    mgr.shutdown()
    mgr = LogManager([tmp_path], _cfg(retention_ms=-1))
    mgr.startup()
    lg2 = mgr.get_log("t", 0)
    assert lg2 is not None and lg2.log_start_offset == target
    mgr.shutdown()


def test_twenty_segments_of_one_mib(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "big-0", LogConfig(segment_bytes=1 << 20))
    buf0 = bytearray(rb.build_batch([(None, b"x" * 1024)] * 16, timestamp_ms=1))
    for _ in range(20 * 64):
        buf = bytearray(buf0)
        lg.append(buf, list(rb.iter_headers(buf, check=False)), leader_epoch=0, now_ms=1)
    lg.close()
    d = tmp_path / "big-0"
    stems = sorted(p.name[:-4] for p in d.glob("*.log"))
    assert len(stems) >= 20
    for stem in stems:
        assert len(stem) == 20 and stem.isdigit()
        assert (d / f"{stem}.index").stat().st_size % 8 == 0
        assert (d / f"{stem}.index").stat().st_size > 0
        assert (d / f"{stem}.timeindex").exists()
