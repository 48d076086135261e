"""A log append that fails part way because the disk is full (issue 28): nothing partial stays in the
segment, the failure is reported as a failure of the log dir (storage/dir_failure.py, what the broker
halts on), and once there is space again the log goes on and reopens with exactly the batches that
were appended. The log lives on a real, small tmpfs that a filler file fills (root only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage import batch as rb
from storage import dir_failure
from storage.log import Log
from storage.log_config import LogConfig
from tests.helpers.small_disk import SmallDisk, available_reason

pytestmark = pytest.mark.skipif(available_reason() is not None, reason=str(available_reason()))


def batch(i: int, size: int) -> tuple[bytearray, list[rb.BatchHeader]]:
    buf = bytearray(rb.build_batch([(b"k", b"%08d" % i + b"x" * size)], timestamp_ms=1000 + i))
    return buf, list(rb.iter_headers(buf))


def values(lg: Log) -> list[bytes]:
    out = []
    for _h, data in lg.iter_batches(0):
        for rec in rb.decode_records(data):
            out.append(bytes(rec.value)[:8])
    return out


@pytest.fixture
def disk(tmp_path: Path):
    with SmallDisk(tmp_path / "disk", 4) as d:
        yield d


@pytest.fixture
def reported():
    seen: list[tuple[Path, OSError]] = []
    dir_failure.set_handler(lambda d, e: seen.append((d, e)))
    yield seen
    dir_failure.set_handler(None)


def test_append_on_a_full_disk_leaves_nothing_partial(disk: SmallDisk, reported: list) -> None:
    cfg = LogConfig(segment_bytes=64 * 1024 * 1024, index_interval_bytes=4096)
    lg = Log.open(disk.data_dir / "t-0", cfg, clean_shutdown=True)
    for i in range(20):
        buf, hs = batch(i, 1000)
        lg.append(buf, hs, leader_epoch=0, now_ms=10_000)
    seg = lg.active_segment
    size, end = seg.size, lg.log_end_offset
    disk.fill()
    # Whatever little the filler left may take part of a batch: the append must take it back.
    buf, hs = batch(20, 200_000)
    with pytest.raises(OSError):
        lg.append(buf, hs, leader_epoch=0, now_ms=10_000)
    assert (lg.log_end_offset, seg.size) == (end, size)
    assert seg.log_path.stat().st_size == size, "bytes of the failed batch were left in the segment"
    assert reported and reported[0][0] == disk.data_dir, "the failure was not reported as a log dir failure"

    disk.free()
    for i in range(21, 25):
        buf, hs = batch(i, 1000)
        lg.append(buf, hs, leader_epoch=0, now_ms=10_000)
    expected = [b"%08d" % i for i in [*range(20), *range(21, 25)]]
    assert values(lg) == expected
    lg.close()
    reopened = Log.open(disk.data_dir / "t-0", cfg, recovery_point=0, clean_shutdown=False)
    assert values(reopened) == expected
    assert reopened.log_end_offset == 24
    reopened.close()
