"""Producer-id allocator: unique across restarts, block reserved durably before use."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

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
