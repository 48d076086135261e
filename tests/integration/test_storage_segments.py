"""Issue 3 acceptance: 20 MiB produced with segment.bytes=1 MiB lands in >= 20 Kafka-format segments.

A real broker subprocess and confluent-kafka: every ``.log`` has ``.index`` and ``.timeindex``
siblings, file names are the 20-digit base offset of the segment's first batch (read from the
file itself), segments follow each other without gaps, everything reads back, and
``kbroker dump-log`` decodes a segment and its indexes.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker_proc import REPO_ROOT

TOPIC = "segments"
RECORD = 1024
COUNT = 20 * 1024  # 20 MiB of values
SEGMENT_BYTES = 1_048_576

_HEAD = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_DELTA = struct.Struct(">i")  # lastOffsetDelta at byte 23 of the batch


def _batches(path: Path) -> list[tuple[int, int, int]]:
    """(base offset, last offset, file position) of every batch in a .log file, parsed by hand."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos < len(data):
        base, length = _HEAD.unpack_from(data, pos)
        (delta,) = _LAST_DELTA.unpack_from(data, pos + 23)
        out.append((base, base + delta, pos))
        pos += 12 + length
    assert pos == len(data), f"{path.name}: trailing bytes after the last batch"
    return out


def _produce(bootstrap: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 65536,
                  "compression.type": "none"})
    errors: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for i in range(COUNT):
        value = (b"%08d" % i) * (RECORD // 8)
        while True:
            try:
                p.produce(TOPIC, key=b"%d" % i, value=value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    assert p.flush(60) == 0
    assert not errors, errors[:5]


def _consume_all(bootstrap: str, expected: int) -> list[tuple[int, bytes, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "segments-check", "enable.auto.commit": False,
                  "auto.offset.reset": "error"})
    c.assign([TopicPartition(TOPIC, 0, 0)])
    out: list[tuple[int, bytes, bytes]] = []
    idle = 0
    try:
        while len(out) < expected and idle < 40:
            msgs = c.consume(1000, timeout=0.5)
            idle = 0 if msgs else idle + 1
            for m in msgs:
                assert m.error() is None, m.error()
                out.append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return out


def test_twenty_mib_makes_kafka_named_segments_with_indexes(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, config={"segment.bytes": str(SEGMENT_BYTES)})])[
        TOPIC].result(10)
    _produce(broker.bootstrap)

    part_dir = broker.data_dir / f"{TOPIC}-0"
    logs = sorted(part_dir.glob("*.log"))
    assert len(logs) >= 20, [p.name for p in logs]

    expected_base = 0
    for i, path in enumerate(logs):
        stem = path.name[: -len(".log")]
        assert len(stem) == 20 and stem.isdigit(), path.name
        for suffix in (".index", ".timeindex"):
            assert (part_dir / (stem + suffix)).exists(), f"{stem}{suffix} missing"
        batches = _batches(path)
        assert batches, f"{path.name} is empty"
        # the name is the base offset of its first batch, and segments are contiguous
        assert int(stem) == batches[0][0] == expected_base, (path.name, batches[0][0], expected_base)
        expected_base = batches[-1][1] + 1
        assert path.stat().st_size <= SEGMENT_BYTES
        if i < len(logs) - 1:  # rolled segments have their sparse indexes written out
            index_size = (part_dir / (stem + ".index")).stat().st_size
            time_size = (part_dir / (stem + ".timeindex")).stat().st_size
            assert index_size > 0 and index_size % 8 == 0, (stem, index_size)
            assert time_size > 0 and time_size % 12 == 0, (stem, time_size)
    assert expected_base == COUNT

    got = _consume_all(broker.bootstrap, COUNT)
    assert [o for o, _, _ in got] == list(range(COUNT))
    for offset, key, value in got[:: 997] + got[-3:]:
        assert key == b"%d" % offset
        assert value == (b"%08d" % offset) * (RECORD // 8)

    # kbroker dump-log decodes a rolled segment and its indexes
    second = logs[1]
    stem = second.name[: -len(".log")]
    files = [str(second), str(part_dir / (stem + ".index")), str(part_dir / (stem + ".timeindex"))]
    res = subprocess.run([sys.executable, "-m", "cli", "dump-log", "--print-data", *files], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    first_base = int(stem)
    assert "Traceback" not in res.stderr and "Mismatch" not in out and "invalid bytes" not in out, out[-2000:]
    assert "Non-consecutive" not in out, out[-2000:]
    assert f"Dumping {second}" in out and f"Log starting offset: {first_base}" in out
    assert f"baseOffset: {first_base} " in out, out[:2000]
    assert f"| offset: {first_base} " in out and f" key: {first_base} " in out, out[:2000]
    index_part = out[out.index(f"Dumping {files[1]}"): out.index(f"Dumping {files[2]}")]
    time_part = out[out.index(f"Dumping {files[2]}"):]
    index_lines = [ln for ln in index_part.splitlines() if ln.startswith("offset: ")]
    assert index_lines and all(" position: " in ln for ln in index_lines), index_part[:1000]
    assert [ln for ln in time_part.splitlines() if ln.startswith("timestamp: ")], time_part[:1000]
