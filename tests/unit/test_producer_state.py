"""Producer state: idempotence rules, transactions, LSO, snapshots, expiration (Kafka semantics)."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest

from storage import batch as rb
from storage.log import Log
from storage.log_config import LogConfig
from storage.producer_state import (
    INT32_MAX,
    BatchMetadata,
    CompletedTxn,
    CorruptSnapshotError,
    ProducerStateEntry,
    ProducerStateError,
    ProducerStateManager,
    VerificationState,
    encode_snapshot,
    read_snapshot_file,
    snapshot_path,
    write_snapshot_file,
)

TS = 1_000_000
PID = 1000


def hdr(pid: int = PID, epoch: int = 0, seq: int = 0, count: int = 1, *, base_offset: int = 0,
        txn: bool = False, control: bool = False, ts: int = TS) -> rb.BatchHeader:
    attrs = (rb.TRANSACTIONAL_MASK if txn else 0) | (rb.CONTROL_MASK if control else 0)
    return rb.BatchHeader(base_offset=base_offset, batch_length=0, partition_leader_epoch=0, magic=2, crc=0,
                          attributes=attrs, last_offset_delta=count - 1, base_timestamp=ts, max_timestamp=ts,
                          producer_id=pid, producer_epoch=epoch, base_sequence=seq, records_count=count)


class Partition:
    """The broker's produce sequence around a ProducerStateManager, with a fake log end offset."""

    def __init__(self, path: Path, **kw: int) -> None:
        self.ps = ProducerStateManager(path, **kw)
        self.leo = 0

    def produce(self, h: rb.BatchHeader, now_ms: int = TS) -> int:
        dup = self.ps.check_duplicate(h)
        if dup is not None:
            return dup.first_offset
        self.ps.validate(h, now_ms=now_ms)
        h.base_offset = self.leo
        self.leo = h.last_offset + 1
        self.ps.update(h, now_ms=now_ms)
        return h.base_offset

    def marker(self, pid: int, epoch: int, commit: bool, coord_epoch: int = 0, **kw: int) -> CompletedTxn | None:
        off = self.leo
        self.ps.validate_marker(pid, epoch, coord_epoch)
        done = self.ps.complete_txn(pid, epoch, commit, coord_epoch, off, timestamp_ms=TS, **kw)
        self.leo = off + 1
        return done


def code_of(fn, *args, **kw) -> int:  # type: ignore[no-untyped-def]
    with pytest.raises(ProducerStateError) as ei:
        fn(*args, **kw)
    return ei.value.error_code


@pytest.fixture
def part(tmp_path: Path) -> Partition:
    d = tmp_path / "topic-0"
    d.mkdir()
    return Partition(d)


# --- idempotence ----------------------------------------------------------------------------------


def test_in_sequence_appends(part: Partition) -> None:
    offsets = [part.produce(hdr(seq=s * 3, count=3)) for s in range(10)]
    assert offsets == list(range(0, 30, 3))
    e = part.ps.last_entry(PID)
    assert e is not None and e.last_seq == 29 and e.producer_epoch == 0
    assert len(e.batch_metadata) == 5 and e.first_seq == 15 and e.first_data_offset == 15
    assert e.last_data_offset == 29 and e.last_offset_delta == 2
    assert part.ps.map_end_offset == 30


@pytest.mark.parametrize("back", [1, 2, 3, 4, 5])
def test_duplicate_of_each_cached_batch_returns_original_offsets(part: Partition, back: int) -> None:
    for s in range(8):
        part.produce(hdr(seq=s * 2, count=2))
    leo = part.leo
    s = 8 - back
    dup = part.ps.check_duplicate(hdr(seq=s * 2, count=2))
    assert isinstance(dup, BatchMetadata)
    assert (dup.first_seq, dup.last_seq, dup.first_offset, dup.last_offset) == (s * 2, s * 2 + 1, s * 2, s * 2 + 1)
    assert part.produce(hdr(seq=s * 2, count=2)) == s * 2
    assert part.leo == leo  # nothing written


def test_same_first_seq_different_range_is_not_a_duplicate(part: Partition) -> None:
    part.produce(hdr(seq=0, count=2))
    assert part.ps.check_duplicate(hdr(seq=0, count=3)) is None
    assert code_of(part.ps.validate, hdr(seq=0, count=3)) == 45


def test_older_than_cached_is_out_of_order(part: Partition) -> None:
    # Kafka keeps 5 batches; an older retry is neither a cached duplicate nor in sequence.
    for s in range(6):
        part.produce(hdr(seq=s))
    assert part.ps.check_duplicate(hdr(seq=0)) is None
    assert code_of(part.ps.validate, hdr(seq=0)) == 45


def test_gap_is_out_of_order(part: Partition) -> None:
    part.produce(hdr(seq=0, count=5))
    assert code_of(part.ps.validate, hdr(seq=6)) == 45
    part.ps.validate(hdr(seq=5))


def test_stale_epoch_is_fenced(part: Partition) -> None:
    part.produce(hdr(epoch=3, seq=0))
    assert code_of(part.ps.validate, hdr(epoch=2, seq=1)) == 47
    assert part.ps.check_duplicate(hdr(epoch=2, seq=0)) is None  # a duplicate must match the epoch


def test_epoch_bump_restarts_sequence_at_zero(part: Partition) -> None:
    for s in range(3):
        part.produce(hdr(epoch=0, seq=s))
    assert code_of(part.ps.validate, hdr(epoch=1, seq=3)) == 45
    assert part.produce(hdr(epoch=1, seq=0)) == 3
    e = part.ps.last_entry(PID)
    assert e is not None and e.producer_epoch == 1 and len(e.batch_metadata) == 1  # old epoch's cache dropped
    assert part.ps.check_duplicate(hdr(epoch=0, seq=2)) is None
    assert code_of(part.ps.validate, hdr(epoch=0, seq=3)) == 47


def test_unknown_producer_may_start_at_any_sequence(part: Partition) -> None:
    # KIP-360 (Kafka 2.5+): no UNKNOWN_PRODUCER_ID; state may have been lost to retention.
    assert part.produce(hdr(pid=7, seq=42)) == 0
    assert code_of(part.ps.validate, hdr(pid=7, seq=44)) == 45
    part.ps.validate(hdr(pid=7, seq=43))


def test_negative_sequence_is_invalid_record(part: Partition) -> None:
    assert code_of(part.ps.validate, hdr(seq=-1)) == 87


def test_sequence_wraps_at_int32_max(part: Partition) -> None:
    part.produce(hdr(seq=INT32_MAX - 1, count=2))
    assert part.ps.last_entry(PID).last_seq == INT32_MAX  # type: ignore[union-attr]
    assert code_of(part.ps.validate, hdr(seq=INT32_MAX)) == 45
    part.produce(hdr(seq=0, count=1))
    part.produce(hdr(seq=1, count=3))
    # a batch that itself crosses the wrap: seqs 2^31-2, 2^31-1, 0, 1
    wrap = hdr(seq=INT32_MAX - 1, count=4)  # last seq = 1
    assert wrap.last_sequence == 1
    p2 = Partition(part.ps.partition_dir)
    p2.produce(hdr(seq=INT32_MAX - 1, count=4))
    dup = p2.ps.check_duplicate(hdr(seq=INT32_MAX - 1, count=4))
    assert dup is not None and dup.first_seq == INT32_MAX - 1 and dup.last_seq == 1 and dup.first_offset == 0
    p2.ps.validate(hdr(seq=2))


def test_producers_are_independent(part: Partition) -> None:
    part.produce(hdr(pid=1, seq=0))
    part.produce(hdr(pid=2, seq=0))
    part.produce(hdr(pid=1, seq=1))
    assert code_of(part.ps.validate, hdr(pid=2, seq=2)) == 45
    assert {e.producer_id for e in part.ps.active_producers()} == {1, 2}


def test_batches_without_producer_id_are_ignored(part: Partition) -> None:
    h = hdr(pid=-1, epoch=-1, seq=-1)
    assert part.ps.check_duplicate(h) is None
    part.ps.validate(h)
    part.ps.update(h)
    assert part.ps.active_producers() == []


# --- transactions ---------------------------------------------------------------------------------


def test_txn_start_complete_and_first_unstable_offset(part: Partition) -> None:
    ps = part.ps
    assert ps.first_unstable_offset() is None
    part.produce(hdr(pid=1, seq=0, count=2, txn=True))  # 0-1
    part.produce(hdr(pid=2, seq=0, txn=True))  # 2
    part.produce(hdr(pid=1, seq=2, txn=True))  # 3
    part.produce(hdr(pid=3, epoch=0, seq=0))  # 4, idempotent only
    assert ps.ongoing_txns() == {1: 0, 2: 2}
    assert ps.first_unstable_offset() == 0
    assert ps.last_entry(1).current_txn_first_offset == 0  # type: ignore[union-attr]
    done = part.marker(1, 0, commit=True, coord_epoch=5)  # offset 5
    assert done == CompletedTxn(1, 0, 5, False, 2)  # LSO for .txnindex: the other open txn
    assert ps.first_unstable_offset() == 2
    assert ps.last_entry(1).current_txn_first_offset is None  # type: ignore[union-attr]
    assert ps.last_entry(1).coordinator_epoch == 5  # type: ignore[union-attr]
    done = part.marker(2, 0, commit=False, coord_epoch=5)  # offset 6
    assert done == CompletedTxn(2, 2, 6, True, 7)
    assert ps.last_stable_offset(done) == 7
    assert ps.first_unstable_offset() is None and ps.ongoing_txns() == {}
    # the producer continues its sequence in the next transaction
    part.produce(hdr(pid=1, seq=3, txn=True))
    assert ps.ongoing_txns() == {1: 7}


def test_non_transactional_write_during_open_txn(part: Partition) -> None:
    part.produce(hdr(seq=0, txn=True))
    assert code_of(part.ps.validate, hdr(seq=1, txn=False)) == 48


def test_unverified_transactional_batch_is_rejected(part: Partition) -> None:
    h = hdr(seq=0, txn=True)
    assert code_of(part.ps.validate, h, verification_state=VerificationState(verified=False)) == 48
    part.ps.validate(h, verification_state=VerificationState(verified=True))
    part.produce(h)
    # once the txn is open, later batches need no verification
    part.ps.validate(hdr(seq=1, txn=True), verification_state=VerificationState(verified=False))


def test_marker_epoch_and_coordinator_fencing(part: Partition) -> None:
    part.produce(hdr(epoch=4, seq=0, txn=True))
    assert code_of(part.ps.validate_marker, PID, 3, 0) == 47
    part.marker(PID, 4, commit=True, coord_epoch=7)
    part.produce(hdr(epoch=4, seq=1, txn=True))
    assert code_of(part.ps.complete_txn, PID, 4, True, 6, part.leo) == 52
    assert part.ps.ongoing_txns() == {PID: 2}  # the rejected marker changed nothing
    # TV2: marker epoch must exceed the data epoch
    assert code_of(part.ps.validate_marker, PID, 4, 7, transaction_version=2) == 47
    part.ps.validate_marker(PID, 5, 7, transaction_version=2)


def test_tv2_retry_of_finished_marker_is_accepted(part: Partition) -> None:
    part.produce(hdr(epoch=4, seq=0, txn=True))
    part.marker(PID, 5, commit=True, transaction_version=2)
    part.ps.validate_marker(PID, 5, 0, transaction_version=2)  # idempotent retry
    assert part.marker(PID, 5, commit=True, transaction_version=2) is None


def test_marker_with_epoch_bump_requires_sequence_zero(part: Partition) -> None:
    part.produce(hdr(epoch=0, seq=0, txn=True))
    part.marker(PID, 1, commit=False)  # coordinator aborted with a bumped epoch
    e = part.ps.last_entry(PID)
    assert e is not None and e.producer_epoch == 1 and e.is_empty
    assert code_of(part.ps.validate, hdr(epoch=1, seq=1, txn=True)) == 45
    assert code_of(part.ps.validate, hdr(epoch=0, seq=1, txn=True)) == 47
    part.ps.validate(hdr(epoch=1, seq=0, txn=True))


def test_marker_without_open_txn(part: Partition) -> None:
    assert part.marker(55, 2, commit=False, coord_epoch=3) is None
    e = part.ps.last_entry(55)
    assert e is not None and e.producer_epoch == 2 and e.coordinator_epoch == 3
    assert part.ps.first_unstable_offset() is None


def test_unreplicated_markers_hold_the_lso_until_the_high_watermark(part: Partition) -> None:
    part.produce(hdr(seq=0, count=3, txn=True))  # 0-2
    part.marker(PID, 0, commit=True)  # 3
    assert part.ps.first_unstable_offset(high_watermark=3) == 0
    assert part.ps.first_unstable_offset(high_watermark=4) is None
    part.produce(hdr(seq=3, txn=True))  # 4
    part.marker(PID, 0, commit=True)  # 5
    assert part.ps.first_unstable_offset() is None  # without a HW, markers count as replicated


# --- replay from the log --------------------------------------------------------------------------


def test_update_from_log_with_control_batches(tmp_path: Path) -> None:
    ps = ProducerStateManager(tmp_path)
    ps.update_from_log(hdr(pid=1, seq=0, count=2, txn=True, base_offset=10))
    ps.update_from_log(hdr(pid=2, seq=0, txn=True, base_offset=12))
    ps.update_from_log(hdr(pid=-1, epoch=-1, seq=-1, base_offset=13))
    assert ps.map_end_offset == 14 and ps.ongoing_txns() == {1: 10, 2: 12}
    abort = rb.build_control_batch(rb.CONTROL_TYPE_ABORT, producer_id=1, producer_epoch=0, coordinator_epoch=9,
                                   timestamp_ms=TS, base_offset=14)
    h = rb.parse_header(abort)
    done = ps.update_from_log(h, abort)
    assert done == CompletedTxn(1, 10, 14, True, 12)
    assert ps.last_entry(1).coordinator_epoch == 9  # type: ignore[union-attr]
    # a buffer holding several batches works too (header.position locates the marker)
    commit = rb.build_control_batch(rb.CONTROL_TYPE_COMMIT, producer_id=2, producer_epoch=0, coordinator_epoch=9,
                                    timestamp_ms=TS, base_offset=15)
    buf = abort + commit
    h2 = rb.parse_header(buf, len(abort))
    assert ps.update_from_log(h2, buf) == CompletedTxn(2, 12, 15, False, 16)
    assert ps.first_unstable_offset() is None and ps.map_end_offset == 16
    # without the bytes the transaction still ends
    ps.update_from_log(hdr(pid=3, seq=0, txn=True, base_offset=16))
    assert ps.update_from_log(hdr(pid=3, seq=-1, control=True, base_offset=17)) is not None
    assert ps.ongoing_txns() == {}
    # replay does not validate: a sequence gap is accepted
    ps.update_from_log(hdr(pid=1, seq=50, base_offset=18))
    assert ps.last_entry(1).last_seq == 50  # type: ignore[union-attr]


# --- snapshots ------------------------------------------------------------------------------------


def test_snapshot_byte_layout_is_pinned(tmp_path: Path) -> None:
    e = ProducerStateEntry(producer_id=0x0102030405060708, producer_epoch=3, coordinator_epoch=9,
                           last_timestamp=1_700_000_000_000, current_txn_first_offset=100)
    e.batch_metadata.append(BatchMetadata(last_seq=41, last_offset=120, offset_delta=4, timestamp=1_700_000_000_000))
    empty = ProducerStateEntry(producer_id=5, producer_epoch=1, coordinator_epoch=2, last_timestamp=77)
    data = encode_snapshot([e, empty])
    body = struct.pack(">i", 2)
    body += struct.pack(">q", 5) + struct.pack(">h", 1) + struct.pack(">i", -1) + struct.pack(">q", -1)
    body += struct.pack(">i", 0) + struct.pack(">q", 77) + struct.pack(">i", 2) + struct.pack(">q", -1)
    body += struct.pack(">q", 0x0102030405060708) + struct.pack(">h", 3) + struct.pack(">i", 41)
    body += struct.pack(">q", 120) + struct.pack(">i", 4) + struct.pack(">q", 1_700_000_000_000)
    body += struct.pack(">i", 9) + struct.pack(">q", 100)
    assert data == struct.pack(">hI", 1, crc32c.crc32c(body)) + body
    assert len(data) == 2 + 4 + 4 + 2 * 46
    assert data.hex() == (
        "0001" "484a4201" "00000002"
        "0000000000000005" "0001" "ffffffff" "ffffffffffffffff" "00000000" "000000000000004d" "00000002"
        "ffffffffffffffff"
        "0102030405060708" "0003" "00000029" "0000000000000078" "00000004" "0000018bcfe56800" "00000009"
        "0000000000000064"
    )
    path = snapshot_path(tmp_path, 120)
    assert path.name == "00000000000000000120.snapshot"
    write_snapshot_file(path, [e, empty])
    assert path.read_bytes() == data
    back = {x.producer_id: x for x in read_snapshot_file(path)}
    assert back[5].is_empty and back[5].last_seq == -1 and back[5].producer_epoch == 1
    r = back[0x0102030405060708]
    assert (r.producer_epoch, r.coordinator_epoch, r.last_timestamp, r.current_txn_first_offset) == (3, 9, 1_700_000_000_000, 100)
    assert list(r.batch_metadata) == [BatchMetadata(41, 120, 4, 1_700_000_000_000)]
    assert r.first_seq == 37


def test_snapshot_round_trip_through_reload(part: Partition) -> None:
    for s in range(7):
        part.produce(hdr(pid=1, epoch=2, seq=s))
    part.produce(hdr(pid=2, seq=0, count=3, txn=True))
    part.marker(3, 0, commit=True, coord_epoch=4)
    part.produce(hdr(pid=4, seq=0, txn=True))
    part.ps.take_snapshot(part.leo)
    ps2 = ProducerStateManager(part.ps.partition_dir)
    ps2.truncate_and_reload(0, part.leo, TS)
    assert ps2.map_end_offset == part.leo
    assert ps2.ongoing_txns() == {2: 7, 4: 11} and ps2.first_unstable_offset() == 7
    e = ps2.last_entry(1)
    assert e is not None and e.producer_epoch == 2 and e.last_seq == 6 and e.last_data_offset == 6
    assert ps2.last_entry(3).coordinator_epoch == 4  # type: ignore[union-attr]
    # only the newest batch survives a snapshot (Kafka's format): it still dedupes, older ones do not
    assert ps2.check_duplicate(hdr(pid=1, epoch=2, seq=6)) is not None
    assert ps2.check_duplicate(hdr(pid=1, epoch=2, seq=5)) is None
    ps2.validate(hdr(pid=1, epoch=2, seq=7))
    assert code_of(ps2.validate, hdr(pid=1, epoch=1, seq=7)) == 47


def test_reload_selects_snapshot_and_deletes_out_of_range(tmp_path: Path) -> None:
    ps = ProducerStateManager(tmp_path)
    ps.update(hdr(pid=1, seq=0, base_offset=0))
    for off in (0, 5, 10, 20):
        ps.take_snapshot(off)
    ps.update(hdr(pid=2, seq=0, base_offset=20))
    ps.take_snapshot(30)
    ps2 = ProducerStateManager(tmp_path)
    ps2.truncate_and_reload(0, 25, TS)
    # >LEO and == log start are dropped (Kafka); 20 is the newest valid one
    assert ps2.snapshot_offsets() == [5, 10, 20]
    assert ps2.map_end_offset == 20 and ps2.last_entry(2) is None and ps2.last_entry(1) is not None
    ps2.delete_snapshots_below(10)
    assert ps2.snapshot_offsets() == [10, 20]
    ps3 = ProducerStateManager(tmp_path)
    ps3.truncate_and_reload(15, 25, TS)
    assert ps3.snapshot_offsets() == [20]
    ps4 = ProducerStateManager(tmp_path)
    ps4.truncate_and_reload(20, 25, TS)  # nothing usable: start empty at the log start
    assert ps4.snapshot_offsets() == [] and ps4.map_end_offset == 20 and ps4.active_producers() == []


def test_reload_keeps_state_when_map_is_current(tmp_path: Path) -> None:
    ps = ProducerStateManager(tmp_path)
    ps.update(hdr(pid=1, seq=0, base_offset=0, count=4))
    ps.truncate_and_reload(0, 4, TS)
    assert ps.last_entry(1) is not None and ps.map_end_offset == 4
    ps.truncate_fully_and_start_at(50)
    assert ps.active_producers() == [] and ps.map_end_offset == 50


@pytest.mark.parametrize("damage", ["crc", "version", "truncate", "empty"])
def test_corrupt_snapshot_is_deleted_and_older_one_used(tmp_path: Path, damage: str) -> None:
    ps = ProducerStateManager(tmp_path)
    ps.update(hdr(pid=1, seq=0, base_offset=0))
    ps.take_snapshot(1)
    ps.update(hdr(pid=2, seq=0, base_offset=1))
    ps.take_snapshot(2)
    path = snapshot_path(tmp_path, 2)
    data = bytearray(path.read_bytes())
    if damage == "crc":
        data[-1] ^= 0xFF
    elif damage == "version":
        data[1] = 2
    elif damage == "truncate":
        del data[-10:]
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptSnapshotError):
        read_snapshot_file(path)
    ps2 = ProducerStateManager(tmp_path)
    ps2.truncate_and_reload(0, 2, TS)
    assert not path.exists()
    assert ps2.map_end_offset == 1 and ps2.last_entry(1) is not None and ps2.last_entry(2) is None


def test_all_snapshots_corrupt_means_full_replay(tmp_path: Path) -> None:
    snapshot_path(tmp_path, 7).write_bytes(b"\x00\x01garbage")
    ps = ProducerStateManager(tmp_path)
    ps.truncate_and_reload(0, 9, TS)
    assert ps.map_end_offset == 0 and ps.snapshot_offsets() == []


def test_snapshot_write_is_atomic_and_leaves_no_tmp(tmp_path: Path) -> None:
    ps = ProducerStateManager(tmp_path)
    ps.update(hdr(seq=0))
    ps.take_snapshot(1)
    ps.take_snapshot(1)  # overwrite in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00000000000000000001.snapshot"]


# --- expiration -----------------------------------------------------------------------------------


def test_expiration(tmp_path: Path) -> None:
    ps = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000)
    ps.update(hdr(pid=1, seq=0, ts=TS, base_offset=0))
    ps.update(hdr(pid=2, seq=0, ts=TS + 500, base_offset=1))
    ps.update(hdr(pid=3, seq=0, ts=TS, base_offset=2, txn=True))
    ps.remove_expired(TS + 999)
    assert {e.producer_id for e in ps.active_producers()} == {1, 2, 3}
    ps.remove_expired(TS + 1000)
    # 1 idle for the full expiration; 3 is as old but has an open transaction
    assert {e.producer_id for e in ps.active_producers()} == {2, 3}
    ps.take_snapshot(3)
    ps2 = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000)
    ps2.truncate_and_reload(0, 3, TS + 1500)  # expired entries are not loaded
    assert {e.producer_id for e in ps2.active_producers()} == {3}
    # an expired producer's state is gone: it may continue at any sequence again
    ps2.validate(hdr(pid=1, seq=17))


# --- with the real log ----------------------------------------------------------------------------

CFG = LogConfig(segment_bytes=1200, index_interval_bytes=200)


def _append(lg: Log, ps: ProducerStateManager, h_fields: dict, now: int = TS) -> int:
    buf = bytearray(rb.build_batch([(b"k", b"v" * 60)] * h_fields.get("n", 1), timestamp_ms=now,
                                   producer_id=h_fields["pid"], producer_epoch=h_fields.get("epoch", 0),
                                   base_sequence=h_fields["seq"], transactional=h_fields.get("txn", False)))
    headers = list(rb.iter_headers(buf))
    h = headers[0]
    dup = ps.check_duplicate(h)
    if dup is not None:
        return dup.first_offset
    ps.validate(h, now_ms=now)
    res = lg.append(buf, headers, leader_epoch=1, now_ms=now)
    ps.update(h, now_ms=now)
    return res.first_offset


def test_state_survives_clean_and_unclean_restart(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    ps = ProducerStateManager(d)
    lg = Log.open(d, CFG, producer_state=ps, now_ms=TS)
    for s in range(0, 40, 2):
        _append(lg, ps, {"pid": 9, "seq": s, "n": 2})
    _append(lg, ps, {"pid": 10, "seq": 0, "txn": True})
    leo = lg.log_end_offset
    assert len(lg.segments) > 2 and ps.snapshot_offsets()  # rolls took snapshots
    lg.close()
    for clean in (True, False):
        ps2 = ProducerStateManager(d)
        lg2 = Log.open(d, CFG, producer_state=ps2, clean_shutdown=clean, now_ms=TS)
        assert ps2.map_end_offset == leo
        assert ps2.last_entry(9).last_seq == 39  # type: ignore[union-attr]
        assert ps2.ongoing_txns() == {10: leo - 1}
        assert _append(lg2, ps2, {"pid": 9, "seq": 38, "n": 2}) == leo - 3  # retry of the last batch
        assert code_of(_append, lg2, ps2, {"pid": 9, "seq": 41}) == 45
        if clean:
            lg2.close()
        else:
            assert _append(lg2, ps2, {"pid": 9, "seq": 40}) == leo
            for s in lg2.segments:  # crash: no final snapshot
                s.close_fd()
    # after the unclean stop, the newest snapshot on disk is older than the log end: replay fills in
    assert max(ProducerStateManager(d).snapshot_offsets()) == leo
    ps3 = ProducerStateManager(d)
    Log.open(d, CFG, producer_state=ps3, now_ms=TS).close()
    assert ps3.map_end_offset == leo + 1
    assert ps3.last_entry(9).last_seq == 40  # type: ignore[union-attr]
    assert ps3.ongoing_txns() == {10: leo - 1}
