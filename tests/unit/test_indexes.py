"""Byte layout of .log/.index/.timeindex/.txnindex, read back raw with struct."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from storage import batch as rb
from storage.log import AbortedTxn, Log
from storage.log_config import LogConfig
from storage.offset_index import IndexCorruptError, OffsetIndex
from storage.time_index import TimeIndex
from storage.txn_index import TransactionIndex


def _append(lg: Log, n: int, ts: int) -> None:
    buf = bytearray(rb.build_batch([(b"k", b"v" * 40)] * n, timestamp_ms=ts))
    lg.append(buf, list(rb.iter_headers(buf)), leader_epoch=3, now_ms=ts)


def _batches(raw: bytes) -> list[tuple[int, int, int]]:
    """(position, baseOffset, lastOffset) of each batch in a .log file."""
    out, pos = [], 0
    while pos < len(raw):
        base, length = struct.unpack_from(">qi", raw, pos)
        (delta,) = struct.unpack_from(">i", raw, pos + 23)
        out.append((pos, base, base + delta))
        pos += 12 + length
    return out


@pytest.fixture
def tiny_log(tmp_path: Path) -> Path:
    lg = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=150, segment_bytes=1500))
    stamps = [100, 90, 300, 300, 250, 400, 410, 405, 500, 600, 50, 700]
    for ts in stamps:
        _append(lg, 2, ts)
    lg.add_aborted_txn(AbortedTxn(producer_id=77, first_offset=2, last_offset=9, last_stable_offset=2))
    lg.close()
    return tmp_path / "t-0"


def test_log_file_is_back_to_back_v2_batches(tiny_log: Path) -> None:
    names = sorted(p.name for p in tiny_log.glob("*.log"))
    assert names[0] == "00000000000000000000.log"
    expected_next = 0
    for name in names:
        raw = (tiny_log / name).read_bytes()
        assert int(name[:20]) == expected_next
        for pos, base, last in _batches(raw):
            assert base == expected_next
            assert raw[pos + 16] == 2  # magic
            assert struct.unpack_from(">i", raw, pos + 12)[0] == 3  # partitionLeaderEpoch
            expected_next = last + 1
    assert expected_next == 24


def test_offset_index_layout(tiny_log: Path) -> None:
    for logf in sorted(tiny_log.glob("*.log")):
        base = int(logf.name[:20])
        raw = logf.read_bytes()
        idx = (tiny_log / f"{logf.name[:20]}.index").read_bytes()
        assert len(idx) % 8 == 0  # trimmed: exactly entries * 8
        entries = list(struct.iter_unpack(">ii", idx))
        expected, last = [], 0
        for pos, _, lastoff in _batches(raw):
            if pos - last > 150:
                expected.append((lastoff - base, pos))
                last = pos
        assert entries == expected


def test_time_index_layout(tiny_log: Path) -> None:
    for logf in sorted(tiny_log.glob("*.log")):
        base = int(logf.name[:20])
        raw = logf.read_bytes()
        tidx = (tiny_log / f"{logf.name[:20]}.timeindex").read_bytes()
        assert len(tidx) % 12 == 0
        entries = list(struct.iter_unpack(">qi", tidx))
        # expected: Kafka's rule, plus the final max-timestamp entry written on roll/close
        expected, last, max_ts, max_off = [], 0, -1, base
        for pos, _, lastoff in _batches(raw):
            ts = struct.unpack_from(">q", raw, pos + 35)[0]
            if ts > max_ts:
                max_ts, max_off = ts, lastoff
            if pos - last > 150:
                if not expected or max_ts > expected[-1][0]:
                    expected.append((max_ts, max_off - base))
                last = pos
        if not expected or max_ts > expected[-1][0]:
            expected.append((max_ts, max_off - base))
        assert entries == expected
        assert all(a[0] < b[0] and a[1] <= b[1] for a, b in zip(entries, entries[1:], strict=False))


def test_txn_index_layout(tiny_log: Path) -> None:
    # offset 9 lives in the first segment
    raw = (tiny_log / "00000000000000000000.txnindex").read_bytes()
    assert len(raw) == 34
    assert struct.unpack(">hqqqq", raw) == (0, 77, 2, 9, 2)
    lg = Log.open(tiny_log, LogConfig(index_interval_bytes=150, segment_bytes=1500), clean_shutdown=True)
    assert lg.collect_aborted_txns(0, 100) == [AbortedTxn(77, 2, 9, 2)]
    assert lg.collect_aborted_txns(10, 100) == []
    assert lg.collect_aborted_txns(0, 2) == []


def test_collect_aborted_spans_segments(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=400))
    for i in range(30):
        _append(lg, 1, i)
    assert len(lg.segments) > 3
    t1 = AbortedTxn(1, 0, 3, 0)
    t2 = AbortedTxn(2, 1, 20, 0)  # marker far away in a later segment, started early
    t3 = AbortedTxn(3, 25, 27, 25)
    for t in (t1, t2, t3):
        lg.add_aborted_txn(t)
    assert lg.collect_aborted_txns(0, 5) == [t1, t2]
    assert lg.collect_aborted_txns(5, 10) == [t2]
    assert lg.collect_aborted_txns(21, 30) == [t3]


def test_index_classes_roundtrip_and_sanity(tmp_path: Path) -> None:
    oi = OffsetIndex(tmp_path / "a.index", 100, 1024, new=True)
    oi.append(105, 0)
    oi.append(110, 4000)
    oi.flush()
    assert (tmp_path / "a.index").read_bytes() == struct.pack(">iiii", 5, 0, 10, 4000)
    assert oi.lookup(104) == (100, 0) and oi.lookup(107) == (105, 0) and oi.lookup(999) == (110, 4000)
    oi2 = OffsetIndex(tmp_path / "a.index", 100, 1024)
    assert oi2.entries() == [(105, 0), (110, 4000)]
    oi2.truncate_to(110)
    assert (tmp_path / "a.index").read_bytes() == struct.pack(">ii", 5, 0)

    ti = TimeIndex(tmp_path / "a.timeindex", 100, 1024, new=True)
    ti.maybe_append(50, 101)
    ti.maybe_append(40, 102)  # not larger: ignored
    ti.maybe_append(60, 102)
    ti.flush()
    assert (tmp_path / "a.timeindex").read_bytes() == struct.pack(">qiqi", 50, 1, 60, 2)
    assert ti.lookup(55) == (50, 101) and ti.lookup(10) == (-1, 100)

    # corrupt: size not a multiple, decreasing entries
    (tmp_path / "b.index").write_bytes(b"\0" * 7)
    with pytest.raises(IndexCorruptError):
        OffsetIndex(tmp_path / "b.index", 0, 1024).load()
    (tmp_path / "c.index").write_bytes(struct.pack(">iiii", 5, 10, 3, 20))
    with pytest.raises(IndexCorruptError):
        OffsetIndex(tmp_path / "c.index", 0, 1024).load()
    (tmp_path / "c.timeindex").write_bytes(struct.pack(">qiqi", 9, 1, 5, 2))
    with pytest.raises(IndexCorruptError):
        TimeIndex(tmp_path / "c.timeindex", 0, 1024).load()
    (tmp_path / "d.index").write_bytes(struct.pack(">ii", 5, 5000))
    with pytest.raises(IndexCorruptError):
        OffsetIndex(tmp_path / "d.index", 0, 1024).check_against_log(100)

    tx = TransactionIndex(tmp_path / "a.txnindex", 0, new=True)
    tx.append(AbortedTxn(1, 2, 3, 4))
    tx.append(AbortedTxn(5, 6, 7, 8))
    assert TransactionIndex(tmp_path / "a.txnindex", 0).entries == [AbortedTxn(1, 2, 3, 4), AbortedTxn(5, 6, 7, 8)]
    tx.truncate_to(7)
    assert (tmp_path / "a.txnindex").read_bytes() == struct.pack(">hqqqq", 0, 1, 2, 3, 4)
