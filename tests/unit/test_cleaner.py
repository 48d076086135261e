"""Tests for storage.cleaner: compaction core (offset map, filtering, KIP-534 horizons, txns) and Log integration."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import hypothesis
import pytest
from hypothesis import strategies as st

from storage import batch as rb
from storage import cleaner as cl
from storage import log as log_mod
from storage import log_config as log_config_mod
from storage import producer_state as ps_mod

NOW = 1_000_000
RETENTION = 86_400_000


@dataclass
class Aborted:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int = 0


def _parse(buf: bytes) -> list[tuple[rb.BatchHeader, bytes]]:
    out = []
    for h in rb.iter_headers(buf):
        out.append((h, bytes(buf[h.position : h.position + h.size])))
    for h, _ in out:
        h.position = 0
    return out


def _batches(*raw: bytes) -> list[tuple[rb.BatchHeader, bytes]]:
    return _parse(b"".join(raw))


def _clean_pass(
    batches: list[tuple[rb.BatchHeader, bytes]],
    now: int,
    aborted: list[Aborted] | None = None,
    last_records: dict[int, cl.LastRecord] | None = None,
    start: int = 0,
) -> tuple[list[tuple[rb.BatchHeader, bytes]], cl.CleanStats]:
    """One round over everything: map the whole input, then filter it (as Kafka does for a fully dirty log)."""
    omap = cl.OffsetMap()
    meta = cl.CleanedTransactionMetadata()
    meta.add_aborted_transactions(aborted or [])
    cl.build_offset_map_for_batches(batches, start, omap, meta)
    upper = batches[-1][0].next_offset if batches else 0
    omap.update_latest_offset(upper - 1)
    fmeta = cl.CleanedTransactionMetadata()
    fmeta.add_aborted_transactions(aborted or [])
    if last_records is None:
        last_records = cl.last_records_from_batches(h for h, _ in batches)
    ctx = cl.FilterContext(omap, fmeta, last_records, upper, now, RETENTION)
    out = b"".join(cl.filter_batches(batches, ctx))
    return _parse(out), ctx.stats


def _records(batches: list[tuple[rb.BatchHeader, bytes]]) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for _, data in batches for r in rb.decode_records(data)]


def test_overwrites_keep_latest_per_key_and_offsets() -> None:
    batches = _batches(
        rb.build_batch([(b"a", b"1"), (b"b", b"1")], base_offset=0, timestamp_ms=10),
        rb.build_batch([(b"a", b"2"), (b"c", b"1")], base_offset=2, timestamp_ms=20),
        rb.build_batch([(b"b", b"2")], base_offset=4, timestamp_ms=30),
    )
    out, stats = _clean_pass(batches, NOW)
    assert _records(out) == [(2, b"a", b"2"), (3, b"c", b"1"), (4, b"b", b"2")]
    # the first batch lost every record and is dropped; the second is rewritten, the third kept as is
    assert [h.base_offset for h, _ in out] == [2, 4]
    assert out[1][1] == batches[2][1]
    assert stats.messages_read == 5 and stats.messages_written == 3
    for h, data in out:
        rb.validate(data, h)


def test_rewritten_batch_keeps_offset_span_and_producer_fields() -> None:
    raw = rb.build_batch(
        [(b"a", b"1"), (b"a", b"2"), (b"b", b"1")],
        base_offset=10,
        timestamp_ms=5,
        producer_id=42,
        producer_epoch=3,
        base_sequence=7,
        partition_leader_epoch=2,
    )
    later = rb.build_batch(
        [(b"b", b"2")], base_offset=13, timestamp_ms=6, producer_id=42, producer_epoch=3, base_sequence=10
    )
    out, _ = _clean_pass(_batches(raw, later), NOW)
    h, data = out[0]
    rb.validate(data, h)
    assert (h.base_offset, h.last_offset, h.records_count) == (10, 12, 1)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (42, 3, 7, 9)
    assert h.partition_leader_epoch == 2 and not h.has_delete_horizon
    assert _records(out) == [(11, b"a", b"2"), (13, b"b", b"2")]


def test_tombstone_gets_horizon_then_is_removed() -> None:
    batches = _batches(
        rb.build_batch([(b"a", b"1"), (b"b", b"1")], base_offset=0, timestamp_ms=10),
        rb.build_batch([(b"a", None)], base_offset=2, timestamp_ms=20),
        rb.build_batch([(b"c", b"1")], base_offset=3, timestamp_ms=30),
    )
    out, _ = _clean_pass(batches, NOW)
    assert _records(out) == [(1, b"b", b"1"), (2, b"a", None), (3, b"c", b"1")]
    tomb_header = out[1][0]
    assert tomb_header.has_delete_horizon and tomb_header.base_timestamp == NOW + RETENTION
    rb.validate(out[1][1], tomb_header)
    # record timestamps survive the baseTimestamp change (stored relative to the horizon)
    assert [r.timestamp for r in rb.decode_records(out[1][1])] == [20]
    assert tomb_header.max_timestamp == 20

    # before the horizon: still there, horizon unchanged, batch bytes unchanged
    out2, _ = _clean_pass(out, NOW + RETENTION - 1)
    assert _records(out2) == _records(out)
    assert out2[1][1] == out[1][1]
    # past the horizon: gone
    out3, _ = _clean_pass(out2, NOW + RETENTION)
    assert _records(out3) == [(1, b"b", b"1"), (3, b"c", b"1")]


def test_null_keys_dropped_like_kafka() -> None:
    batches = _batches(
        rb.build_batch([(None, b"x"), (b"a", b"1")], base_offset=0, timestamp_ms=1),
        rb.build_batch([(b"b", b"1")], base_offset=2, timestamp_ms=1),
    )
    out, stats = _clean_pass(batches, NOW)
    assert _records(out) == [(1, b"a", b"1"), (2, b"b", b"1")]
    assert stats.invalid_messages == 1


def test_gzip_batch_recompressed_with_same_codec() -> None:
    big = b"v" * 500
    raw = rb.build_batch(
        [(b"a", big), (b"b", big), (b"a", big + b"2")], base_offset=0, timestamp_ms=1, compression=1
    )
    assert rb.parse_header(raw).compression == 1
    tail = rb.build_batch([(b"z", b"1")], base_offset=3, timestamp_ms=1)
    out, _ = _clean_pass(_batches(raw, tail), NOW)
    h, data = out[0]
    assert h.compression == 1 and h.records_count == 2
    rb.validate(data, h)
    assert _records(out)[:2] == [(1, b"b", big), (2, b"a", big + b"2")]


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_every_codec_recompressed_with_same_codec(codec: int) -> None:
    from kafka import codec as kc

    if not {1: kc.has_gzip, 2: kc.has_snappy, 3: kc.has_lz4, 4: kc.has_zstd}[codec]():
        pytest.skip("codec library not installed")
    big = b"v" * 500
    raw = rb.build_batch(
        [(b"a", big), (b"b", big), (b"a", None)], base_offset=0, timestamp_ms=1, compression=codec
    )
    assert rb.parse_header(raw).compression == codec
    out, _ = _clean_pass(_batches(raw), NOW)
    h, data = out[0]
    assert h.compression == codec and h.has_delete_horizon and h.records_count == 2
    rb.validate(data, h)
    assert _records(out) == [(1, b"b", big), (2, b"a", None)]


def test_aborted_transaction_removed_markers_aged_out() -> None:
    pid, other = 5, 6
    batches = _batches(
        rb.build_batch([(b"k", b"keep")], base_offset=0, timestamp_ms=1),
        rb.build_batch(
            [(b"k", b"aborted")],
            base_offset=1,
            timestamp_ms=1,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        ),
        rb.build_control_batch(
            rb.CONTROL_TYPE_ABORT,
            producer_id=pid,
            producer_epoch=0,
            coordinator_epoch=1,
            base_offset=2,
            timestamp_ms=1,
        ),
        rb.build_batch(
            [(b"t", b"committed")],
            base_offset=3,
            timestamp_ms=1,
            producer_id=other,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        ),
        rb.build_control_batch(
            rb.CONTROL_TYPE_COMMIT,
            producer_id=other,
            producer_epoch=0,
            coordinator_epoch=1,
            base_offset=4,
            timestamp_ms=1,
        ),
        rb.build_batch([(b"z", b"1")], base_offset=5, timestamp_ms=1),
    )
    aborted = [Aborted(pid, 1, 2)]
    no_active: dict[int, cl.LastRecord] = {}  # both producers expired: nothing retained for producer state
    out, _ = _clean_pass(batches, NOW, aborted, no_active)
    # aborted data gone (the aborted value never shadowed "keep"); markers kept while data was seen this pass
    assert [o for o, _, _ in _records(out)] == [0, 2, 3, 4, 5]
    assert (0, b"k", b"keep") in _records(out) and (3, b"t", b"committed") in _records(out)
    markers = [h for h, _ in out if h.is_control]
    assert [h.base_offset for h in markers] == [2, 4]
    assert not any(h.has_delete_horizon for h in markers)

    # next pass: no data left for either txn -> markers get a delete horizon
    out2, _ = _clean_pass(out, NOW, [], no_active)
    markers = {h.base_offset: h for h, _ in out2 if h.is_control}
    assert markers[2].has_delete_horizon and markers[2].base_timestamp == NOW + RETENTION
    # the commit marker: its data batch is still in the log, so it stays without horizon
    assert not markers[4].has_delete_horizon

    # past the horizon the abort marker disappears
    out3, _ = _clean_pass(out2, NOW + RETENTION, [], no_active)
    assert 2 not in {h.base_offset for h, _ in out3 if h.is_control}
    assert (3, b"t", b"committed") in _records(out3)


def test_last_batch_of_active_producer_retained_empty() -> None:
    pid = 9
    batches = _batches(
        rb.build_batch(
            [(b"a", b"1")], base_offset=0, timestamp_ms=1, producer_id=pid, producer_epoch=2, base_sequence=0
        ),
        rb.build_batch([(b"a", b"2")], base_offset=1, timestamp_ms=1),
        rb.build_batch([(b"b", b"2")], base_offset=2, timestamp_ms=1),
    )
    last = {pid: cl.LastRecord(last_data_offset=0, producer_epoch=2)}
    out, _ = _clean_pass(batches, NOW, [], last)
    h0, d0 = out[0]
    assert (h0.base_offset, h0.records_count, h0.producer_id, h0.producer_epoch, h0.base_sequence) == (
        0,
        0,
        pid,
        2,
        0,
    )
    rb.validate(d0, h0)
    assert _records(out) == [(1, b"a", b"2"), (2, b"b", b"2")]
    # without an active producer the emptied batch is simply dropped
    out2, _ = _clean_pass(batches, NOW, [], {})
    assert [h.base_offset for h, _ in out2] == [1, 2]


def test_last_batch_of_round_retained_empty() -> None:
    batches = _batches(
        rb.build_batch([(b"a", b"1")], base_offset=0, timestamp_ms=1),
        rb.build_batch([(b"a", b"2")], base_offset=1, timestamp_ms=1),
        rb.build_batch([(b"a", b"3")], base_offset=2, timestamp_ms=1),
    )
    # map covers only up to offset 1 (as if offset 2 were beyond this round)
    omap = cl.OffsetMap()
    meta = cl.CleanedTransactionMetadata()
    cl.build_offset_map_for_batches(batches[:2], 0, omap, meta)
    ctx = cl.FilterContext(omap, cl.CleanedTransactionMetadata(), {}, 1, NOW, RETENTION)
    out = _parse(b"".join(cl.filter_batches(batches[:1], ctx)))
    assert [(h.base_offset, h.records_count) for h, _ in out] == [(0, 0)]


def test_last_records_from_batches() -> None:
    hs = [
        h
        for h, _ in _batches(
            rb.build_batch([(b"a", b"1")], base_offset=0, producer_id=1, producer_epoch=0, base_sequence=0),
            rb.build_batch([(b"a", b"1")], base_offset=1, producer_id=1, producer_epoch=0, base_sequence=1),
            rb.build_control_batch(
                rb.CONTROL_TYPE_COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0, base_offset=2
            ),
            rb.build_batch([(b"b", b"1")], base_offset=3, producer_id=2, producer_epoch=0, base_sequence=0),
            rb.build_control_batch(
                rb.CONTROL_TYPE_ABORT, producer_id=2, producer_epoch=1, coordinator_epoch=0, base_offset=4
            ),
            rb.build_batch([(b"c", b"1")], base_offset=5),
        )
    ]
    assert cl.last_records_from_batches(hs) == {1: cl.LastRecord(1, 0), 2: cl.LastRecord(None, 1)}


def test_empty_batch_encoding() -> None:
    h = rb.parse_header(
        rb.build_batch(
            [(b"a", b"1")] * 3,
            base_offset=7,
            producer_id=3,
            producer_epoch=1,
            base_sequence=4,
            transactional=True,
            timestamp_ms=99,
        )
    )
    data = cl.encode_empty_batch(h)
    e = rb.parse_header(data)
    rb.validate(data, e)
    assert (e.base_offset, e.last_offset, e.records_count, e.size) == (7, 9, 0, rb.HEADER_SIZE)
    assert e.is_transactional and e.max_timestamp == 99 and e.base_timestamp == -1
    assert rb.decode_records(data) == []


def test_checkpoint_roundtrip(tmp_path: Path) -> None:
    assert cl.read_checkpoint(str(tmp_path)) == {}
    cl.update_checkpoint(str(tmp_path), "t-x", 0, 10)
    cl.update_checkpoint(str(tmp_path), "t-x", 1, 20)
    cl.update_checkpoint(str(tmp_path), "other", 3, 5)
    text = (tmp_path / cl.CHECKPOINT_FILE).read_text()
    assert text.splitlines()[:2] == ["0", "3"]
    assert "t-x 1 20" in text.splitlines()
    assert cl.read_checkpoint(str(tmp_path)) == {("t-x", 0): 10, ("t-x", 1): 20, ("other", 3): 5}
    cl.update_checkpoint(str(tmp_path), "t-x", 0, None)
    assert ("t-x", 0) not in cl.read_checkpoint(str(tmp_path))


def test_iter_file_batches_stops_at_torn_tail(tmp_path: Path) -> None:
    a = rb.build_batch([(b"a", b"1")], base_offset=0)
    b = rb.build_batch([(b"b", b"1")], base_offset=1)
    p = tmp_path / "00000000000000000000.log"
    p.write_bytes(a + b + b[:20])
    got = list(cl.iter_file_batches(str(p)))
    assert [(h.base_offset, h.position) for h, _ in got] == [(0, 0), (1, len(a))]
    assert got[1][1] == b
    assert list(cl.iter_file_batches(str(p), len(a)))[0][0].position == len(a)
    empty = tmp_path / "00000000000000000005.log"
    empty.write_bytes(b"")
    assert list(cl.iter_file_batches(str(empty))) == []


def test_offset_map_full_stops_mapping() -> None:
    batches = _batches(
        rb.build_batch([(b"a", b"1"), (b"b", b"1")], base_offset=0),
        rb.build_batch([(b"c", b"1")], base_offset=2),
    )
    omap = cl.OffsetMap(max_entries=2)
    full = cl.build_offset_map_for_batches(batches, 0, omap, cl.CleanedTransactionMetadata())
    assert full and omap.latest_offset == 1 and len(omap) == 2


if __name__ == "__main__":
    pytest.main([__file__])


# --- integration with storage.log.Log ----------------------------------------------------------------


def _open(tmp_path: Path, **cfg: object):  # noqa: ANN202
    config = log_config_mod.LogConfig(
        cleanup_policy="compact", delete_retention_ms=RETENTION, index_interval_bytes=64, **cfg
    )
    return log_mod.Log.open(tmp_path / "topic-0", config, now_ms=NOW)


def _append(log, raw: bytes, roll: bool = False, now: int = NOW) -> None:  # noqa: ANN001
    buf = bytearray(raw)
    log.append(buf, list(rb.iter_headers(buf)), leader_epoch=0, now_ms=now)
    if roll:
        log.roll(now)


def _read_all(log, start: int = 0) -> list[tuple[int, bytes | None, bytes | None]]:  # noqa: ANN001
    out = []
    pos = start
    while pos < log.log_end_offset:
        res = log.read(pos, 1 << 20)
        if not res.chunks:
            break
        data = b"".join(bytes(c) for c in res.chunks)
        for h in rb.iter_headers(data):
            out += [
                (r.offset, r.key, r.value) for r in rb.decode_records(data[h.position : h.position + h.size])
            ]
            pos = h.next_offset
    return out


def test_clean_log_end_to_end(tmp_path: Path) -> None:
    log = _open(tmp_path)
    _append(log, rb.build_batch([(b"a", b"1"), (b"b", b"1")], timestamp_ms=1), roll=True)
    _append(log, rb.build_batch([(b"a", b"2"), (b"c", b"1")], timestamp_ms=2), roll=True)
    _append(log, rb.build_batch([(b"b", None)], timestamp_ms=3), roll=True)
    _append(log, rb.build_batch([(b"a", b"active")], timestamp_ms=4))  # active segment: never cleaned
    assert cl.should_clean(log, NOW)

    stats = cl.LogCleaner().clean_log(log, NOW)
    assert (stats.first_dirty_offset, stats.end_offset, stats.segments_cleaned, stats.groups) == (0, 5, 3, 1)
    assert [s.base_offset for s in log.segments] == [0, 5]
    assert _read_all(log) == [(2, b"a", b"2"), (3, b"c", b"1"), (4, b"b", None), (5, b"a", b"active")]
    assert log.read(0, 1 << 20).first_offset == 2  # fetch from a removed offset lands on the next batch
    assert cl.read_checkpoint(str(tmp_path)) == {("topic", 0): 5}
    assert not list(log.dir.glob("*.cleaned")) and not list(log.dir.glob("*.swap"))
    # nothing new is dirty now
    assert not cl.should_clean(log, NOW)
    assert cl.LogCleaner().clean_log(log, NOW).skipped

    # the tombstone goes once new dirty data triggers a round past its delete horizon
    _append(log, rb.build_batch([(b"c", b"2")], timestamp_ms=5), roll=True)
    stats = cl.LogCleaner().clean_log(log, NOW + RETENTION + 1)
    assert (stats.first_dirty_offset, stats.end_offset) == (5, 7)
    # a@2 and c@3 are shadowed by newer records; the tombstone is past its horizon
    assert _read_all(log) == [(5, b"a", b"active"), (6, b"c", b"2")]
    assert [s.base_offset for s in log.segments] == [0, 7]

    # survives a restart
    log.close()
    log = _open(tmp_path)
    assert _read_all(log) == [(5, b"a", b"active"), (6, b"c", b"2")]
    assert log.log_end_offset == 7
    log.close()


def test_segments_grouped_up_to_segment_bytes(tmp_path: Path) -> None:
    one = rb.build_batch([(b"k%d" % i, b"x" * 100) for i in range(3)], timestamp_ms=1)
    log = _open(tmp_path, segment_bytes=len(one) * 2 + 10)
    for _ in range(5):
        _append(log, one, roll=True)
    stats = cl.LogCleaner().clean_log(log, NOW)
    # every round overwrote k0..k2: only the last copy survives; the emptied segments are grouped
    assert stats.segments_cleaned == 5 and stats.groups == 3
    assert [o for o, _, _ in _read_all(log)] == [12, 13, 14]


def test_dirty_ratio_and_compaction_lags(tmp_path: Path) -> None:
    log = _open(tmp_path, min_compaction_lag_ms=1000)
    _append(log, rb.build_batch([(b"a", b"1")], timestamp_ms=NOW - 10), roll=True)
    _append(log, rb.build_batch([(b"a", b"2")], timestamp_ms=NOW - 10))
    # too recent for min.compaction.lag.ms
    r = cl.cleanable_range(log, NOW)
    assert (r.first_dirty_offset, r.first_uncleanable_offset, r.cleanable_bytes) == (0, 0, 0)
    assert not cl.should_clean(log, NOW)
    assert cl.should_clean(log, NOW + 2000)
    # an open transaction (LSO) inside the first segment blocks it too
    assert cl.cleanable_range(log, NOW + 2000, last_stable_offset=0).first_uncleanable_offset == 0
    assert not cl.should_clean(log, NOW + 2000, last_stable_offset=0)
    assert cl.LogCleaner().clean_log(log, NOW + 2000, last_stable_offset=0).skipped


def test_min_cleanable_ratio_and_max_lag(tmp_path: Path) -> None:
    log = _open(tmp_path, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=5000)
    _append(log, rb.build_batch([(b"a", b"1")], timestamp_ms=NOW), roll=True)
    cl.LogCleaner().clean_log(log, NOW)  # now offset 0 is clean
    _append(log, rb.build_batch([(b"a", b"2")], timestamp_ms=NOW), roll=True)
    r = cl.cleanable_range(log, NOW)
    assert r.first_dirty_offset == 1 and 0 < r.cleanable_ratio < 0.99
    assert not cl.should_clean(log, NOW)
    assert cl.should_clean(log, NOW + 5001)  # max.compaction.lag.ms forces it


def test_should_clean_ignores_delete_policy(tmp_path: Path) -> None:
    log = _open(tmp_path)
    log.update_config(log_config_mod.LogConfig(cleanup_policy="delete"))
    _append(log, rb.build_batch([(b"a", b"1")]), roll=True)
    assert not cl.should_clean(log, NOW)


def test_consistent_reads_during_and_after_cleaning(tmp_path: Path) -> None:
    log = _open(tmp_path, file_delete_delay_ms=60_000)
    expected: dict[bytes, tuple[int, bytes]] = {}
    offset = 0
    for round_ in range(6):
        recs = [(b"k%d" % (i % 7), b"v%d-%d" % (round_, i)) for i in range(10)]
        _append(log, rb.build_batch(recs, timestamp_ms=round_), roll=True)
        for k, v in recs:
            expected[k] = (offset, v)
            offset += 1
    before = _read_all(log)
    old_first = log.segments[0]
    plan = cl.LogCleaner().prepare(log, NOW)
    # while the cleaner has prepared its segments, readers still see the old data
    assert _read_all(log) == before
    plan.commit()
    plan.write_checkpoint()
    after = _read_all(log)
    # after: exactly the latest record per key, at its original offset, with its value
    assert sorted(after) == sorted((o, k, v) for k, (o, v) in expected.items())
    assert set(after) <= set(before)
    # a reader that still holds the replaced segment object keeps reading the old bytes
    found = old_first.read(0, 1 << 20, None, True)
    assert found is not None and found[1] == 0
    assert old_first.log_path.name.endswith(".deleted")


def test_commit_abandons_group_whose_segments_vanished(tmp_path: Path) -> None:
    log = _open(tmp_path, file_delete_delay_ms=0)
    _append(log, rb.build_batch([(b"a", b"1")], timestamp_ms=1), roll=True)
    _append(log, rb.build_batch([(b"a", b"2")], timestamp_ms=1), roll=True)
    plan = cl.LogCleaner().prepare(log, NOW)
    assert len(plan.groups) == 1 and plan.groups[0].new.log_path.name.endswith(".log.cleaned")
    # retention removed the first segment while the cleaner was busy
    log.delete_records_before(1)
    log.apply_retention(NOW)
    assert log.segments[0].base_offset == 1
    stats = plan.commit()
    assert stats.end_offset == 0
    assert not list(log.dir.glob("*.cleaned"))
    assert _read_all(log, 1) == [(1, b"a", b"2")]


def test_crash_before_swap_leaves_old_data(tmp_path: Path) -> None:
    log = _open(tmp_path)
    _append(log, rb.build_batch([(b"a", b"1")], timestamp_ms=1), roll=True)
    _append(log, rb.build_batch([(b"a", b"2")], timestamp_ms=1), roll=True)
    before = _read_all(log)
    plan = cl.LogCleaner().prepare(log, NOW)
    assert list(log.dir.glob("*.cleaned"))
    log.close()  # crash: the cleaned segment was never swapped in
    for g in plan.groups:
        g.new.close_fd()
    log = _open(tmp_path)
    assert _read_all(log) == before
    assert not list(log.dir.glob("*.cleaned"))
    log.close()


def test_crash_mid_swap_is_completed_on_open(tmp_path: Path) -> None:
    log = _open(tmp_path)
    _append(log, rb.build_batch([(b"a", b"1"), (b"b", b"1")], timestamp_ms=1), roll=True)
    _append(log, rb.build_batch([(b"a", b"2")], timestamp_ms=1), roll=True)
    _append(log, rb.build_batch([(b"z", b"active")], timestamp_ms=1))
    plan = cl.LogCleaner().prepare(log, NOW)
    (g,) = plan.groups
    # the first step of replace_segments happened (cleaned files renamed .swap), then a crash
    g.new.on_become_inactive()
    g.new.flush()
    g.new.change_suffix(".swap")
    g.new.close()
    log.close()
    log = _open(tmp_path)
    assert _read_all(log) == [(1, b"b", b"1"), (2, b"a", b"2"), (3, b"z", b"active")]
    assert not list(log.dir.glob("*.swap"))
    log.close()


def test_transactional_log_end_to_end(tmp_path: Path) -> None:
    log = _open(tmp_path)
    pid = 11
    _append(
        log,
        rb.build_batch(
            [(b"k", b"aborted")],
            timestamp_ms=1,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        ),
    )
    _append(
        log,
        rb.build_control_batch(
            rb.CONTROL_TYPE_ABORT, producer_id=pid, producer_epoch=0, coordinator_epoch=0, timestamp_ms=1
        ),
    )
    log.add_aborted_txn(log_mod.AbortedTxn(pid, 0, 1, 0))
    _append(log, rb.build_batch([(b"k", b"v")], timestamp_ms=1), roll=True)
    cl.LogCleaner().clean_log(log, NOW)
    batches = [h for h, _ in log.iter_batches(0)]
    # the aborted data is gone, but pid's batch survives empty (its last data batch, for producer state)
    assert [(h.base_offset, h.records_count, h.is_control) for h in batches] == [
        (0, 0, False),
        (1, 1, True),
        (2, 1, False),
    ]
    assert batches[0].producer_id == pid and batches[0].base_sequence == 0
    # the marker is retained (its data was seen this round) and its txn index entry carried over
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in log.collect_aborted_txns(0, 3)] == [
        (pid, 0, 1)
    ]
    assert _read_all(log)[-1] == (2, b"k", b"v")


@pytest.mark.asyncio
async def test_clean_log_async(tmp_path: Path) -> None:
    log = _open(tmp_path)
    _append(log, rb.build_batch([(b"a", b"1")], timestamp_ms=1), roll=True)
    _append(log, rb.build_batch([(b"a", b"2")], timestamp_ms=1), roll=True)
    stats = await cl.LogCleaner().clean_log_async(log, NOW)
    assert stats.end_offset == 2 and _read_all(log) == [(1, b"a", b"2")]
    assert cl.read_checkpoint(str(tmp_path)) == {("topic", 0): 2}


def test_segment_deleted_after_snapshot_abandons_round(tmp_path: Path) -> None:
    log = _open(tmp_path, file_delete_delay_ms=0)
    _append(log, rb.build_batch([(b"a", b"1")], timestamp_ms=1), roll=True)
    _append(log, rb.build_batch([(b"a", b"2")], timestamp_ms=1), roll=True)
    view = cl.snapshot_log(log)
    log.delete_records_before(1)
    log.apply_retention(NOW)  # the first segment's files are gone before the executor runs
    plan = cl.LogCleaner().prepare(log, NOW, view=view)
    assert plan.stats.abandoned and plan.groups == []
    plan.commit()
    plan.write_checkpoint()
    assert cl.read_checkpoint(str(tmp_path)) == {}
    assert not list(log.dir.glob("*.cleaned"))


# --- property: compaction keeps exactly the latest record per key ---------------------------------------


@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(
    st.lists(
        st.lists(
            st.tuples(st.sampled_from([b"a", b"b", b"c", b"d"]), st.one_of(st.none(), st.binary(max_size=8))),
            min_size=1,
            max_size=6,
        ),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from([0, 1]),
)
def test_property_latest_per_key(batches_spec: list, codec: int) -> None:
    raw, off = [], 0
    for recs in batches_spec:
        raw.append(rb.build_batch(recs, base_offset=off, timestamp_ms=off, compression=codec))
        off += len(recs)
    batches = _batches(*raw)
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    o = 0
    for recs in batches_spec:
        for k, v in recs:
            latest[k] = (o, v)
            o += 1
    out, _ = _clean_pass(batches, NOW)
    got = _records(out)
    assert sorted(got) == sorted((o, k, v) for k, (o, v) in latest.items())
    for h, data in out:
        rb.validate(data, h)
    # the round's last batch always survives, so the log end offset is kept
    assert out[-1][0].next_offset == off
    # past the horizon every tombstone goes
    out2, _ = _clean_pass(out, NOW + RETENTION)
    assert sorted(_records(out2)) == sorted((o, k, v) for k, (o, v) in latest.items() if v is not None)


def test_producer_state_decides_retained_empty_batches(tmp_path: Path) -> None:
    d = tmp_path / "topic-0"
    ps = ps_mod.ProducerStateManager(d, producer_id_expiration_ms=1000)
    config = log_config_mod.LogConfig(cleanup_policy="compact", delete_retention_ms=RETENTION)
    log = log_mod.Log.open(d, config, producer_state=ps, now_ms=NOW)
    pid = 9

    def produce(raw: bytes, roll: bool = False) -> None:
        buf = bytearray(raw)
        hs = list(rb.iter_headers(buf))
        log.append(buf, hs, leader_epoch=0, now_ms=NOW)
        for h in hs:
            ps.update(h, now_ms=NOW)
        if roll:
            log.roll(NOW)

    produce(
        rb.build_batch([(b"a", b"1")], timestamp_ms=NOW, producer_id=pid, producer_epoch=0, base_sequence=0)
    )
    produce(rb.build_batch([(b"a", b"2")], timestamp_ms=NOW), roll=True)
    produce(rb.build_batch([(b"b", b"1")], timestamp_ms=NOW), roll=True)
    cl.LogCleaner().clean_log(log, NOW)
    hs = [h for h, _ in log.iter_batches(0)]
    # pid 9 is still active: its last batch stays (empty) so its sequence survives a reload
    assert [(h.base_offset, h.records_count, h.producer_id) for h in hs][0] == (0, 0, pid)
    assert hs[0].last_sequence == 0

    # once the producer has expired, the next round drops the empty batch
    ps.remove_expired(NOW + 5000)
    produce(rb.build_batch([(b"b", b"2")], timestamp_ms=NOW), roll=True)
    cl.LogCleaner().clean_log(log, NOW)
    assert [h.base_offset for h, _ in log.iter_batches(0)] == [1, 3]
    log.close()


def test_open_transaction_bounds_cleaning_without_explicit_lso(tmp_path: Path) -> None:
    d = tmp_path / "topic-0"
    ps = ps_mod.ProducerStateManager(d)
    config = log_config_mod.LogConfig(cleanup_policy="compact")
    log = log_mod.Log.open(d, config, producer_state=ps, now_ms=NOW)
    _append(log, rb.build_batch([(b"a", b"1")], timestamp_ms=NOW), roll=True)
    buf = bytearray(
        rb.build_batch(
            [(b"a", b"t")],
            timestamp_ms=NOW,
            producer_id=3,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        )
    )
    hs = list(rb.iter_headers(buf))
    log.append(buf, hs, leader_epoch=0, now_ms=NOW)
    ps.update(hs[0], now_ms=NOW)  # transaction open from offset 1
    log.roll(NOW)
    _append(log, rb.build_batch([(b"a", b"3")], timestamp_ms=NOW), roll=True)
    assert cl.cleanable_range(log, NOW).first_uncleanable_offset == 1
    assert cl.cleanable_range(log, NOW, last_stable_offset=log.log_end_offset).first_uncleanable_offset == 3
    log.close()
