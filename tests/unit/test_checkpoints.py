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
from storage.log_manager import LogManager


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
    # Kafka's LeaderEpochFileCache.endOffsetFor: above the latest epoch nothing is known; below
    # the first entry the requested epoch ends where the first entry starts.
    assert lg.end_offset_for_epoch(9) == (-1, -1)
    assert lg.end_offset_for_epoch(-1) == (-1, -1)
    lg.truncate_to(6)
    assert lg.log_end_offset == 6
    assert lg.leader_epoch_entries == [(0, 0), (2, 3)]
    lg.delete_records_before(4)
    assert lg.leader_epoch_entries == [(2, 4)]
    assert lg.end_offset_for_epoch(1) == (1, 4)
    lg.close()
    lg = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200), clean_shutdown=True, log_start_offset=4)
    assert lg.leader_epoch_entries == [(2, 4)]
    assert lg.latest_epoch == 2


def test_log_start_offset_checkpoint_exact_bytes(tmp_path: Path) -> None:
    """The bytes LogManager writes to ``log-start-offset-checkpoint``, pinned exactly.

    Like Kafka's LogManager.checkpointLogStartOffsetsInDir, only logs whose start offset moved past
    their first segment's base offset are recorded; kbroker writes them sorted by (topic, partition),
    with the partition compared as a number.
    """
    log_dir = tmp_path / "logs"
    path = log_dir / "log-start-offset-checkpoint"
    mgr = LogManager([log_dir], LogConfig())
    mgr.startup()
    untouched = mgr.get_or_create_log("t", 0, LogConfig())
    _append(untouched, 0, 3)
    mid_segment = {p: mgr.get_or_create_log("t", p, LogConfig()) for p in (10, 2)}
    for lg in mid_segment.values():
        _append(lg, 0, 4)
    mid_segment[10].delete_records_before(3)
    mid_segment[2].delete_records_before(1)
    dotted = mgr.get_or_create_log("a.b-c", 7, LogConfig())
    _append(dotted, 0, 5)
    dotted.delete_records_before(5)  # the whole log: start == end, still inside the only segment
    # Start offset moved exactly onto a segment boundary: the older segment is gone, so the start
    # offset equals the first segment's base offset and Kafka leaves the partition out.
    boundary = mgr.get_or_create_log("b", 0, LogConfig())
    _append(boundary, 0, 2)
    boundary.roll()
    _append(boundary, 0, 1)
    assert boundary.delete_records_before(2) == 2
    assert boundary.segments[0].base_offset == 2

    mgr.checkpoint()
    expected = b"0\n3\na.b-c 7 5\nt 2 1\nt 10 3\n"
    assert path.read_bytes() == expected
    mgr.shutdown()
    assert path.read_bytes() == expected
    assert not (log_dir / "log-start-offset-checkpoint.tmp").exists()

    # Read back at the next start-up: the start offsets survive.
    mgr2 = LogManager([log_dir], LogConfig())
    mgr2.startup()
    starts = {(t, p): mgr2.get_log(t, p).log_start_offset  # type: ignore[union-attr]
              for t, p in [("t", 0), ("t", 2), ("t", 10), ("a.b-c", 7), ("b", 0)]}
    assert starts == {("t", 0): 0, ("t", 2): 1, ("t", 10): 3, ("a.b-c", 7): 5, ("b", 0): 2}
    mgr2.shutdown()
    assert path.read_bytes() == expected


def test_log_start_offset_checkpoint_exact_bytes_when_nothing_moved(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    mgr = LogManager([log_dir], LogConfig())
    mgr.startup()
    _append(mgr.get_or_create_log("t", 0, LogConfig()), 0, 2)
    mgr.shutdown()
    assert (log_dir / "log-start-offset-checkpoint").read_bytes() == b"0\n0\n"
    assert (log_dir / "recovery-point-offset-checkpoint").read_bytes() == b"0\n1\nt 0 2\n"
