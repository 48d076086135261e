"""Tests for storage.dump (kbroker dump-log): output lines for logs, indexes and internal topics."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest

from storage import batch as rb
from storage import dump
from storage import producer_state as ps

SEG = "00000000000000000000"


def _dump(path: Path, print_data: bool = False) -> list[str]:
    out = io.StringIO()
    dump.dump_file(str(path), print_data, out)
    return out.getvalue().splitlines()


def _s(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


@pytest.fixture()
def partition(tmp_path: Path) -> Path:
    d = tmp_path / "orders-0"
    d.mkdir()
    data = rb.build_batch(
        [(b"k1", b"v1"), (None, b"v2", [("h1", b"x"), ("h2", None)])],
        base_offset=0,
        timestamp_ms=1000,
        producer_id=7,
        producer_epoch=1,
        base_sequence=0,
        transactional=True,
    )
    marker = rb.build_control_batch(
        rb.CONTROL_TYPE_ABORT,
        producer_id=7,
        producer_epoch=1,
        coordinator_epoch=5,
        timestamp_ms=2000,
        base_offset=2,
    )
    plain = rb.build_batch([(b"k", None)], base_offset=3, timestamp_ms=3000)
    (d / f"{SEG}.log").write_bytes(data + marker + plain)
    # index: offset 0 @ 0, offset 2 @ len(data), then a preallocated zero tail
    (d / f"{SEG}.index").write_bytes(struct.pack(">iiii", 0, 0, 2, len(data)) + bytes(16))
    (d / f"{SEG}.timeindex").write_bytes(struct.pack(">qiqi", 1000, 1, 3000, 3) + bytes(12))
    (d / f"{SEG}.txnindex").write_bytes(struct.pack(">hqqqq", 0, 7, 0, 2, 0))
    return d


def test_log_batches_shallow(partition: Path) -> None:
    lines = _dump(partition / f"{SEG}.log")
    assert lines[0] == f"Dumping {partition / (SEG + '.log')}"
    assert lines[1] == "Log starting offset: 0"
    batches = [ln for ln in lines if ln.startswith("baseOffset:")]
    assert len(batches) == 3
    assert batches[0].startswith(
        "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 0 lastSequence: 1 producerId: 7 producerEpoch: 1 "
        "partitionLeaderEpoch: -1 isTransactional: true isControl: false deleteHorizonMs: OptionalLong.empty "
        "position: 0 CreateTime: 1000 size: "
    )
    assert batches[0].endswith("isvalid: true")
    assert " magic: 2 compresscodec: none crc: " in batches[0]
    assert "isControl: true" in batches[1]
    assert not any(ln.startswith("|") for ln in lines)  # shallow without --print-data


def test_log_records_with_data(partition: Path) -> None:
    lines = _dump(partition / f"{SEG}.log", print_data=True)
    recs = [ln for ln in lines if ln.startswith("| ")]
    assert recs[0] == (
        "| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 2 sequence: 0 headerKeys: [] key: k1 payload: v1"
    )
    assert (
        recs[1]
        == "| offset: 1 CreateTime: 1000 keySize: -1 valueSize: 2 sequence: 1 headerKeys: [h1,h2] payload: v2"
    )
    assert recs[2].endswith("endTxnMarker: ABORT coordinatorEpoch: 5")
    assert (
        recs[3] == "| offset: 3 CreateTime: 3000 keySize: 1 valueSize: -1 sequence: -1 headerKeys: [] key: k"
    )


def test_torn_tail_and_corrupt_batch(partition: Path) -> None:
    log = partition / f"{SEG}.log"
    data = bytearray(log.read_bytes())
    first_size = rb.parse_header(data).size
    data[first_size - 1] ^= 0xFF  # corrupt the last byte of the first batch -> CRC mismatch
    extra = rb.build_batch([(b"x", b"y")], base_offset=4)
    log.write_bytes(bytes(data) + extra[:40])
    lines = _dump(log, print_data=True)
    batches = [ln for ln in lines if ln.startswith("baseOffset:")]
    assert batches[0].endswith("isvalid: false")
    assert batches[1].endswith("isvalid: true")
    assert f"Found 40 invalid bytes at the end of {SEG}.log (position {len(data)})" in lines
    # the corrupt batch's records cannot be decoded: reported, and dumping goes on
    assert any(ln.startswith("| error decoding records of batch at position 0") for ln in lines)
    assert any(ln.startswith("| offset: 3 ") for ln in lines)


def test_garbage_file_does_not_crash(tmp_path: Path) -> None:
    log = tmp_path / f"{SEG}.log"
    log.write_bytes(b"\x00" * 8 + struct.pack(">i", 5) + b"\x01" * 80)
    lines = _dump(log, print_data=True)
    assert lines[-1].startswith("Found 92 invalid bytes")


def test_empty_log(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000042.log"
    log.write_bytes(b"")
    assert _dump(log) == [f"Dumping {log}", "Log starting offset: 42"]


def test_offset_index(partition: Path) -> None:
    lines = _dump(partition / f"{SEG}.index")
    data_size = rb.parse_header((partition / f"{SEG}.log").read_bytes()).size
    assert lines[1:] == ["offset: 0 position: 0", f"offset: 2 position: {data_size}"]


def test_offset_index_mismatch_and_base_offset(tmp_path: Path) -> None:
    name = "00000000000000000100"
    (tmp_path / f"{name}.log").write_bytes(rb.build_batch([(b"a", b"b")], base_offset=100))
    (tmp_path / f"{name}.index").write_bytes(struct.pack(">ii", 5, 0))
    lines = _dump(tmp_path / f"{name}.index")
    assert lines[1] == "offset: 105 position: 0"
    assert "index offset: 105, log offset: 100" in lines[2]


def test_empty_index(tmp_path: Path) -> None:
    idx = tmp_path / f"{SEG}.index"
    idx.write_bytes(b"")
    assert _dump(idx)[1] == f"{idx} is empty."


def test_time_index(partition: Path) -> None:
    assert _dump(partition / f"{SEG}.timeindex")[1:] == [
        "timestamp: 1000 offset: 1",
        "timestamp: 3000 offset: 3",
    ]


def test_txn_index(partition: Path) -> None:
    assert _dump(partition / f"{SEG}.txnindex")[1:] == [
        "version: 0 producerId: 7 firstOffset: 0 lastOffset: 2 lastStableOffset: 0"
    ]


def test_unknown_file(tmp_path: Path) -> None:
    f = tmp_path / "foo.bin"
    f.write_bytes(b"")
    out = io.StringIO()
    assert dump.dump_file(str(f), out=out) is False
    assert "Ignoring unknown file" in out.getvalue()


def test_transaction_state_decoding(tmp_path: Path) -> None:
    d = tmp_path / "__transaction_state-7"
    d.mkdir()
    key = struct.pack(">h", 0) + _s("tx-1")
    v0 = (
        struct.pack(">hqhib", 0, 9, 2, 60000, 4)
        + struct.pack(">i", 1)
        + _s("orders")
        + struct.pack(">iii", 2, 0, 1)
        + struct.pack(">qq", 50, 40)
    )
    # v1 (flexible): compact strings/arrays and tagged fields (tag 1 = NextProducerId)
    v1 = (
        struct.pack(">hqhib", 1, 9, 3, 60000, 0)
        + b"\x01"  # compact array: length + 1, so 0 entries
        + struct.pack(">qq", 60, -1)
        + b"\x01\x01\x08"  # one tagged field: tag 1, 8 bytes
        + struct.pack(">q", 10)
    )
    (d / f"{SEG}.log").write_bytes(rb.build_batch([(key, v0), (key, v1), (key, None)], timestamp_ms=1))
    recs = [ln for ln in _dump(d / f"{SEG}.log", print_data=True) if ln.startswith("|")]
    assert recs[0].endswith(
        'key: {"type":"0","data":{"transactionalId":"tx-1"}} payload: {"version":"0","data":{"producerId":9,'
        '"producerEpoch":2,"transactionTimeoutMs":60000,"transactionStatus":4,"transactionPartitions":'
        '[{"topic":"orders","partitionIds":[0,1]}],"transactionLastUpdateTimestampMs":50,'
        '"transactionStartTimestampMs":40}}'
    )
    assert '"version":"1"' in recs[1] and '"transactionPartitions":[]' in recs[1]
    assert '"nextProducerId":10' in recs[1]
    assert recs[2].endswith("payload: <DELETE>")


def test_consumer_offsets_decoding(tmp_path: Path) -> None:
    d = tmp_path / "__consumer_offsets-12"
    d.mkdir()
    okey = struct.pack(">h", 1) + _s("g1") + _s("orders") + struct.pack(">i", 3)
    oval = struct.pack(">hqi", 3, 42, 5) + _s("meta") + struct.pack(">q", 1234)
    gkey = struct.pack(">h", 2) + _s("g1")
    subscription = struct.pack(">hi", 0, 1) + _s("orders") + struct.pack(">i", -1)
    assignment = struct.pack(">hi", 0, 1) + _s("orders") + struct.pack(">ii", 1, 3) + struct.pack(">i", -1)
    gval = (
        struct.pack(">h", 3)
        + _s("consumer")
        + struct.pack(">i", 4)
        + _s("range")
        + _s("m-1")
        + struct.pack(">q", 99)
        + struct.pack(">i", 1)
        + _s("m-1")
        + struct.pack(">h", -1)
        + _s("client")
        + _s("/127.0.0.1")
        + struct.pack(">ii", 300000, 10000)
        + struct.pack(">i", len(subscription))
        + subscription
        + struct.pack(">i", len(assignment))
        + assignment
    )
    weird = struct.pack(">h", 99) + b"zz"
    (d / f"{SEG}.log").write_bytes(
        rb.build_batch([(okey, oval), (gkey, gval), (weird, b"x"), (okey, b"\x00")], timestamp_ms=1)
    )
    recs = [ln for ln in _dump(d / f"{SEG}.log", print_data=True) if ln.startswith("|")]
    assert recs[0].endswith(
        'key: {"type":"1","data":{"group":"g1","topic":"orders","partition":3}} payload: '
        '{"version":"3","data":{"offset":42,"leaderEpoch":5,"metadata":"meta","commitTimestamp":1234}}'
    )
    assert '"protocolType":"consumer","generation":4,"protocol":"range","leader":"m-1"' in recs[1]
    assert '"subscription":{"topics":["orders"],"userData":null}' in recs[1]
    assert (
        '"assignment":{"assignedPartitions":[{"topic":"orders","partitions":[3]}],"userData":null}' in recs[1]
    )
    assert recs[2].endswith("key: Unknown record type 99 at offset 2, skipping.")
    assert "key: Error at offset 3, skipping." in recs[3]


def test_main_cli(partition: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = str(partition / f"{SEG}.log")
    idx = str(partition / f"{SEG}.index")
    assert dump.main([log, "--files", idx, "--print-data"]) == 0
    out = capsys.readouterr().out
    assert f"Dumping {log}" in out and f"Dumping {idx}" in out and "payload: v1" in out


def test_snapshot_uses_producer_state_reader(tmp_path: Path) -> None:
    entry = ps.ProducerStateEntry(7, producer_epoch=2, coordinator_epoch=4, last_timestamp=1234)
    entry.add_batch(2, 9, 105, 4, 1234)  # seqs 5..9 at offsets 101..105
    other = ps.ProducerStateEntry(
        8, producer_epoch=0, coordinator_epoch=-1, last_timestamp=99, current_txn_first_offset=110
    )
    other.add_batch(0, 0, 110, 0, 99)
    snap = tmp_path / "00000000000000000106.snapshot"
    ps.write_snapshot_file(snap, [entry, other])
    lines = _dump(snap)
    assert lines[1] == (
        "producerId: 7 producerEpoch: 2 coordinatorEpoch: 4 currentTxnFirstOffset: Optional.empty "
        "lastTimestamp: 1234 firstSequence: 5 lastSequence: 9 lastOffset: 105 offsetDelta: 4 timestamp: 1234"
    )
    assert lines[2].startswith(
        "producerId: 8 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: Optional[110]"
    )


def test_corrupt_snapshot_reported(tmp_path: Path) -> None:
    snap = tmp_path / "00000000000000000001.snapshot"
    snap.write_bytes(b"\x00\x01garbage")
    lines = _dump(snap)
    assert lines[1].startswith(f"Corrupt snapshot {snap}")


def test_missing_or_misnamed_file_is_one_line_not_a_traceback(tmp_path, capsys) -> None:
    """`kbroker dump-log data/nonexistent.log` used to end in a ValueError traceback."""
    assert dump.main([str(tmp_path / "nonexistent.log")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"kbroker dump-log: {tmp_path / 'nonexistent.log'}: no such file"]
    misnamed = tmp_path / "notanoffset.log"
    misnamed.write_bytes(b"")
    assert dump.main([str(misnamed)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"kbroker dump-log: cannot dump {misnamed}:")
