"""A clean shutdown of many partitions makes them durable with one syncfs per log dir instead of
fsyncing every file of every partition (issue 31: a clean stop of 10,000 partitions), and a
syncfs that fails leaves the log dir marked unclean, so the next start recovers."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from storage import batch as rb
from storage import log_manager as lm_mod
from storage.checkpoints import (
    CLEAN_SHUTDOWN_FILE,
    RECOVERY_POINT_CHECKPOINT,
    FilesystemSync,
    OffsetCheckpointFile,
)
from storage.log_config import LogConfig
from storage.log_manager import LogManager

pytestmark = pytest.mark.skipif(not FilesystemSync.available(), reason="syncfs without error reports")

PARTITIONS = lm_mod._SYNCFS_MIN_LOGS + 6


def _filled(tmp_path: Path) -> LogManager:
    lm = LogManager([tmp_path], LogConfig())
    lm.startup()
    for p in range(PARTITIONS):
        lg = lm.get_or_create_log("t", p, LogConfig())
        lg.assign_leader_epoch(0, 0)
        for i in range(p % 3):  # some partitions empty, some with one or two batches
            buf = bytearray(rb.build_batch([(b"k%d" % i, b"v" * 100)]))
            lg.append(buf, list(rb.iter_headers(buf)), leader_epoch=0, now_ms=1)
    return lm


def test_a_shutdown_of_many_logs_syncs_the_filesystem_not_each_file(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    lm = _filled(tmp_path)
    calls = 0
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        nonlocal calls
        calls += 1
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    lm.shutdown()
    monkeypatch.undo()
    # The per-file path costs 4-5 fsyncs per partition; what is left are the checkpoint files and
    # the clean-shutdown marker of the one log dir.
    assert calls < 10, calls
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    points = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).read()
    assert points == {("t", p): p % 3 for p in range(PARTITIONS)}

    again = LogManager([tmp_path], LogConfig())
    again.startup()
    for p in range(PARTITIONS):
        lg = again.get_log("t", p)
        assert lg is not None
        assert lg.log_end_offset == p % 3
        assert lg.recovered_segments == 0  # loaded as cleanly shut down: nothing re-read
    again.shutdown()


def test_a_failed_syncfs_leaves_the_log_dir_marked_unclean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lm = _filled(tmp_path)
    lm.checkpoint()  # the recovery points on disk before the stop: all 0 (nothing flushed)
    before = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).read()

    def failing_sync(self: FilesystemSync) -> None:
        raise OSError(errno.EIO, f"syncfs of {self.path}: Input/output error")

    monkeypatch.setattr(FilesystemSync, "sync", failing_sync)
    lm.shutdown()
    monkeypatch.undo()
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    # The recovery points advanced in memory by the unsynced flushes were not written.
    assert OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).read() == before

    again = LogManager([tmp_path], LogConfig())
    again.startup()  # an unclean start: every log is recovered from its recovery point (0)
    assert sum(lg.recovered_segments for lg in again._logs.values()) > 0
    assert all(again.get_log("t", p).log_end_offset == p % 3 for p in range(PARTITIONS))
    again.shutdown()
