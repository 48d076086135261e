"""Log.read(zero_copy=True): a FileSlice names exactly the batches a copying read returns.

The zero-copy read finds its range from batch headers alone (Segment.read_range); the fetch path
sends the slice with os.sendfile. These tests pin that the slice's bytes equal the copying read's for
every start offset, byte limit, upper offset (high watermark / last stable offset) and minimum-one-
batch setting, across segment rolls, with batches from tiny to larger than the limits, and that a
slice whose segment was closed or whose log was truncated refuses to be read instead of returning
other bytes.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from storage import batch as rb
from storage import log as log_mod
from storage.log import FileSlice, Log, SliceGoneError
from storage.log_config import LogConfig


def _append(lg: Log, n: int, value_size: int) -> None:
    buf = bytearray(rb.build_batch([(None, b"x" * value_size)] * n, timestamp_ms=1000))
    lg.append(buf, list(rb.iter_headers(buf)), leader_epoch=0, now_ms=10_000)


def _bytes(res: log_mod.ReadResult) -> bytes:
    return b"".join(c.read() if isinstance(c, FileSlice) else bytes(c) for c in res.chunks)


@pytest.fixture
def small_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    # Small segments in the test: let ranges from 1 KiB on take the zero-copy path.
    monkeypatch.setattr(log_mod, "ZERO_COPY_MIN_BYTES", 1024)


def _filled_log(path: Path, rnd: random.Random, segment_bytes: int) -> Log:
    lg = Log.open(path, LogConfig(segment_bytes=segment_bytes, index_interval_bytes=512))
    for _ in range(120):
        # mostly small batches, some far above the scan window and the byte limits used below
        kind = rnd.random()
        if kind < 0.6:
            _append(lg, rnd.randint(1, 5), rnd.randint(10, 300))
        elif kind < 0.9:
            _append(lg, rnd.randint(1, 20), rnd.randint(500, 2000))
        else:
            _append(lg, rnd.randint(20, 40), 2000)  # 40-80 KB: header-only scan steps
    return lg


@pytest.mark.parametrize("seed", range(4))
def test_slice_bytes_equal_copying_read(tmp_path: Path, small_threshold: None, seed: int) -> None:
    rnd = random.Random(seed)
    lg = _filled_log(tmp_path / "t-0", rnd, segment_bytes=rnd.choice([50_000, 200_000, 10_000_000]))
    try:
        assert len(lg.segments) >= 1
        leo = lg.log_end_offset
        slices = 0
        for _ in range(400):
            start = rnd.randrange(leo)
            max_bytes = rnd.choice([0, 100, 1500, 5000, 20_000, 70_000, 300_000, 10_000_000])
            upper = rnd.choice([None, None, rnd.randint(start, leo)])
            one = rnd.random() < 0.7
            copied = lg.read(start, max_bytes, max_offset=upper, min_one_batch=one)
            zc = lg.read(start, max_bytes, max_offset=upper, min_one_batch=one, zero_copy=True)
            slices += any(isinstance(c, FileSlice) for c in zc.chunks)
            assert _bytes(zc) == _bytes(copied), (start, max_bytes, upper, one)
            assert (zc.size, zc.first_offset) == (copied.size, copied.first_offset)
        assert slices > 50  # the zero-copy path was really taken
    finally:
        lg.close()


def test_slice_of_truncated_log_is_refused(tmp_path: Path, small_threshold: None) -> None:
    lg = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=10_000_000))
    try:
        for _ in range(5):
            _append(lg, 10, 1000)
        res = lg.read(0, 1 << 20, zero_copy=True)
        (sl,) = res.chunks
        assert isinstance(sl, FileSlice) and len(sl) == res.size
        assert sl.read() == _bytes(lg.read(0, 1 << 20))
        lg.truncate_to(20)
        _append(lg, 10, 1000)  # the same positions now hold another batch
        with pytest.raises(SliceGoneError):
            sl.read()
        with pytest.raises(SliceGoneError):
            sl.fd()
    finally:
        lg.close()


def test_slice_of_closed_segment_is_refused(tmp_path: Path, small_threshold: None) -> None:
    lg = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=10_000_000))
    for _ in range(3):
        _append(lg, 10, 1000)
    (sl,) = lg.read(0, 1 << 20, zero_copy=True).chunks
    assert isinstance(sl, FileSlice)
    lg.close()
    with pytest.raises(SliceGoneError):
        sl.fd()


def test_small_reads_stay_copies(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=10_000_000))
    try:
        for _ in range(3):
            _append(lg, 2, 100)
        res = lg.read(0, 1 << 20, zero_copy=True)
        assert not any(isinstance(c, FileSlice) for c in res.chunks)
        assert _bytes(res) == _bytes(lg.read(0, 1 << 20))
    finally:
        lg.close()


@pytest.mark.parametrize("zero_copy", [False, True])
def test_zero_byte_read_past_large_batches(tmp_path: Path, zero_copy: bool) -> None:
    """A fetch whose response limit is used up reads its next partition with max_bytes 0: the
    copying read failed (struct.error, the connection closed) when the start batch lay beyond its
    first buffer: large batches, the index entry below the start one whole batch before it."""
    lg = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=10_000_000))
    try:
        for _ in range(3):
            _append(lg, 100, 1000)  # ~100 KB batches of 100 records
        assert lg.read(250, 0, min_one_batch=False, zero_copy=zero_copy).size == 0
        one = lg.read(250, 0, min_one_batch=True, zero_copy=zero_copy)
        assert one.first_offset == 200 and _bytes(one) == _bytes(lg.read(200, 150_000))
    finally:
        lg.close()
