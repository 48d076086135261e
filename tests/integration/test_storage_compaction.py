"""Issue 3 acceptance: a compacted topic keeps one record per live key, readers stay consistent.

A topic filled with overwrites and tombstones across many segments (written while its
cleanup.policy is still ``delete``), then switched to ``compact`` while a reader thread keeps
reading it from offset 0 with confluent-kafka. Checked:

- every pass of the reader sees offsets strictly increasing, each record exactly as produced at
  that offset, each key's latest record last (never a stale value after a newer one is gone),
  and never a record that an earlier pass no longer saw (nothing comes back);
- after the cleaner's round (observed through ``cleaner-offset-checkpoint``; the segments shrink)
  a full read yields exactly one record per key: the latest value, or the tombstone;
- once delete.retention.ms has passed and another round runs, the tombstones are gone too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from tests.helpers.log_dir import live_segments

TOPIC = "compacted"
KEYS = 600
VERSIONS = 8
SEGMENT_BYTES = 16384
DELETE_RETENTION_MS = 3000
BROKER = {
    "log.cleaner.backoff.ms": "300",
    "log.retention.check.interval.ms": "300",
    "log.segment.delete.delay.ms": "500",
}
BIG = b"s" * 15000  # bigger than segment.bytes minus a few records: forces a roll before it

Record = tuple[bytes, bytes | None]  # key, value


def _key(k: int) -> bytes:
    return b"k%04d" % k


def _workload() -> list[Record]:
    """Rounds of overwrites; every 5th key ends deleted, every 7th is deleted midway and comes back."""
    out: list[Record] = []
    for v in range(VERSIONS):
        for k in range(KEYS):
            if k % 7 == 0 and v == VERSIONS // 2:
                out.append((_key(k), None))
            out.append((_key(k), b"%s:v%d:" % (_key(k), v) + b"x" * 90))
    out.extend((_key(k), None) for k in range(0, KEYS, 5))
    return out


def _produce(bootstrap: str, records: list[Record]) -> list[int]:
    """Produce in order (small batches), returning the offset of each record."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "enable.idempotence": False,
                  "max.in.flight.requests.per.connection": 1})
    offsets: list[int | None] = [None] * len(records)

    def done(i: int) -> Callable[[object, object], None]:
        def cb(err: object, msg: object) -> None:
            assert err is None, err
            offsets[i] = msg.offset()  # type: ignore[attr-defined]
        return cb

    for i, (key, value) in enumerate(records):
        big = value is not None and len(value) > 1000
        if big:
            p.flush(10)
        p.produce(TOPIC, key=key, value=value, partition=0, on_delivery=done(i))
        if i % 25 == 24 or big:  # small batches; a big record always in a batch of its own
            p.flush(10)
    assert p.flush(30) == 0
    assert None not in offsets
    return offsets  # type: ignore[return-value]


def _cleaner_checkpoint(data_dir: Path) -> int:
    """This partition's first dirty offset from ``cleaner-offset-checkpoint`` (-1 if absent)."""
    path = data_dir / "cleaner-offset-checkpoint"
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return -1
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[0] == TOPIC and parts[1] == "0":
            return int(parts[2])
    return -1


def _log_bytes(data_dir: Path) -> tuple[int, int]:
    segments = live_segments(data_dir / f"{TOPIC}-0")
    return len(segments), sum(size for _, size in segments)


def _read_all(bootstrap: str, end: int, fetch_bytes: int = 1 << 20) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record from offset 0 up to ``end`` (exclusive)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "compaction-reader", "enable.auto.commit": False,
                  "auto.offset.reset": "error", "max.partition.fetch.bytes": fetch_bytes,
                  "fetch.max.bytes": max(fetch_bytes, 1 << 20),
                  # little prefetch: the pass advances with the reader, not all at once at assign
                  "queued.max.messages.kbytes": max(fetch_bytes >> 10, 8) * 2})
    out: list[tuple[int, bytes, bytes | None]] = []
    try:
        c.assign([TopicPartition(TOPIC, 0, 0)])
        deadline = time.monotonic() + 60
        while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
            for m in c.consume(5000, timeout=0.5):
                if m.error() is not None:
                    raise KafkaException(m.error())
                if m.offset() < end:
                    out.append((m.offset(), m.key(), m.value()))
        assert out and out[-1][0] == end - 1, "a full read did not reach the end offset"
    finally:
        c.close()
    return out


def _wait_for(cond: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


class _Reader(threading.Thread):
    """Reads the whole range [0, end) again and again, checking each pass and pass against pass."""

    def __init__(self, bootstrap: str, end: int, produced: dict[int, Record], latest: dict[bytes, int]) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.end, self.produced, self.latest = bootstrap, end, produced, latest
        self.stop = threading.Event()
        self.passes = 0
        self.sizes: list[int] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        previous: set[int] | None = None
        try:
            while not self.stop.is_set():
                # small fetches: a pass takes many Fetch requests, so a segment swap can land mid-pass
                records = _read_all(self.bootstrap, self.end, fetch_bytes=4096)
                offsets = [o for o, _, _ in records]
                assert all(a < b for a, b in zip(offsets, offsets[1:], strict=False)), "offsets not increasing"
                last_seen: dict[bytes, int] = {}
                for offset, key, value in records:
                    assert self.produced[offset] == (key, value), f"offset {offset} holds something else"
                    last_seen[key] = offset
                # consistent: each key's latest record is in every pass, and is that key's last record
                assert last_seen == self.latest, "a pass missed some key's latest record"
                seen = set(offsets)
                if previous is not None:
                    back = seen - previous
                    assert not back, f"records came back after being compacted away: {sorted(back)[:10]}"
                previous = seen
                self.passes += 1
                self.sizes.append(len(records))
        except BaseException as e:  # reported by the test thread
            self.error = e


def test_compaction_keeps_latest_per_key_and_readers_stay_consistent(broker_factory):
    broker = broker_factory(BROKER)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, config={
        "cleanup.policy": "delete", "retention.ms": "-1", "segment.bytes": str(SEGMENT_BYTES),
        "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": str(DELETE_RETENTION_MS),
        "file.delete.delay.ms": "500",
    })])[TOPIC].result(15)

    # two big sentinels: at least the second one starts a segment of its own, so every workload
    # record lies below the active segment and is cleanable
    records = _workload() + [(b"sentinel-a", BIG), (b"sentinel-b", BIG)]
    offsets = _produce(broker.bootstrap, records)
    assert offsets == list(range(len(records)))
    end = len(records)
    produced = dict(enumerate(records))
    latest: dict[bytes, int] = {}
    for offset, (key, _) in produced.items():
        latest[key] = offset
    live = {k: o for k, o in latest.items() if produced[o][1] is not None}
    assert len(live) == KEYS - KEYS // 5 + 2
    segments_before, bytes_before = _log_bytes(broker.data_dir)
    assert segments_before >= 20

    # two readers out of phase: more chances that a segment swap lands in the middle of a pass
    readers = [_Reader(broker.bootstrap, end, produced, latest) for _ in range(2)]
    for reader in readers:
        reader.start()
        _wait_for(lambda r=reader: r.passes >= 1 or r.error is not None, "a first full read")

    # switch to compaction while the readers keep going
    res = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(10)
    sentinel_b = latest[b"sentinel-b"]
    _wait_for(lambda: _cleaner_checkpoint(broker.data_dir) >= sentinel_b or any(r.error for r in readers),
              "the cleaner to compact everything below the active segment")
    cleaned_at = time.time()
    passes_at_clean = [r.passes for r in readers]
    _wait_for(lambda: all(r.passes >= n + 2 or r.error for r, n in zip(readers, passes_at_clean, strict=True)),
              "two more full reads after the cleaning round")
    for reader in readers:
        reader.stop.set()
    for reader in readers:
        reader.join(120)
        assert not reader.is_alive()
        if reader.error is not None:
            raise reader.error
        assert reader.sizes[0] == end and reader.sizes[-1] < end, reader.sizes
        print(f"reader: {reader.passes} passes, records per pass {reader.sizes}")

    segments_after, bytes_after = _log_bytes(broker.data_dir)
    # (a first round rewrites segment by segment, grouped by their old sizes as Kafka does: the
    # bytes shrink, the count follows in the next round)
    assert segments_after <= segments_before and bytes_after < bytes_before * 0.4, (
        segments_before, segments_after, bytes_before, bytes_after)

    # exactly one record per key: latest value for live keys, the tombstone for deleted ones
    after = _read_all(broker.bootstrap, end)
    keys = [k for _, k, _ in after]
    assert len(keys) == len(set(keys)) == len(latest)
    assert {k: o for o, k, _ in after} == latest
    assert all(produced[o] == (k, v) for o, k, v in after)
    assert sum(1 for _, _, v in after if v is None) == KEYS // 5  # tombstones kept for delete.retention.ms

    # after delete.retention.ms another round (new dirty data rolled below the active segment)
    # drops the tombstones
    wait = cleaned_at + DELETE_RETENTION_MS / 1000 + 0.5 - time.time()
    if wait > 0:
        time.sleep(wait)  # let the delete horizon pass: a precondition, not a timing assertion
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    p.produce(TOPIC, key=b"sentinel-c", value=BIG, partition=0)
    assert p.flush(10) == 0
    _wait_for(lambda: _cleaner_checkpoint(broker.data_dir) > sentinel_b, "a second cleaning round")
    segments_final, bytes_final = _log_bytes(broker.data_dir)
    # the small cleaned segments are merged now; the tombstones went, sentinel-c came
    assert segments_final < segments_after and bytes_final < bytes_after + len(BIG), (segments_final, bytes_final)
    final = _read_all(broker.bootstrap, end + 1)
    assert {k: o for o, k, _ in final} == {**live, b"sentinel-c": end}
    assert all(v is not None for _, _, v in final)
    assert all(produced[o] == (k, v) for o, k, v in final if o < end)
