"""Text formats of Kafka's checkpoint files, the clean shutdown marker and leader epochs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from storage import batch as rb
from storage.checkpoints import (
    CheckpointError,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    has_clean_shutdown,
    read_clean_shutdown_epoch,
    write_clean_shutdown,
)
from storage.log import Log
from storage.log_config import LogConfig


def test_offset_checkpoint_format(tmp_path: Path) -> None:
    f = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")
    f.write({("a.b-c", 0): 10, ("t", 3): 7})
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n2\na.b-c 0 10\nt 3 7\n"
    assert f.read() == {("a.b-c", 0): 10, ("t", 3): 7}
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()
    f.write({})
    assert f.path.read_text() == "0\n0\n"
    assert OffsetCheckpointFile(tmp_path / "missing").read() == {}


def test_offset_checkpoint_malformed(tmp_path: Path) -> None:
    p = tmp_path / "cp"
    for text in ["1\n0\n", "0\n2\nt 0 1\n", "0\n1\nt 0\n", "0\n1\nt x 1\n", "0\n"]:
        p.write_text(text)
        with pytest.raises(CheckpointError):
            OffsetCheckpointFile(p).read()


def test_leader_epoch_checkpoint_format(tmp_path: Path) -> None:
    f = LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")
    f.write([(0, 0), (3, 120)])
    assert f.path.read_text() == "0\n2\n0 0\n3 120\n"
    assert f.read() == [(0, 0), (3, 120)]


def test_clean_shutdown_marker(tmp_path: Path) -> None:
    assert not has_clean_shutdown(tmp_path)
    write_clean_shutdown(tmp_path, 42)
    assert has_clean_shutdown(tmp_path)
    assert json.loads((tmp_path / ".kafka_cleanshutdown").read_text()) == {"version": 0, "brokerEpoch": 42}
    assert read_clean_shutdown_epoch(tmp_path) == 42


def _append(lg: Log, epoch: int, n: int = 1) -> None:
    buf = bytearray(rb.build_batch([(b"k", b"v")] * n))
    lg.append(buf, list(rb.iter_headers(buf)), leader_epoch=epoch, now_ms=1)


def test_log_leader_epochs(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200))
    _append(lg, 0, 2)
    _append(lg, 0)
    _append(lg, 2, 3)
    _append(lg, 5)
    assert lg.leader_epoch_entries == [(0, 0), (2, 3), (5, 6)]
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 3\n5 6\n"
    assert lg.end_offset_for_epoch(5) == (5, 7)
    assert lg.end_offset_for_epoch(2) == (2, 6)
    assert lg.end_offset_for_epoch(1) == (0, 3)
    assert lg.end_offset_for_epoch(9) == (5, 7)
    lg.truncate_to(6)
    assert lg.log_end_offset == 6
    assert lg.leader_epoch_entries == [(0, 0), (2, 3)]
    lg.delete_records_before(4)
    assert lg.leader_epoch_entries == [(2, 4)]
    lg.close()
    lg = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200), clean_shutdown=True, log_start_offset=4)
    assert lg.leader_epoch_entries == [(2, 4)]
    assert lg.latest_epoch == 2
