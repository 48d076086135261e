"""tests/helpers/replica_compare.py on logs written by storage.log.Log: rolls at different points do not
matter, a differing, missing or extra batch below the bound does, anything above the bound does not."""

from __future__ import annotations

from pathlib import Path

from storage import batch as rb
from storage.log import Log
from storage.log_config import LogConfig
from tests.helpers.replica_compare import (
    assert_replicas_identical,
    read_batches,
    replica_differences,
    segment_files,
)

BATCHES = [rb.build_batch([(f"k{i}-{j}".encode(), b"v" * (i * 7 % 50)) for j in range(1 + i % 4)],
                          timestamp_ms=1_700_000_000_000 + i) for i in range(40)]


def _write(pdir: Path, batches: list[bytes], *, segment_bytes: int, epoch_of=lambda i: i // 10) -> Log:
    lg = Log.open(pdir, LogConfig(segment_bytes=segment_bytes))
    for i, data in enumerate(batches):
        buf = bytearray(data)
        lg.append(buf, list(rb.iter_headers(buf)), leader_epoch=epoch_of(i), now_ms=1)
    lg.flush()
    return lg


def test_identical_replicas_with_different_rolls(tmp_path: Path) -> None:
    a = _write(tmp_path / "a" / "t-0", BATCHES, segment_bytes=300)
    b = _write(tmp_path / "b" / "t-0", BATCHES, segment_bytes=4000)
    try:
        assert len(segment_files(a.dir)) > len(segment_files(b.dir)) >= 2
        end = a.log_end_offset
        assert end == b.log_end_offset == sum(1 + i % 4 for i in range(40))
        reps = {"a": a.dir, "b": b.dir}
        assert replica_differences(reps, end) == []
        assert assert_replicas_identical(reps, end) == 40
        # A bound inside the log compares only the batches that start below it.
        assert len(read_batches(a.dir, 10)) == len(read_batches(b.dir, 10)) < 40
        assert replica_differences(reps, 10) == []
    finally:
        a.close()
        b.close()


def test_differing_missing_and_extra_batches(tmp_path: Path) -> None:
    ref = _write(tmp_path / "ref" / "t-0", BATCHES, segment_bytes=500)
    # Same records, but batch 25 written under another leader epoch: same offsets, other bytes.
    epoch = _write(tmp_path / "epoch" / "t-0", BATCHES, segment_bytes=500,
                   epoch_of=lambda i: 9 if i == 25 else i // 10)
    short = _write(tmp_path / "short" / "t-0", BATCHES[:30], segment_bytes=500)
    longer = _write(tmp_path / "long" / "t-0", BATCHES + BATCHES[:3], segment_bytes=500)
    try:
        end = ref.log_end_offset
        diffs = replica_differences({"ref": ref.dir, "epoch": epoch.dir}, end)
        base25 = sorted(read_batches(ref.dir))[25]
        assert diffs == [f"batch at {base25}: ref and epoch differ (sizes {len(BATCHES[25])}/{len(BATCHES[25])}, "
                         f"first differing byte 15)"]  # low byte of partitionLeaderEpoch
        # Below the differing batch the two agree.
        assert replica_differences({"ref": ref.dir, "epoch": epoch.dir}, base25) == []

        diffs = replica_differences({"ref": ref.dir, "short": short.dir}, end)
        assert diffs[0] == f"short: batches end at {short.log_end_offset}, below {end}"
        assert len(diffs) == 1 + 10  # and each of the ten missing batches named
        # An extra tail above the bound (records not yet under the high watermark) is ignored.
        assert replica_differences({"ref": ref.dir, "long": longer.dir}, end) == []
        assert replica_differences({"long": longer.dir, "ref": ref.dir}, end + 1)[0].startswith("ref: batches end")
    finally:
        for lg in (ref, epoch, short, longer):
            lg.close()


def test_torn_tail_is_ignored(tmp_path: Path) -> None:
    a = _write(tmp_path / "a" / "t-0", BATCHES, segment_bytes=100_000)
    b = _write(tmp_path / "b" / "t-0", BATCHES, segment_bytes=100_000)
    end = a.log_end_offset
    a.close()
    b.close()
    # A follower caught mid-write: half a batch at the end of its active segment.
    [seg] = segment_files(tmp_path / "b" / "t-0")
    with open(seg, "ab") as f:
        f.write(BATCHES[0][: len(BATCHES[0]) // 2])
    assert replica_differences({"a": tmp_path / "a" / "t-0", "b": tmp_path / "b" / "t-0"}, end) == []
