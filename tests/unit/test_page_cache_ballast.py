"""The benchmarks' page-cache ballast (benchmarks/lib_page_cache.py): it writes a file until the
memory the machine has free is down to a mark, never past the file system's room, and removes its
file when closed; where the kernel hands no freed memory back to a host, it writes nothing."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks")]

import lib_page_cache  # noqa: E402
from lib_page_cache import Ballast, mem_free_mb  # noqa: E402


def test_top_up_writes_what_is_free_above_the_mark_and_close_removes_it(tmp_path: Path) -> None:
    # ~96 MB free above the mark. Other processes move MemFree meanwhile (in a full test run, the
    # brokers of earlier tests still exiting: once, 96 MB went between the mark and the top-up, and
    # nothing was written), so up to 5 attempts, each with a mark taken afresh; each must clean up.
    written = []
    for _ in range(5):
        b = Ballast(tmp_path, keep_free_mb=max(mem_free_mb() - 96, 0), only_if_reporting=False)
        done = b.top_up(passes=1)
        written.append(done["written_mb"])
        if done["written_mb"]:
            assert b.path.stat().st_size == done["written_mb"] << 20 == b.size
        b.close()
        assert not b.path.exists() and b.size == 0
        if 64 <= done["written_mb"] <= 256:
            break
    assert 64 <= written[-1] <= 256, f"MB written per attempt: {written}"


def test_nothing_is_written_past_the_file_systems_room(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(lib_page_cache, "DISK_RESERVE", 1 << 60)
    with Ballast(tmp_path, keep_free_mb=0, only_if_reporting=False) as b:
        assert b.top_up()["written_mb"] == 0
        assert not b.path.exists()


def test_nothing_is_written_when_memory_is_already_below_the_mark(tmp_path: Path) -> None:
    with Ballast(tmp_path, keep_free_mb=mem_free_mb() + (1 << 20), only_if_reporting=False) as b:
        assert b.top_up()["written_mb"] == 0


def test_nothing_is_written_where_the_kernel_hands_no_memory_back(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(lib_page_cache, "REPORTING", tmp_path / "no-such-file")
    with Ballast(tmp_path, keep_free_mb=0) as b:
        assert not b.active
        assert b.top_up()["written_mb"] == 0
