"""The benchmarks' page-cache ballast (benchmarks/lib_page_cache.py): it writes a file until the
memory the machine has free is down to a mark, never past the file system's room, and removes its
file when closed; where the kernel hands no freed memory back to a host, it writes nothing."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks")]

import lib_page_cache  # noqa: E402
from lib_page_cache import Ballast, mem_free_mb  # noqa: E402


def test_top_up_writes_what_is_free_above_the_mark_and_close_removes_it(tmp_path: Path, monkeypatch) -> None:
    # The file system's room is another test's subject: here only the memory mark may stop the
    # ballast (with 8 GiB kept free by default, a nearly full disk made it write nothing).
    monkeypatch.setattr(lib_page_cache, "DISK_RESERVE", 0)
    b = Ballast(tmp_path, keep_free_mb=max(mem_free_mb() - 96, 0), only_if_reporting=False)
    done = b.top_up(passes=1)
    # ~96 MB free above the mark (other processes move MemFree a little meanwhile).
    assert 64 <= done["written_mb"] <= 256
    assert b.path.stat().st_size == done["written_mb"] << 20 == b.size
    b.close()
    assert not b.path.exists() and b.size == 0


def test_a_benchmark_stopped_by_sigterm_removes_its_ballast(tmp_path: Path) -> None:
    """`timeout` stops a benchmark with SIGTERM: its `with` blocks must still remove the ballast."""
    script = (
        "import os, signal, sys, tempfile\n"
        f"sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
        "from lib_page_cache import Ballast\n"
        f"with tempfile.TemporaryDirectory(dir={str(tmp_path)!r}) as d, Ballast(d, only_if_reporting=False) as b:\n"
        "    b.path.write_bytes(b'x' * 4096)\n"
        "    print(b.path, flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    signal.pause()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    path = Path(proc.stdout.strip())
    assert path.name == "page-cache-ballast", proc.stderr
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert not path.exists() and list(tmp_path.iterdir()) == []


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
