"""What a broker of many partitions must not do per partition (issue 31, scale): rewrite files that
did not change at a restart or a stop, create files nobody needs, or walk every partition to place a
new one. Each test checks the files on disk, so a regression shows as a file rewritten or created."""

from __future__ import annotations

import os
from pathlib import Path

from storage import batch as rb
from storage.checkpoints import LeaderEpochCheckpointFile
from storage.log import Log
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.producer_state import ProducerStateManager


def _open(d: Path, **kw) -> Log:  # noqa: ANN003
    return Log.open(d, LogConfig(), producer_state=ProducerStateManager(d), **kw)


def _inode(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns


def test_restarting_an_empty_partition_rewrites_nothing(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    lg = _open(d)
    lg.assign_leader_epoch(0, 0)  # what a new partition's leader does
    lg.close()
    epochs = d / "leader-epoch-checkpoint"
    before = {p.name: _inode(p) for p in d.iterdir()}
    assert not [p for p in before if p.endswith(".snapshot")]  # nothing to keep for an empty log
    lg = _open(d, clean_shutdown=True)
    lg.assign_leader_epoch(0, 0)  # load truncated the epoch at the log end; the leader takes it again
    lg.close()
    assert {p.name: _inode(p) for p in d.iterdir()} == before
    assert LeaderEpochCheckpointFile(epochs).read() == [(0, 0)]


def test_a_close_with_nothing_appended_writes_no_new_snapshot(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    lg = _open(d)
    buf = bytearray(rb.build_batch([(b"k", b"v")], producer_id=7, producer_epoch=0, base_sequence=0))
    lg.append(buf, list(rb.iter_headers(buf)), leader_epoch=0, now_ms=1)
    lg.producer_state.update_from_log(next(rb.iter_headers(buf)))
    lg.close()
    snapshots = sorted(d.glob("*.snapshot"))
    assert [p.name for p in snapshots] == ["00000000000000000001.snapshot"]
    stamp = _inode(snapshots[0])
    lg = _open(d, clean_shutdown=True)
    assert lg.producer_state.last_entry(7) is not None  # loaded from it
    lg.close()
    assert _inode(snapshots[0]) == stamp  # the same file: not written again


def test_new_partitions_are_spread_over_log_dirs_by_count(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        d.mkdir()
    lm = LogManager(dirs, LogConfig())
    lm.startup()
    planned = lm.reserve_dirs("t", range(6))
    assert [p.parent.name for _, p in planned].count("a") == 3
    for p, _ in planned[:2]:
        lm.release_dirs("t", [p])
    more = lm.reserve_dirs("u", range(2))  # the two released places went back to their dir's count
    counts = {d.name: 0 for d in dirs}
    for _, p in planned[2:] + more:
        counts[p.parent.name] += 1
    assert counts == {"a": 3, "b": 3}
    lm.shutdown()


def test_no_txnindex_file_until_an_aborted_transaction(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    lg = _open(d)
    lg.close()
    assert not list(d.glob("*.txnindex"))
    assert os.listdir(d)  # the segment files and checkpoints are there
