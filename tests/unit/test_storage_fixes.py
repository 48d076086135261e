"""Regression tests for storage bugs found by the end-to-end storage tests (issue 3)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from storage import batch as rb
from storage.log import Log
from storage.log_config import LogConfig

CFG = LogConfig(segment_bytes=1200, index_interval_bytes=200)


def _append(lg: Log, n: int = 2, ts: int = 1000) -> None:
    buf = bytearray(rb.build_batch([(b"k", b"v" * 60)] * n, timestamp_ms=ts))
    lg.append(buf, list(rb.iter_headers(buf)), leader_epoch=1, now_ms=ts)


def test_torn_tail_after_clean_shutdown_is_truncated(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A clean shutdown skips recovery, but a torn last batch (file damaged while the broker was
    down) used to stay in the file: the log end offset ignored it, yet appends went after the
    garbage, so every later read stopped there. Loading the active segment now truncates it."""
    d = tmp_path / "t-0"
    lg = Log.open(d, CFG)
    for i in range(40):
        _append(lg, ts=1000 + i)
    leo = lg.log_end_offset
    last = lg.segments[-1].log_path
    lg.close()
    os.truncate(last, last.stat().st_size - 30)  # tear the last batch

    with caplog.at_level(logging.WARNING, logger="storage.log"):
        lg = Log.open(d, CFG, recovery_point=leo, clean_shutdown=True)
    assert lg.log_end_offset == leo - 2
    assert any("Truncated" in r.message and last.name in r.message for r in caplog.records)
    assert lg.active_segment.size == last.stat().st_size
    _append(lg, ts=2000)
    assert lg.log_end_offset == leo
    assert [h.base_offset for h, _ in lg.iter_batches(0)] == list(range(0, leo, 2))
    read = lg.read(leo - 2, 1 << 20)
    assert read.first_offset == leo - 2 and read.size > 0
    lg.close()


def test_log_loaded_at_startup_takes_the_topic_config(tmp_path: Path) -> None:
    """LogManager.startup opens every log with the default config; the broker then asks for each
    topic's log with the topic's config (cleanup.policy=compact, retention.ms, ...). That config
    used to be ignored for logs that already existed, so after a restart compaction, retention and
    roll settings silently reverted to the broker defaults."""
    from storage.log_manager import LogManager

    default = LogConfig()
    topic_cfg = LogConfig(segment_bytes=1200, index_interval_bytes=200, cleanup_policy="compact",
                          retention_ms=12345)
    mgr = LogManager([tmp_path], default)
    mgr.startup()
    lg = mgr.get_or_create_log("t", 0, topic_cfg)
    assert lg.config == topic_cfg
    _append(lg)
    mgr.shutdown()

    mgr = LogManager([tmp_path], default)
    mgr.startup()
    loaded = mgr.get_log("t", 0)
    assert loaded is not None and loaded.config == default  # nothing knows the topic's config yet
    lg = mgr.get_or_create_log("t", 0, topic_cfg)
    assert lg is loaded
    assert lg.config == topic_cfg and lg.config.compact_enabled and lg.config.retention_ms == 12345
    assert all(s.index_interval_bytes == 200 for s in lg.segments)
    mgr.shutdown()
