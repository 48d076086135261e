"""Log append/read/offset_for_timestamp/roll behaviour and LogManager basics."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from storage import batch as rb
from storage import log as storage_log
from storage.log import FileSlice, Log, OffsetOutOfRangeError, parse_topic_partition
from storage.log_config import LogConfig
from storage.log_manager import LogManager


def make(n: int = 1, *, ts: int = 1000, value: bytes = b"v" * 50, key: bytes | None = b"k") -> tuple[bytearray, list]:
    buf = bytearray(rb.build_batch([(key, value)] * n, timestamp_ms=ts))
    return buf, list(rb.iter_headers(buf))


def append(lg: Log, n: int = 1, *, ts: int = 1000, epoch: int = 0, now: int = 10_000, **kw):  # noqa: ANN201
    buf, hs = make(n, ts=ts, **kw)
    return lg.append(buf, hs, leader_epoch=epoch, now_ms=now)


def headers_of(res) -> list[rb.BatchHeader]:  # noqa: ANN001
    data = b"".join(bytes(c) for c in res.chunks)
    return list(rb.iter_headers(data))


@pytest.fixture
def cfg() -> LogConfig:
    return LogConfig(segment_bytes=2000, index_interval_bytes=300)


def test_parse_topic_partition() -> None:
    assert parse_topic_partition("a.b_c-d-12") == ("a.b_c-d", 12)
    assert parse_topic_partition("__consumer_offsets-0") == ("__consumer_offsets", 0)
    with pytest.raises(ValueError):
        parse_topic_partition("nopartition")


def test_append_assigns_offsets_and_epoch(tmp_path: Path, cfg: LogConfig) -> None:
    lg = Log.open(tmp_path / "t-0", cfg)
    r1 = append(lg, 3, epoch=5)
    r2 = append(lg, 2, epoch=5)
    assert (r1.first_offset, r1.last_offset) == (0, 2)
    assert (r2.first_offset, r2.last_offset) == (3, 4)
    assert lg.log_end_offset == 5
    hs = headers_of(lg.read(0, 1 << 20))
    assert [h.base_offset for h in hs] == [0, 3]
    assert all(h.partition_leader_epoch == 5 for h in hs)
    assert lg.leader_epoch_entries == [(5, 0)]
    # CRC still valid after patching (baseOffset/epoch lie outside it)
    data = b"".join(bytes(c) for c in lg.read(0, 1 << 20).chunks)
    list(rb.iter_headers(data, check=True))
    lg.close()


def test_append_several_batches_in_one_buffer(tmp_path: Path, cfg: LogConfig) -> None:
    lg = Log.open(tmp_path / "t-0", cfg)
    buf = bytearray(rb.build_batch([(b"a", b"1")] * 2) + rb.build_batch([(b"b", b"2")] * 4))
    res = lg.append(buf, list(rb.iter_headers(buf)), leader_epoch=0, now_ms=1)
    assert (res.first_offset, res.last_offset) == (0, 5)
    assert [h.base_offset for h in headers_of(lg.read(0, 1 << 20))] == [0, 2]


def test_log_append_time(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", LogConfig(message_timestamp_type="LogAppendTime"))
    res = append(lg, 2, ts=5, now=777)
    assert res.log_append_time == 777
    (h,) = headers_of(lg.read(0, 1 << 20))
    assert h.max_timestamp == 777 and h.timestamp_type == 1
    assert lg.offset_for_timestamp(700) == (0, 777)


def test_read_semantics(tmp_path: Path, cfg: LogConfig) -> None:
    lg = Log.open(tmp_path / "t-0", cfg)
    for i in range(60):
        append(lg, 2, ts=1000 + i)
    assert len(lg.segments) > 3
    size = lg.read(0, 1 << 20).chunks[0]
    one = len(bytes(size)) and headers_of(lg.read(0, 1))[0].size
    # every offset: the first batch returned contains it
    for off in range(120):
        res = lg.read(off, 1000)
        hs = headers_of(res)
        assert hs[0].base_offset <= off <= hs[0].last_offset
        assert res.first_offset == hs[0].base_offset
        assert res.size <= max(1000, one)
    # min_one_batch
    assert headers_of(lg.read(7, 1))[0].base_offset == 6
    assert lg.read(7, 1, min_one_batch=False).size == 0
    # max_offset is exclusive on base offsets
    hs = headers_of(lg.read(0, 1 << 20, max_offset=6))
    assert [h.base_offset for h in hs] == [0, 2, 4]
    assert lg.read(6, 100, max_offset=6).size == 0
    assert lg.read(120, 100).size == 0 and lg.read(120, 100).first_offset is None
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(121, 100)
    lg.delete_records_before(10)
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(9, 100)
    assert headers_of(lg.read(10, 100))[0].base_offset == 10


def test_read_large_batches_span_chunks(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=4096))
    for _ in range(15):
        append(lg, 1, value=b"x" * 100_000)
    for off in range(15):
        hs = headers_of(lg.read(off, 250_000))
        assert hs[0].base_offset == off
        assert len(hs) == 2 or hs[-1].base_offset == 14
    assert len(headers_of(lg.read(0, 10_000_000))) == 15
    assert len(headers_of(lg.read(3, 10))) == 1


def test_roll_creates_20_digit_files(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=1 << 20))
    value = b"x" * 1024
    for _ in range(20 * 1024 // 16):
        buf = bytearray(rb.build_batch([(None, value)] * 16, timestamp_ms=1))
        lg.append(buf, list(rb.iter_headers(buf)), leader_epoch=0, now_ms=1)
    lg.close()
    logs = sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))
    assert len(logs) >= 20
    for name in logs:
        stem = name[:-4]
        assert len(stem) == 20 and stem.isdigit()
        assert (tmp_path / "t-0" / f"{stem}.index").exists()
        assert (tmp_path / "t-0" / f"{stem}.timeindex").exists()
        assert (tmp_path / "t-0" / f"{stem}.log").stat().st_size <= 1 << 20


def test_roll_on_segment_ms(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", LogConfig(segment_ms=1000))
    append(lg, ts=1000)
    append(lg, ts=1500)
    assert len(lg.segments) == 1
    append(lg, ts=2500)
    assert len(lg.segments) == 2 and lg.segments[1].base_offset == 2


def test_roll_on_full_index(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", LogConfig(segment_index_bytes=16, index_interval_bytes=1))
    for _ in range(10):
        append(lg)
    assert all(len(s.offset_index) <= 2 for s in lg.segments)
    assert len(lg.segments) > 2


def test_offset_for_timestamp_and_latest(tmp_path: Path, cfg: LogConfig) -> None:
    lg = Log.open(tmp_path / "t-0", cfg)
    assert lg.offset_for_timestamp(0) is None and lg.latest_timestamp() is None
    stamps = [5, 3, 9, 9, 2, 15, 11, 20, 1]
    for ts in stamps:
        append(lg, 2, ts=ts)
    assert lg.offset_for_timestamp(0) == (0, 5)
    assert lg.offset_for_timestamp(6) == (4, 9)
    assert lg.offset_for_timestamp(10) == (10, 15)
    assert lg.offset_for_timestamp(16) == (14, 20)
    assert lg.offset_for_timestamp(21) is None
    assert lg.latest_timestamp() == (20, 14)


def test_iter_batches(tmp_path: Path, cfg: LogConfig) -> None:
    lg = Log.open(tmp_path / "t-0", cfg)
    for _ in range(30):
        append(lg, 2)
    got = list(lg.iter_batches(5, 21))
    assert [h.base_offset for h, _ in got] == list(range(4, 21, 2))
    for h, data in got:
        rb.validate(data, h)


def test_truncate_to(tmp_path: Path, cfg: LogConfig) -> None:
    lg = Log.open(tmp_path / "t-0", cfg)
    for i in range(40):
        append(lg, 2, ts=i, epoch=i // 10)
    lg.truncate_to(50)
    assert lg.log_end_offset == 50
    assert headers_of(lg.read(48, 1 << 20))[-1].last_offset == 49
    assert lg.leader_epoch_entries == [(0, 0), (1, 20), (2, 40)]
    res = append(lg, 1, ts=100, epoch=3)
    assert res.first_offset == 50
    lg.truncate_to(0)
    assert lg.log_end_offset == 0 and lg.log_start_offset == 0 and len(lg.segments) == 1


def test_update_config(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", LogConfig())
    append(lg)
    lg.update_config(LogConfig(segment_bytes=100))
    append(lg)
    assert len(lg.segments) == 2


def test_log_config_from_properties() -> None:
    c = LogConfig.from_properties({"segment.bytes": "100", "cleanup.policy": "compact,delete",
                                   "min.cleanable.dirty.ratio": "0.1", "compression.type": "lz4"})
    assert c.segment_bytes == 100 and c.compact_enabled and c.delete_enabled
    assert c.min_cleanable_dirty_ratio == 0.1 and c.extra == {"compression.type": "lz4"}
    assert LogConfig().delete_enabled and not LogConfig().compact_enabled
    b = LogConfig.from_broker_properties({"log.retention.hours": "1", "log.segment.bytes": "5"})
    assert b.retention_ms == 3600000 and b.segment_bytes == 5
    b = LogConfig.from_broker_properties({"log.retention.ms": "7", "log.retention.hours": "1"})
    assert b.retention_ms == 7
    assert c.to_properties()["segment.bytes"] == "100"


def test_log_manager_roundtrip(tmp_path: Path) -> None:
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    mgr = LogManager(dirs, LogConfig())
    mgr.startup()
    logs = [mgr.get_or_create_log("my.topic-x", p, LogConfig()) for p in range(4)]
    assert {lg.dir.parent for lg in logs} == set(dirs)  # spread over both dirs
    assert mgr.get_or_create_log("my.topic-x", 0, LogConfig()) is logs[0]
    for i, lg in enumerate(logs):
        for _ in range(i + 1):
            append(lg)
    logs[3].delete_records_before(2)
    mgr.shutdown()
    for d in dirs:
        assert (d / ".kafka_cleanshutdown").exists()
        assert (d / "recovery-point-offset-checkpoint").read_text().startswith("0\n2\n")
    assert "my.topic-x 3 2" in "".join((d / "log-start-offset-checkpoint").read_text() for d in dirs)

    mgr2 = LogManager(dirs, LogConfig())
    mgr2.startup()
    assert all(mgr2.had_clean_shutdown.values())
    assert not any((d / ".kafka_cleanshutdown").exists() for d in dirs)
    for p in range(4):
        lg = mgr2.get_log("my.topic-x", p)
        assert lg is not None and lg.log_end_offset == p + 1 and lg.recovery_point == p + 1
    assert mgr2.get_log("my.topic-x", 3).log_start_offset == 2  # type: ignore[union-attr]
    mgr2.delete_log("my.topic-x", 0)
    assert mgr2.get_log("my.topic-x", 0) is None
    assert not any((d / "my.topic-x-0").exists() for d in dirs)
    assert len(list(mgr2.all_logs())) == 3
    mgr2.shutdown()


def test_offset_index_entry_layout_matches_rule(tmp_path: Path) -> None:
    """Entry for a batch at position P when P - previous entry position > index.interval.bytes."""
    lg = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=100))
    sizes = []
    for _ in range(10):
        sizes.append(append(lg, 1).first_offset)
    size = lg.segments[0].size // 10
    lg.close()
    raw = (tmp_path / "t-0" / "00000000000000000000.index").read_bytes()
    entries = list(struct.iter_unpack(">ii", raw))
    expected, last = [], 0
    for i in range(10):
        pos = i * size
        if pos - last > 100:
            expected.append((i, pos))
            last = pos
    assert entries == expected


def test_flush_policy_and_roll_flush(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=500, flush_ms=1000))
    assert not lg.needs_flush(10**15)
    append(lg)
    assert lg.needs_flush(lg._last_flush_ms + 1000) and not lg.needs_flush(lg._last_flush_ms + 999)
    assert lg.flush_target(lg._last_flush_ms + 1000) == lg.log_end_offset == 1
    lg.flush()
    assert lg.recovery_point == 1 and not lg.needs_flush(10**15)
    while len(lg.segments) < 2:
        append(lg)
    assert lg.needs_flush(lg._last_flush_ms)  # a rolled segment waits for its fsync
    # only the rolled segment is due: the active one is not part of that flush
    assert lg.flush_target(lg._last_flush_ms) == lg.segments[1].base_offset < lg.log_end_offset
    lg.flush()
    assert lg.recovery_point == lg.log_end_offset


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every fd fsynced from here on (os.fsync is patched process-wide)."""
    import os

    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


def test_append_never_fsyncs_and_reports_flush_messages_due(tmp_path: Path, fsyncs: list[int]) -> None:
    lg = Log.open(tmp_path / "t-0", LogConfig(flush_messages=3))
    results = [append(lg)]
    fsyncs.clear()  # the first append of an epoch writes (and fsyncs) leader-epoch-checkpoint
    results += [append(lg) for _ in range(3)]
    assert [r.flush_due for r in results] == [False, False, True, True]
    assert fsyncs == [] and lg.recovery_point == 0  # append left the fsync to its caller
    assert lg.flush_messages_due()
    lg.flush()
    assert fsyncs and lg.recovery_point == 4 and not lg.flush_messages_due()
    assert not append(lg).flush_due  # counting starts again from the recovery point
    lg.update_config(LogConfig(flush_messages=1))
    assert append(lg).flush_due and lg.recovery_point == 4
    lg.close()


def test_plan_sync_complete_advances_recovery_point(tmp_path: Path, fsyncs: list[int]) -> None:
    lg = Log.open(tmp_path / "t-0", LogConfig(flush_messages=1))
    append(lg, 3)
    fsyncs.clear()  # leader-epoch-checkpoint, written at the first append of an epoch
    plan = lg.plan_flush(now_ms=123)
    assert plan is not None and plan.end_offset == 3 and plan.dir == lg.dir  # a new segment file: dir too
    assert not lg.segments[0].dirty and lg.flush_in_flight
    with pytest.raises(RuntimeError):
        lg.plan_flush()  # one flush at a time
    append(lg, 2)  # lands while the fsync runs
    assert lg.segments[0].dirty
    assert fsyncs == []  # planning does not fsync
    plan.sync()
    assert lg.segments[0].fd in fsyncs
    assert lg.recovery_point == 0  # only completion moves it
    lg.complete_flush(plan)
    assert lg.recovery_point == 3 and lg._last_flush_ms >= 123 and not lg.flush_in_flight
    # The records appended during the fsync are picked up by the next flush.
    plan2 = lg.plan_flush()
    assert plan2 is not None and plan2.end_offset == 5 and plan2.dir is None
    assert [s.segment for s in plan2.segments] == [lg.segments[0]]
    plan2.sync()
    lg.complete_flush(plan2)
    assert lg.recovery_point == 5
    assert lg.plan_flush() is None  # nothing left to do
    lg.close()


def test_roll_snapshot_is_fsynced_by_the_flush_not_the_roll(
    tmp_path: Path, fsyncs: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka writes the producer snapshot at a roll unsynced and fsyncs it with the rolled
    segment's flush: the roll runs on the loop, the flush in an executor."""
    import os

    from storage.producer_state import ProducerStateManager

    d = tmp_path / "t-0"
    lg = Log.open(d, LogConfig(), producer_state=ProducerStateManager(d))
    append(lg, 3)
    fsyncs.clear()
    lg.roll(10_000)
    snap = d / f"{3:020d}.snapshot"
    assert snap.exists() and fsyncs == []  # written and renamed, not fsynced
    plan = lg.plan_flush(up_to=2)  # a flush below the roll does not take it ...
    assert plan is not None and plan.files == [] and plan.dir == lg.dir
    lg.flush_failed(plan)  # ... and a failed one gives back what it took
    plan = lg.plan_flush(up_to=3)
    assert plan is not None and plan.files == [(3, snap)] and plan.dir == lg.dir
    lg.flush_failed(plan)
    plan = lg.plan_flush()
    assert plan is not None and plan.files == [(3, snap)]
    synced: list[tuple[int, int]] = []
    real = os.fsync

    def by_inode(fd: int) -> None:
        synced.append((os.fstat(fd).st_dev, os.fstat(fd).st_ino))
        real(fd)

    monkeypatch.setattr(os, "fsync", by_inode)
    plan.sync()
    lg.complete_flush(plan)
    st = snap.stat()
    assert (st.st_dev, st.st_ino) in synced
    assert lg.plan_flush() is None  # nothing pending any more
    lg.close()


def test_start_truncation_writes_epoch_checkpoint_unsynced_and_the_flusher_syncs_it(
    tmp_path: Path, fsyncs: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """DeleteRecords / retention run on the loop: like Kafka (KAFKA-15046) they rewrite
    leader-epoch-checkpoint without fsync and leave that to the next flush."""
    import os

    lg = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=500, file_delete_delay_ms=0))
    while len(lg.segments) < 3:
        append(lg)
    lg.flush()
    assert lg.flush_target(10_000) is None
    fsyncs.clear()
    start = lg.segments[1].base_offset + 1
    lg.delete_records_before(start)
    assert lg.leader_epoch_entries == [(0, start)]
    assert lg._epoch_file.read() == [(0, start)] and fsyncs == []  # on disk, not fsynced
    assert lg.flush_target(10_000) == lg.recovery_point  # only the checkpoint to sync
    synced: list[int] = []
    real = os.fsync

    def by_inode(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real(fd)

    monkeypatch.setattr(os, "fsync", by_inode)
    plan = lg.plan_flush(lg.flush_target(10_000))
    assert plan is not None and plan.files == [(-1, lg._epoch_file.path)] and plan.dir == lg.dir
    plan.sync()
    lg.complete_flush(plan)
    assert lg._epoch_file.path.stat().st_ino in synced
    assert lg.flush_target(10_000) is None
    lg.close()
    assert Log.open(tmp_path / "t-0", LogConfig()).leader_epoch_entries == [(0, start)]


def test_first_epoch_of_an_empty_log_is_written_unsynced_and_a_later_one_synced(
    tmp_path: Path, fsyncs: list[int]
) -> None:
    """Creating a topic assigns epoch 0 to each new, empty partition: no fsync for that, neither on
    the loop nor by the flusher while the log is empty (the file describes nothing yet); the first
    flush that covers data fsyncs it with the data. A new epoch on a log that holds data stays
    synced, as Kafka."""
    lg = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=500))
    fsyncs.clear()
    lg.assign_leader_epoch(0, 0)
    assert fsyncs == [] and lg._epoch_file.read() == [(0, 0)]
    assert lg.flush_target(10_000) is None  # empty: the flusher leaves it alone
    append(lg, 3)
    plan = lg.plan_flush()
    assert plan is not None and plan.files == [(-1, lg._epoch_file.path)] and plan.dir == lg.dir
    plan.sync()
    lg.complete_flush(plan)
    assert lg.flush_target(10_000) is None and lg.recovery_point == 3
    fsyncs.clear()
    lg.assign_leader_epoch(1, lg.log_end_offset)
    assert len(fsyncs) == 2  # the file and its dir, at once
    assert lg._epoch_file.read() == [(0, 0), (1, 3)]
    append(lg, 1, epoch=1)  # (an epoch with no batch is dropped at load, as in Kafka)
    lg.close()
    assert Log.open(tmp_path / "t-0", LogConfig()).leader_epoch_entries == [(0, 0), (1, 3)]


def test_recovery_point_never_moves_backwards(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=500))
    while len(lg.segments) < 3:
        append(lg)
    lg.flush()
    rp = lg.recovery_point
    assert rp == lg.log_end_offset
    lg.roll(10_000)  # a new segment file: the next flush has the dir to fsync
    assert lg._dir_dirty and lg.recovery_point == rp
    plan = lg.plan_flush(up_to=1)  # an old target (a stale rolled-segment flush, say)
    assert plan is not None and plan.end_offset == 1
    plan.sync()
    lg.complete_flush(plan)
    assert lg.recovery_point == rp
    lg.close()


def test_truncation_during_flush_keeps_recovery_point(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", LogConfig())
    append(lg, 2)
    lg.flush()
    for _ in range(3):
        append(lg)
    plan = lg.plan_flush()
    assert plan is not None and plan.end_offset == 5
    lg.truncate_to(3)  # follower truncation while the fsync runs ...
    append(lg, 4)  # ... and new data at offsets the plan covered
    plan.sync()
    lg.complete_flush(plan)
    assert lg.recovery_point == 2  # offsets 3.. were rewritten after the plan: not trusted
    assert lg.segments[-1].dirty
    lg.flush()
    assert lg.recovery_point == lg.log_end_offset == 7
    lg.close()


def test_failed_flush_leaves_segments_dirty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from storage import segment

    lg = Log.open(tmp_path / "t-0", LogConfig())
    append(lg, 2)

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(segment.os, "fsync", broken)
    with pytest.raises(OSError):
        lg.flush()
    assert lg.recovery_point == 0 and lg.segments[0].dirty and lg._dir_dirty and not lg.flush_in_flight
    monkeypatch.undo()
    lg.flush()
    assert lg.recovery_point == 2
    lg.close()


def test_flush_sync_tolerates_segments_closed_meanwhile(tmp_path: Path) -> None:
    """The executor part may run while retention deletes segments or the topic is deleted."""
    lg = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=500, file_delete_delay_ms=0))
    while len(lg.segments) < 4:
        append(lg)
    plan = lg.plan_flush()
    assert plan is not None and len(plan.segments) == 4
    lg.delete_records_before(lg.segments[2].base_offset)  # closes and deletes two of them
    assert plan.segments[0].segment.closed
    plan.sync()
    lg.complete_flush(plan)
    assert lg.recovery_point == lg.log_end_offset
    append(lg)
    plan = lg.plan_flush()
    assert plan is not None
    lg.delete()  # topic deleted: every fd closed, the dir renamed away and removed
    plan.sync()
    lg.complete_flush(plan)


def test_read_without_index_entries_large_batches(tmp_path: Path) -> None:
    """No index entries (huge index.interval.bytes): offsets are found by a header-only scan."""
    lg = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=1 << 30))
    for _ in range(12):
        append(lg, 1, value=b"y" * 150_000)
    assert len(lg.segments[0].offset_index) == 0
    for off in (0, 5, 11):
        hs = headers_of(lg.read(off, 400_000))
        assert hs[0].base_offset == off and len(hs) == min(2, 12 - off)
    assert [h.base_offset for h, _ in lg.iter_batches(9)] == [9, 10, 11]
    lg.close()
    lg = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=1 << 30), clean_shutdown=True)
    assert lg.log_end_offset == 12


def _reads(lg: Log, end: int, zero_copy: bool) -> list[tuple]:
    """Every read a fetcher could make up to ``end``: from each offset, with small and large limits."""
    out = []
    for offset in range(end + 1):
        for max_bytes in (0, 1, 150, 700, 1 << 20):
            res = lg.read(offset, max_bytes, min_one_batch=True, zero_copy=zero_copy)
            data = b"".join(c.read() if isinstance(c, FileSlice) else bytes(c) for c in res.chunks)
            out.append((offset, max_bytes, res.first_offset, data))
    return out


@pytest.mark.parametrize("zero_copy", [False, True])
def test_append_start_hints_read_what_the_index_scan_reads(tmp_path: Path, zero_copy: bool,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A read from the start of a recent append starts at its remembered position instead of
    scanning from the sparse index entry: the same bytes come back as from a log opened afresh
    (no hints), also after a truncation moved the batches behind the remembered offsets. With
    zero_copy every read goes through Segment.read_range (file slices)."""
    if zero_copy:
        monkeypatch.setattr(storage_log, "ZERO_COPY_MIN_BYTES", 1)
    cfg = LogConfig(segment_bytes=1 << 20, index_interval_bytes=4096)
    lg = Log.open(tmp_path / "t-0", cfg)
    for i in range(60):
        append(lg, 1 + i % 4, value=b"v" * (20 + 7 * i))
    end = lg.log_end_offset
    hinted = _reads(lg, end, zero_copy)
    lg.close()
    lg = Log.open(tmp_path / "t-0", cfg)  # no hints
    assert _reads(lg, end, zero_copy) == hinted
    for i in range(30):
        append(lg, 1 + i % 3, value=b"w" * (40 + 3 * i))
    remembered = list(lg.segments[-1]._start_hints)
    # Cut back into the batches whose starts are remembered, then append batches of other sizes
    # over the same offsets: the positions remembered for them are wrong now.
    lg.truncate_to(remembered[len(remembered) // 2])
    append(lg, 40, value=b"x" * 30)
    end2 = lg.log_end_offset
    assert any(lg.log_end_offset - 40 < o < end2 for o in remembered)  # offsets inside the new batch
    hinted = _reads(lg, end2, zero_copy)
    lg.close()
    lg = Log.open(tmp_path / "t-0", cfg)
    assert _reads(lg, end2, zero_copy) == hinted
    lg.close()
