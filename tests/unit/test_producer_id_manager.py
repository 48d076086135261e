"""Producer-id allocator: unique across restarts, block reserved durably before use."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import coordinator.producer_id_manager as pid_module
from coordinator.producer_id_manager import ProducerIdManager


def test_ids_are_sequential_within_a_block(tmp_path: Path) -> None:
    m = ProducerIdManager(tmp_path / "pid-block")
    assert [m.generate() for _ in range(5)] == [0, 1, 2, 3, 4]
    assert m.current_block == (0, 999)


def test_unique_across_restarts(tmp_path: Path) -> None:
    f = tmp_path / "pid-block"
    seen: list[int] = []
    for per_run in (1, 1500, 999, 1000, 3, 2500):
        m = ProducerIdManager(f)  # a restart: nothing in memory carries over
        seen.extend(m.generate() for _ in range(per_run))
    assert len(seen) == len(set(seen)) == 1 + 1500 + 999 + 1000 + 3 + 2500
    assert seen == sorted(seen)


def test_block_is_persisted_before_first_id_escapes(tmp_path: Path) -> None:
    f = tmp_path / "pid-block"
    m = ProducerIdManager(f, block_size=10)
    first = m.generate()
    # simulate kill -9 right after the first id was handed out: only the file survives
    assert json.loads(f.read_text()) == {"version": 1, "block_start": 0, "block_end": 9}
    m2 = ProducerIdManager(f, block_size=10)
    assert m2.generate() == 10 > first
    for _ in range(9):
        m2.generate()
    assert m2.generate() == 20
    assert json.loads(f.read_text())["block_end"] == 29


def test_fsync_only_when_a_block_is_reserved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    m = ProducerIdManager(tmp_path / "pid-block", block_size=100)
    for _ in range(100):
        m.generate()
    per_block = len(calls)
    assert per_block >= 1
    m.generate()
    assert len(calls) == 2 * per_block


def test_leftover_tmp_is_ignored_and_no_tmp_remains(tmp_path: Path) -> None:
    f = tmp_path / "pid-block"
    (tmp_path / "pid-block.tmp").write_text("half-writ")
    m = ProducerIdManager(f)
    assert m.generate() == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pid-block"]


def test_unreadable_state_file_refuses_to_guess(tmp_path: Path) -> None:
    f = tmp_path / "pid-block"
    f.write_text("{not json")
    with pytest.raises(RuntimeError):
        ProducerIdManager(f)


def test_missing_parent_directory_is_created(tmp_path: Path) -> None:
    m = ProducerIdManager(tmp_path / "meta" / "pid-block")
    assert m.generate() == 0
    assert (tmp_path / "meta" / "pid-block").exists()


def _block_end(f: Path) -> int:
    try:
        return int(json.loads(f.read_text())["block_end"])
    except FileNotFoundError:
        return -1


async def _until(cond: Callable[[], bool]) -> None:
    for _ in range(3000):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in 30 s")


def test_next_block_is_prefetched_off_the_loop_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "pid-block"
    writers: list[threading.Thread] = []
    real = pid_module.atomic_write_bytes
    monkeypatch.setattr(pid_module, "atomic_write_bytes",
                        lambda *a, **kw: (writers.append(threading.current_thread()), real(*a, **kw))[1])

    async def run() -> list[int]:
        m = ProducerIdManager(f, block_size=10)
        m.prefetch()  # what the broker does at start
        # The file is written on the executor thread before the loop learns the block is ready:
        # wait for both, or generate() rightly reserves a block of its own.
        await _until(lambda: _block_end(f) == 9 and m._prefetching is None)
        ids = []
        for i in range(25):
            ids.append(m.generate())
            if i % 10 == 8:  # 90% used: the next block is on its way
                await _until(lambda i=i: _block_end(f) == (i // 10 + 2) * 10 - 1 and m._prefetching is None)
        return ids

    assert asyncio.run(run()) == list(range(25))
    assert len(writers) == 3 and threading.main_thread() not in writers  # 0-9, 10-19, 20-29
    assert ProducerIdManager(f, block_size=10).generate() == 30


def test_a_burst_past_a_slow_prefetch_never_lowers_the_persisted_block(tmp_path: Path) -> None:
    f = tmp_path / "pid-block"
    gate = threading.Event()

    async def run() -> list[int]:
        m = ProducerIdManager(f, block_size=10)
        real = m._persist

        def slow_off_loop(start: int, end: int) -> None:
            if threading.current_thread() is not threading.main_thread():
                gate.wait(5)
            real(start, end)

        m._persist = slow_off_loop  # type: ignore[method-assign]
        m.prefetch()  # claims 0-9, its write held back
        ids = [m.generate()]  # nothing ready: 10-19 reserved synchronously
        assert _block_end(f) == 19
        gate.set()
        await _until(lambda: m._prefetched == (0, 9))
        assert _block_end(f) == 19  # the late write of 0-9 did not lower it
        ids += [m.generate() for _ in range(19)]  # the rest of 10-19, then the prefetched 0-9
        return ids

    ids = asyncio.run(run())
    assert sorted(ids) == list(range(20))
    assert _block_end(f) == 29  # 90% into 0-9 the next block, 20-29, was prefetched
    assert ProducerIdManager(f, block_size=10).generate() == 30  # after a restart: nothing reused
