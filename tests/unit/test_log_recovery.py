"""Recovery: torn tails, corrupt batches, lost/corrupt indexes, segment swaps, producer state replay."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from storage import batch as rb
from storage.log import AbortedTxn, Log
from storage.log_config import LogConfig
from storage.log_manager import LogManager

CFG = LogConfig(segment_bytes=1200, index_interval_bytes=200)


def _append(lg: Log, n: int = 2, ts: int = 1000, producer_id: int = -1) -> None:
    buf = bytearray(rb.build_batch([(b"k", b"v" * 60)] * n, timestamp_ms=ts, producer_id=producer_id,
                                   producer_epoch=0 if producer_id >= 0 else -1,
                                   base_sequence=0 if producer_id >= 0 else -1))
    lg.append(buf, list(rb.iter_headers(buf)), leader_epoch=1, now_ms=ts)


def _build(path: Path, batches: int = 40) -> Log:
    lg = Log.open(path, CFG)
    for i in range(batches):
        _append(lg, ts=1000 + i)
    return lg


def _all_offsets(lg: Log) -> list[int]:
    return [h.base_offset for h, _ in lg.iter_batches(lg.log_start_offset)]


def _snapshot_files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.suffix in (".index", ".timeindex")}


def test_torn_tail_is_truncated(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = tmp_path / "t-0"
    lg = _build(d)
    leo = lg.log_end_offset
    last = lg.segments[-1].log_path
    lg.close()
    size = last.stat().st_size
    os.truncate(last, size - 30)  # tear the last batch
    with caplog.at_level(logging.WARNING, logger="storage.log"):
        lg = Log.open(d, CFG, recovery_point=0, clean_shutdown=False)
    assert lg.log_end_offset == leo - 2
    assert any("Truncated" in r.message and last.name in r.message for r in caplog.records)
    assert _all_offsets(lg) == list(range(0, leo - 2, 2))
    _append(lg)
    assert lg.log_end_offset == leo
    lg.close()


def test_corrupt_batch_in_middle_drops_rest(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = tmp_path / "t-0"
    lg = _build(d)
    assert len(lg.segments) >= 4
    seg = lg.segments[1]
    base = seg.base_offset
    lg.close()
    raw = bytearray(seg.log_path.read_bytes())
    # flip a byte in the records of the third batch of the segment
    pos = 0
    for _ in range(2):
        pos += 12 + int.from_bytes(raw[pos + 8 : pos + 12], "big")
    raw[pos + 80] ^= 0xFF
    seg.log_path.write_bytes(raw)
    with caplog.at_level(logging.WARNING, logger="storage.log"):
        lg = Log.open(d, CFG, recovery_point=0)
    assert lg.log_end_offset == base + 4
    assert len(lg.segments) == 2
    assert any("CRC" in r.message for r in caplog.records)
    assert any("deleting segment" in r.message for r in caplog.records)
    assert sorted(p.name for p in d.glob("*.log")) == [f"{0:020d}.log", f"{base:020d}.log"]
    assert lg.read(base + 2, 10_000).first_offset == base + 2
    lg.close()


def test_recovery_point_limits_the_scan(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    lg = _build(d)
    first = lg.segments[0]
    rp = lg.segments[2].base_offset
    leo = lg.log_end_offset
    lg.close()
    raw = bytearray(first.log_path.read_bytes())
    raw[100] ^= 0xFF  # below the recovery point: trusted, like Kafka
    first.log_path.write_bytes(raw)
    lg = Log.open(d, CFG, recovery_point=rp)
    assert lg.log_end_offset == leo
    assert lg.recovery_point == rp
    lg.close()


def test_clean_shutdown_skips_scan(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    lg = _build(d)
    leo = lg.log_end_offset
    lg.close()
    lg = Log.open(d, CFG, clean_shutdown=True)
    assert lg.log_end_offset == leo and lg.recovery_point == leo
    lg.close()


@pytest.mark.parametrize("damage", ["delete_index", "delete_timeindex", "garbage_index", "torn_index",
                                    "decreasing_timeindex", "index_beyond_log"])
@pytest.mark.parametrize("clean", [True, False])
def test_lost_or_corrupt_indexes_are_rebuilt(tmp_path: Path, damage: str, clean: bool,
                                             caplog: pytest.LogCaptureFixture) -> None:
    d = tmp_path / "t-0"
    lg = _build(d)
    leo = lg.log_end_offset
    lg.close()
    before = _snapshot_files(d)
    name = sorted(d.glob("*.index"))[1]
    tname = name.with_suffix(".timeindex")
    if damage == "delete_index":
        name.unlink()
    elif damage == "delete_timeindex":
        tname.unlink()
    elif damage == "garbage_index":
        name.write_bytes(b"\xff" * 16)
    elif damage == "torn_index":
        name.write_bytes(name.read_bytes() + b"\x01\x02\x03")
    elif damage == "decreasing_timeindex":
        tname.write_bytes(tname.read_bytes()[12:24] + tname.read_bytes()[:12])
    elif damage == "index_beyond_log":
        name.write_bytes(name.read_bytes()[:-8] + (10**6).to_bytes(4, "big") * 2)
    with caplog.at_level(logging.WARNING, logger="storage.log"):
        lg = Log.open(d, CFG, clean_shutdown=clean, recovery_point=leo)
        offsets = _all_offsets(lg)
        for off in range(0, leo):
            assert lg.read(off, 100).first_offset == off // 2 * 2
        assert lg.offset_for_timestamp(1020) == (40, 1020)
        assert lg.log_end_offset == leo
        lg.close()
    assert offsets == list(range(0, leo, 2))
    assert any("rebuilding indexes" in r.message and name.stem in r.message for r in caplog.records)
    assert _snapshot_files(d) == before


def test_missing_txnindex_is_an_empty_one(tmp_path: Path) -> None:
    """As Kafka's TransactionIndex, the file exists only once a segment has an aborted transaction:
    a segment without one opens with an empty index, and the file appears with its first entry."""
    d = tmp_path / "t-0"
    lg = _build(d)
    assert sorted(d.glob("*.txnindex")) == []
    lg.close()
    lg = Log.open(d, CFG, clean_shutdown=True)
    assert lg.collect_aborted_txns(0, 100) == []
    end = lg.log_end_offset
    lg.add_aborted_txn(AbortedTxn(7, end - 1, end - 1, end - 1))
    assert [p.name for p in d.glob("*.txnindex")] == [lg.segments[-1].txn_index.path.name]
    assert lg.collect_aborted_txns(0, end) == [AbortedTxn(7, end - 1, end - 1, end - 1)]
    lg.close()


def test_replace_segments_and_interrupted_swap(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    lg = _build(d)
    old = lg.segments[:2]
    keep = [(h, data) for h, data in lg.iter_batches(0, lg.segments[2].base_offset) if h.base_offset % 4 == 0]
    new = lg.new_cleaned_segment(0)
    assert new.log_path.name.endswith(".log.cleaned")
    for h, data in keep:
        new.append(data, 0, len(data), [h])
    lg.replace_segments(old, [new])
    assert [p.name for p in d.glob("*.cleaned")] == [] and [p.name for p in d.glob("*.swap")] == []
    assert lg.segments[0] is new and len(lg.segments) >= 3
    expected = [h.base_offset for h, _ in keep] + list(range(lg.segments[1].base_offset, lg.log_end_offset, 2))
    assert _all_offsets(lg) == expected
    assert lg.read(2, 1000).first_offset == 4  # batch 2..3 was cleaned away
    leo = lg.log_end_offset
    lg.close()
    lg = Log.open(d, CFG, clean_shutdown=True)
    assert _all_offsets(lg) == expected and lg.log_end_offset == leo

    # Simulate a crash after the new segment became .swap but before the old ones were removed.
    seg2_base = lg.segments[2].base_offset
    keep2 = [(h, data) for h, data in lg.iter_batches(0, lg.segments[2].base_offset) if h.base_offset % 8 == 0]
    lg.close()
    tmpdir = tmp_path / "scratch-0"
    tmpdir.mkdir()
    scratch = Log.open(tmpdir, CFG)
    seg = scratch.new_cleaned_segment(0)
    for h, data in keep2:
        seg.append(data, 0, len(data), [h])
    seg.on_become_inactive()
    seg.flush()
    seg.close()
    for p in tmpdir.glob("00000000000000000000.*.cleaned"):
        shutil.copy(p, d / p.name.replace(".cleaned", ".swap"))
    (d / "00000000000000000777.log.cleaned").write_bytes(b"junk")
    lg = Log.open(d, CFG, recovery_point=leo)
    assert _all_offsets(lg) == [h.base_offset for h, _ in keep2] + [o for o in expected if o >= seg2_base]
    assert not list(d.glob("*.swap")) and not list(d.glob("*.cleaned"))
    assert lg.log_end_offset == leo
    lg.close()


class FakeProducerState:
    def __init__(self, snapshot_at: int = 0) -> None:
        self.map_end_offset = snapshot_at
        self.last_snapshot_offset = -1
        self.calls: list[tuple] = []
        self.replayed: list[int] = []

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None:
        self.calls.append(("reload", log_start_offset, log_end_offset))
        self.map_end_offset = min(self.map_end_offset, log_end_offset)

    def update_from_log(self, header: rb.BatchHeader) -> None:
        self.replayed.append(header.base_offset)
        self.map_end_offset = header.next_offset

    def take_snapshot(self, offset: int, *, sync: bool = True) -> Path:
        self.calls.append(("snapshot", offset))
        return Path(f"/nonexistent/{offset:020d}.snapshot")  # fsync_file skips a missing file

    def delete_snapshots_below(self, offset: int) -> None:
        self.calls.append(("delete_below", offset))


def test_producer_state_rebuild(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    ps = FakeProducerState()
    lg = Log.open(d, CFG, producer_state=ps)
    assert ps.calls == [("reload", 0, 0)]
    for _ in range(20):
        _append(lg, producer_id=5)
    rolls = [s.base_offset for s in lg.segments[1:]]
    assert [c[1] for c in ps.calls if c[0] == "snapshot"] == rolls  # snapshot at each roll
    lg.close()
    assert ps.calls[-1] == ("snapshot", 40)
    ps2 = FakeProducerState(snapshot_at=30)
    lg = Log.open(d, CFG, producer_state=ps2, clean_shutdown=True)
    assert ps2.calls[0] == ("reload", 0, 40)
    assert ps2.replayed == [30, 32, 34, 36, 38]
    assert ps2.calls[-1] == ("snapshot", 40)
    lg.truncate_to(34)
    assert ps2.calls[-1] == ("reload", 0, 34)
    lg.close()


def test_log_manager_unclean_startup_recovers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    mgr = LogManager([tmp_path], CFG)
    mgr.startup()
    lg = mgr.get_or_create_log("t", 0, CFG)
    for i in range(20):
        _append(lg, ts=i)
    lg.flush()
    mgr.checkpoint()
    rp = lg.recovery_point
    for i in range(5):
        _append(lg, ts=100 + i)
    tail = lg.segments[-1].log_path
    for s in lg.segments:
        s.close_fd()  # "crash": no clean shutdown, no index flush
    os.truncate(tail, tail.stat().st_size - 5)
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    mgr2 = LogManager([tmp_path], CFG)
    # The per-partition "recovered from" line is DEBUG (one INFO line per partition was noise).
    with caplog.at_level(logging.DEBUG, logger="storage.log"):
        mgr2.startup()
    assert mgr2.had_clean_shutdown[tmp_path] is False
    lg2 = mgr2.get_log("t", 0)
    assert lg2 is not None and lg2.log_end_offset == 48 and lg2.recovery_point == rp
    assert any("recovered from" in r.message for r in caplog.records)
    mgr2.shutdown()


def test_recovery_restores_leader_epochs_from_batches(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    lg = Log.open(d, CFG)
    for epoch in (1, 1, 4, 4, 7):
        buf = bytearray(rb.build_batch([(b"k", b"v")] * 2))
        lg.append(buf, list(rb.iter_headers(buf)), leader_epoch=epoch, now_ms=1)
    lg.close()
    (d / "leader-epoch-checkpoint").unlink()
    lg = Log.open(d, CFG, recovery_point=0)
    assert lg.leader_epoch_entries == [(1, 0), (4, 4), (7, 8)]
    lg.close()
