"""Issue 3 acceptance: crashes lose nothing acknowledged, and damaged files are repaired on restart.

1. kill -9 during a sustained acks=all produce from confluent-kafka: after the restart every
   acknowledged record is present exactly once, at its acknowledged offset, in order, with its
   value; offsets are contiguous per partition. (The producer is not idempotent and is purged
   before the restart, so nothing is retried into the new broker: any record in the log that was
   not acknowledged was written before the kill and lost only its response.)
2. A torn tail (the active ``.log`` truncated mid-batch), a deleted ``.index`` and a corrupted
   ``.timeindex``: the restart truncates the torn batch and rebuilds the indexes, says so in its
   log, keeps every record before the torn batch, and the partition serves produce, consume and
   timestamp lookups again.
"""

from __future__ import annotations

import random
import re
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

_HEAD = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_DELTA = struct.Struct(">i")  # lastOffsetDelta at byte 23 of a batch
PAYLOAD = 180


def _value(seq: int) -> bytes:
    return b"value-%d-" % seq + bytes([seq % 251]) * PAYLOAD


def _create(bootstrap: str, topic: str, partitions: int, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, config=config)])[topic].result(15)


def _batches(path: Path) -> list[tuple[int, int, int, int]]:
    """(base offset, last offset, position, size) of each whole batch in a .log file."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos + 61 <= len(data):
        base, length = _HEAD.unpack_from(data, pos)
        if pos + 12 + length > len(data):
            break
        (delta,) = _LAST_DELTA.unpack_from(data, pos + 23)
        out.append((base, base + delta, pos, 12 + length))
        pos += 12 + length
    return out


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-probe"})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                for p in range(partitions)]
    finally:
        c.close()


def _read_partition(bootstrap: str, topic: str, partition: int, end: int,
                    start: int = 0) -> list[tuple[int, bytes | None, bytes | None, int]]:
    """(offset, key, value, timestamp) of every record in [start, end), read with confluent-kafka."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-check", "enable.auto.commit": False,
                  "auto.offset.reset": "error", "fetch.max.bytes": 4 << 20})
    out: list[tuple[int, bytes | None, bytes | None, int]] = []
    try:
        if end <= start:
            return out
        c.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + 60
        while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
            for m in c.consume(2000, timeout=0.5):
                if m.error() is not None:
                    raise KafkaException(m.error())
                if m.offset() < end:
                    out.append((m.offset(), m.key(), m.value(), m.timestamp()[1]))
    finally:
        c.close()
    return out


# --------------------------------------------------------------------------------------------
# 1. kill -9 under sustained acks=all load
# --------------------------------------------------------------------------------------------


class _Load:
    """A non-idempotent acks=all producer whose keys are global sequence numbers."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.topic = topic
        self.partitions = partitions
        self.acked: dict[int, tuple[int, int]] = {}  # seq -> (partition, offset)
        self.failed = 0
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2, "batch.size": 16384,
            "enable.idempotence": False, "max.in.flight.requests.per.connection": 5,
            "message.timeout.ms": 20000, "reconnect.backoff.max.ms": 200,
        })

    def _on_delivery(self, err: object, msg: object) -> None:
        seq = int(msg.key())  # type: ignore[attr-defined]
        if err is None:
            self.acked[seq] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]
        else:
            self.failed += 1

    def send(self, seq: int) -> None:
        while True:
            try:
                self.producer.produce(self.topic, key=b"%d" % seq, value=_value(seq), partition=seq % self.partitions,
                                      on_delivery=self._on_delivery)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.producer.poll(0)

    def run_until_acked(self, first_seq: int, acks: int, kill: object) -> int:
        """Send from ``first_seq`` until ``acks`` new acknowledgements arrived, then call ``kill``
        with requests still in flight and keep queueing a little; returns the next sequence number."""
        target = len(self.acked) + acks
        seq = first_seq
        deadline = time.monotonic() + 120
        while len(self.acked) < target:
            assert time.monotonic() < deadline, "the broker stopped acknowledging"
            self.send(seq)
            seq += 1
        kill()  # type: ignore[operator]
        for _ in range(500):  # sustained: the client keeps being fed while the broker is gone
            self.send(seq)
            seq += 1
        return seq

    def drop_outstanding(self) -> None:
        """Fail whatever was not acknowledged, so no retry reaches the restarted broker."""
        self.producer.purge(in_queue=True, in_flight=True, blocking=True)
        assert self.producer.flush(30) == 0


def _check_log_after_crash(bootstrap: str, topic: str, partitions: int, acked: dict[int, tuple[int, int]],
                           sent: int) -> int:
    """Every acknowledged record at its offset exactly once; offsets contiguous; keys unique and in
    send order per partition; values intact. Returns how many records the log holds."""
    ends = _end_offsets(bootstrap, topic, partitions)
    by_partition: dict[int, dict[int, int]] = {p: {} for p in range(partitions)}  # offset -> seq
    for seq, (p, off) in acked.items():
        by_partition[p][off] = seq
    total = 0
    seen: set[int] = set()
    for p in range(partitions):
        records = _read_partition(bootstrap, topic, p, ends[p])
        offsets = [r[0] for r in records]
        assert offsets == list(range(ends[p])), f"partition {p}: offsets not contiguous from 0 to {ends[p]}"
        prev = -1
        for off, key, value, _ in records:
            seq = int(key)  # type: ignore[arg-type]
            assert seq not in seen, f"sequence {seq} appears twice (partition {p}, offset {off})"
            seen.add(seq)
            assert 0 <= seq < sent and seq % partitions == p, (p, off, seq)
            assert seq > prev, f"partition {p}: sequence {seq} at offset {off} follows {prev}"
            prev = seq
            assert value == _value(seq), f"partition {p} offset {off}: value of {seq} damaged"
        for off, seq in by_partition[p].items():
            assert off < ends[p], f"acknowledged sequence {seq} at {p}/{off} lost (end offset {ends[p]})"
            assert int(records[off][1]) == seq, (p, off, seq, records[off][1])  # type: ignore[arg-type]
        total += len(records)
    assert set(acked) <= seen
    return total


def _crash_cycles(broker_factory, *, partitions: int, cycles: int, acks_per_cycle: int,
                  segment_bytes: int, seed: int) -> None:
    broker = broker_factory({"log.flush.offset.checkpoint.interval.ms": "1000"})
    topic = "crash"
    _create(broker.bootstrap, topic, partitions, {"segment.bytes": str(segment_bytes)})
    rng = random.Random(seed)
    acked: dict[int, tuple[int, int]] = {}
    seq = 0
    for cycle in range(cycles):
        load = _Load(broker.bootstrap, topic, partitions)
        # vary the kill point so it lands at different places relative to rolls and flushes
        seq = load.run_until_acked(seq, acks_per_cycle + rng.randrange(acks_per_cycle // 2), broker.kill)
        load.drop_outstanding()
        assert load.acked, "nothing was acknowledged before the kill"
        overlap = set(load.acked) & set(acked)
        assert not overlap
        acked.update(load.acked)
        broker.start()
        assert "unclean shutdown" in broker.log_text().split(f"kbroker start #{broker.starts}")[-1]
        held = _check_log_after_crash(broker.bootstrap, topic, partitions, acked, seq)
        print(f"cycle {cycle}: acked {len(acked)} held {held} sent {seq} failed {load.failed}")
        assert held >= len(acked), (cycle, held, len(acked))
    # the recovered log keeps taking appends at the right offsets
    ends = _end_offsets(broker.bootstrap, topic, partitions)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    got: list[tuple[int, int]] = []
    for part in range(partitions):
        p.produce(topic, key=b"%d" % seq, value=_value(seq), partition=part,
                  on_delivery=lambda err, m: got.append((m.partition(), m.offset())) if err is None else None)
        seq += 1
    assert p.flush(30) == 0
    assert sorted(got) == [(part, ends[part]) for part in range(partitions)]


def test_kill9_during_acks_all_load_loses_nothing_acknowledged(broker_factory):
    _crash_cycles(broker_factory, partitions=2, cycles=1, acks_per_cycle=12000, segment_bytes=262144, seed=1)


@pytest.mark.slow
def test_repeated_kill9_under_load_loses_nothing_acknowledged(broker_factory):
    _crash_cycles(broker_factory, partitions=3, cycles=6, acks_per_cycle=40000, segment_bytes=524288, seed=7)


# --------------------------------------------------------------------------------------------
# 2. torn tail, deleted .index, corrupt .timeindex
# --------------------------------------------------------------------------------------------

TS0 = 1_700_000_000_000  # explicit record timestamps make timestamp lookups checkable


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_torn_tail_and_damaged_indexes_are_repaired_on_restart(broker_factory, how):
    broker = broker_factory()
    topic = "torn"
    _create(broker.bootstrap, topic, 1, {"segment.bytes": "65536", "message.timestamp.type": "CreateTime"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    total = 3000
    for i in range(total):
        p.produce(topic, key=b"%d" % i, value=_value(i), partition=0, timestamp=TS0 + i)
        if i % 40 == 39:  # many batches per segment, so the active segment has several
            assert p.flush(10) == 0
    assert p.flush(10) == 0
    part_dir = broker.data_dir / f"{topic}-0"
    # Batch boundaries depend on the client, so the active segment may have just rolled: add
    # batches until it holds at least two (one to tear, one before it that must survive).
    while len(_batches(sorted(part_dir.glob("*.log"))[-1])) < 2:
        for i in range(total, total + 40):
            p.produce(topic, key=b"%d" % i, value=_value(i), partition=0, timestamp=TS0 + i)
        assert p.flush(10) == 0
        total += 40
    before = _read_partition(broker.bootstrap, topic, 0, total)
    assert [r[0] for r in before] == list(range(total))

    if how == "sigterm":
        assert broker.stop() == 0
    else:
        broker.kill()

    logs = sorted(part_dir.glob("*.log"))
    assert len(logs) >= 4, [x.name for x in logs]
    active = logs[-1]
    batches = _batches(active)
    assert len(batches) >= 2, batches
    torn_base, _, torn_pos, torn_size = batches[-1]
    with open(active, "r+b") as f:  # tear the last batch in half
        f.truncate(torn_pos + torn_size // 2)
    deleted_index = logs[0].with_suffix(".index")
    assert deleted_index.stat().st_size > 0
    deleted_index.unlink()
    corrupt_time = logs[1].with_suffix(".timeindex")
    with open(corrupt_time, "ab") as f:  # a partial 12-byte entry: size no longer a multiple
        f.write(b"\xff" * 7)
    second_base = int(logs[1].stem)

    broker.start()
    text = broker.log_text().split(f"kbroker start #{broker.starts}")[-1]
    assert re.search(rf"Truncated \d+ invalid bytes at position {torn_pos} of \S*{active.name}", text), text
    assert re.search(rf"rebuilding indexes of {logs[0].name}: .*{deleted_index.name}", text), text
    assert re.search(rf"rebuilding indexes of {logs[1].name}: .*{corrupt_time.name}", text), text
    # the repaired files are well-formed again
    assert deleted_index.exists() and deleted_index.stat().st_size % 8 == 0
    assert corrupt_time.stat().st_size % 12 == 0

    # every record before the torn batch is intact, nothing at or after it survived
    assert _end_offsets(broker.bootstrap, topic, 1) == [torn_base]
    after = _read_partition(broker.bootstrap, topic, 0, torn_base)
    assert after == before[:torn_base]

    # timestamp lookups go through the rebuilt time index (and the rebuilt offset index)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ts-probe"})
    try:
        for off in (0, 17, second_base, second_base + 5, torn_base - 1):
            res = c.offsets_for_times([TopicPartition(topic, 0, TS0 + off)], timeout=10)
            assert res[0].error is None and res[0].offset == off, (off, res[0])
    finally:
        c.close()

    # and the partition takes appends right after the last intact batch
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    got: list[int] = []
    for i in range(10):
        p.produce(topic, key=b"new%d" % i, value=b"new", partition=0,
                  on_delivery=lambda err, m: got.append(m.offset()) if err is None else None)
    assert p.flush(10) == 0
    assert got == list(range(torn_base, torn_base + 10))
    tail = _read_partition(broker.bootstrap, topic, 0, torn_base + 10, start=torn_base - 1)
    assert [r[0] for r in tail] == list(range(torn_base - 1, torn_base + 10))
    assert [r[1] for r in tail[1:]] == [b"new%d" % i for i in range(10)]


# --------------------------------------------------------------------------------------------
# 3. kill -9 while the cleaner rewrites a compacted topic
# --------------------------------------------------------------------------------------------


def _cleaner_checkpoint(data_dir: Path, topic: str) -> int:
    try:
        lines = (data_dir / "cleaner-offset-checkpoint").read_text().splitlines()
    except FileNotFoundError:
        return -1
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[0] == topic and parts[1] == "0":
            return int(parts[2])
    return -1


def _check_compacted(bootstrap: str, topic: str, end: int, produced: dict[int, tuple[bytes, bytes]],
                     latest: dict[bytes, int]) -> int:
    """Whatever the cleaner got done: records as produced, offsets increasing, every key's latest
    record present and last. Returns the number of records read."""
    records = _read_partition(bootstrap, topic, 0, end)
    offsets = [r[0] for r in records]
    assert all(a < b for a, b in zip(offsets, offsets[1:], strict=False))
    last: dict[bytes, int] = {}
    for off, key, value, _ in records:
        assert produced[off] == (key, value), f"offset {off} holds something else"
        last[key] = off  # type: ignore[index]
    assert last == latest, "a key's latest record is missing"
    return len(records)


def test_kill9_during_compaction_keeps_a_consistent_log(broker_factory):
    broker = broker_factory({"log.cleaner.backoff.ms": "100", "log.segment.delete.delay.ms": "60000"})
    topic = "crash-compact"
    _create(broker.bootstrap, topic, 1, {"cleanup.policy": "compact", "segment.bytes": "16384",
                                         "min.cleanable.dirty.ratio": "0.01", "file.delete.delay.ms": "60000"})
    produced: dict[int, tuple[bytes, bytes]] = {}
    latest: dict[bytes, int] = {}
    rng = random.Random(3)
    part_dir = broker.data_dir / f"{topic}-0"
    for cycle in range(4):
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
        records = [(b"key%03d" % (i % 300), b"c%d-%d-" % (cycle, i) + b"x" * 100) for i in range(2500)]
        # The last record's batch (~16,360 bytes) cannot share a 16 KiB segment with any other
        # batch, so it always starts the active segment and the cleaner can clean everything
        # before it. (With a 15,000-byte value it fitted behind a few 1-record batches when the
        # client sent one record per request, and the checkpoint never reached it.)
        records.append((b"roll%d" % cycle, b"r" * 16280))
        got: list[int] = []

        def on_delivery(err: object, m: object, got: list[int] = got) -> None:
            if err is None:
                got.append(m.offset())  # type: ignore[attr-defined]

        for i, (k, v) in enumerate(records):
            if len(v) > 1000:
                p.flush(10)
            p.produce(topic, key=k, value=v, partition=0, on_delivery=on_delivery)
            if i % 25 == 24 or len(v) > 1000:
                p.flush(10)
        assert p.flush(10) == 0
        assert len(got) == len(records)
        for off, rec in zip(got, records, strict=True):
            produced[off] = rec
            latest[rec[0]] = off
        end = max(got) + 1
        assert (part_dir / f"{end - 1:020d}.log").exists(), "the roll record did not start a segment"
        before = _cleaner_checkpoint(broker.data_dir, topic)
        # kill once the cleaner is at work (its .cleaned output exists), at a varying point after;
        # on a slow machine its round may even have finished before `before` was read
        deadline = time.monotonic() + 30
        while not list(part_dir.glob("*.cleaned")) and before == (ck := _cleaner_checkpoint(broker.data_dir, topic)) \
                and ck < end - 1:
            assert time.monotonic() < deadline, "the cleaner never started"
            time.sleep(0.002)
        time.sleep(rng.random() * 0.05)
        broker.kill()
        broker.start()
        text = broker.log_text().split(f"kbroker start #{broker.starts}")[-1]
        assert "unclean shutdown" in text
        _check_compacted(broker.bootstrap, topic, end, produced, latest)
        # the cleaner finishes after the restart: one record per key below the active segment
        roll = latest[b"roll%d" % cycle]
        deadline = time.monotonic() + 60
        while _cleaner_checkpoint(broker.data_dir, topic) < roll:
            assert time.monotonic() < deadline, "the cleaner did not finish after the restart"
            time.sleep(0.05)
        n = _check_compacted(broker.bootstrap, topic, end, produced, latest)
        assert n == len(latest), (cycle, n, len(latest))
        assert not list(part_dir.glob("*.cleaned")) and not list(part_dir.glob("*.swap"))
