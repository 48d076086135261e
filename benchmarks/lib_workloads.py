"""The benchmark workloads, each driven through confluent-kafka against any bootstrap address.

Every workload takes the broker's bootstrap address and pid (for CPU accounting), runs one measured
phase and returns a flat ``dict`` of figures plus the phase's CPU :class:`~lib_meter.Usage`. The same
client settings are used whichever broker is on the other end. Client settings per workload:

- produce: ``linger.ms=5``, ``batch.size=1 MiB``, no compression, 4 partitions, no key (librdkafka's
  sticky partitioner), 1 KiB random values; acks=1, acks=all, or enable.idempotence=true. The
  compressed variants (acks=all, ``compression.type`` lz4 or zstd) cycle through 1,024 distinct
  1 KiB JSON-like text values that compress about 2x (lz4) to 3.5x (zstd) (random values would not compress), see
  :func:`record_values`.
- consume: an ``assign()``-ing consumer (no group) reads a full topic from its start, default fetch sizes.
- latency: a producer (acks=all, ``linger.ms=0``) offers a fixed rate; a consumer in a separate
  process (so the two never share a GIL) reads the same topic; latency = consumer receive time −
  producer send time, both from the system-wide CLOCK_MONOTONIC.
- transactions: ``transactional.id`` producer (``linger.ms=0``), 10 records per transaction spread
  round-robin over 4 partitions, committed one after another for a fixed time.
- consume-transform-produce: a read_committed group consumer and a transactional producer; each
  batch returned by ``consume()`` (≤ 500 records) is written to an output topic and committed
  together with the consumer offsets (``send_offsets_to_transaction``).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import struct
import time
import uuid
from array import array
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from lib_meter import Meter

PARTITIONS = 4
MB = 1e6  # MB = 10^6 bytes of record values (keys and headers are empty)


class WorkloadError(RuntimeError):
    """The workload could not complete (delivery errors, missing records, timeouts)."""


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS,
                 config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic].result(30)
    # Some brokers answer CreateTopics before the topic is usable.
    wait_leaders(admin, topic, partitions)


def wait_leaders(admin: AdminClient, topic: str, partitions: int, timeout: float = 30) -> None:
    """Until metadata lists every partition of ``topic`` with a leader (WorkloadError after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions and all(
                p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.05)
    raise WorkloadError(f"topic {topic} not ready after {timeout:g} s")


def record_values(size: int, compression: str, count: int = 1024) -> list[bytes]:
    """Values to cycle through. Without compression one random value (random bytes do not
    compress). With a codec, ``count`` distinct JSON-like values (random ids and numbers between
    repeated field names) that compress as a batch about 2x with lz4, 3.5x with zstd, like real event data: the
    same value repeated would compress 200-2000x and make the broker's decompression look free."""
    if compression == "none":
        return [os.urandom(size)]
    rnd = random.Random(size)
    out = []
    for _ in range(count):
        parts: list[bytes] = []
        n = 0
        while n < size:
            item = (b'{"id":"%016x","user":%d,"kind":"%s","path":"/catalog/%x","ms":%d},'
                    % (rnd.getrandbits(64), rnd.randrange(10**6), rnd.choice((b"view", b"click", b"buy")),
                       rnd.getrandbits(24), rnd.randrange(10**4)))
            parts.append(item)
            n += len(item)
        out.append(b"".join(parts)[:size])
    return out


def _produce_all(p: Producer, topic: str, n: int, value: bytes | list[bytes]) -> None:
    """Queue n records (cycling through ``value`` when it is a list); on a full local queue, serve
    delivery reports until there is room."""
    produce, poll = p.produce, p.poll
    values = value if isinstance(value, list) else [value]
    nv = len(values)
    for i in range(n):
        while True:
            try:
                produce(topic, values[i % nv])
                break
            except BufferError:
                poll(0.005)
        if i & 0x3FFF == 0:
            poll(0)


def _error_sink(errors: list[str]):
    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
    return on_delivery


# -- produce ----------------------------------------------------------------------------------------
def produce(bootstrap: str, broker_pid: int | None, *, records: int, size: int, acks: str = "all",
            idempotent: bool = False, topic: str | None = None, compression: str = "none") -> dict[str, Any]:
    topic = topic or unique("produce")
    create_topic(bootstrap, topic)
    errors: list[str] = []
    p = Producer({
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "enable.idempotence": idempotent,
        "linger.ms": 5,
        "batch.size": 1 << 20,
        "compression.type": compression,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2 * 1024 * 1024,
        "delivery.report.only.error": True,  # keep per-record Python callbacks out of the loop
        "on_delivery": _error_sink(errors),
    })
    value = record_values(size, compression)
    # Warm-up outside the measurement: connections, metadata, producer id, one round trip.
    _produce_all(p, topic, 100, value)
    if p.flush(30) or errors:
        raise WorkloadError(f"produce warm-up failed: {errors[:3]}")
    with Meter(broker_pid) as m:
        _produce_all(p, topic, records, value)
        left = p.flush(300)
    if left or errors:
        raise WorkloadError(f"produce: {left} undelivered, errors {errors[:3]}")
    del p
    u = m.usage
    assert u is not None
    return {"topic": topic, "records": records, "records_total": records + 100,
            "records_per_s": records / u.wall, "mb_per_s": records * size / u.wall / MB,
            "usage": u.to_dict()}


# -- consume ----------------------------------------------------------------------------------------
def consume(bootstrap: str, broker_pid: int | None, *, topic: str, expected: int, size: int
            ) -> dict[str, Any]:
    # fetch.queue.backoff.ms: when its local queue holds queued.max.messages.kbytes (64 MB),
    # librdkafka stops fetching for this long (1 s by default). Several brokers answering at once
    # fill it faster than a Python loop drains it, and the brokers then sat idle for a second at a
    # time (docs/operations.md, "Consumers of a cluster"); 10 ms resumes as soon as there is room.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("bench-consume"),
                  "enable.auto.commit": False, "enable.partition.eof": False, "fetch.queue.backoff.ms": 10})
    try:
        c.list_topics(topic, timeout=10)  # connection + metadata outside the measurement
        got = 0
        first: float | None = None
        with Meter(broker_pid) as m:
            t0 = time.perf_counter()
            # From the log start, not offset 0: cluster_bench's topics start at 1 (topic_factory).
            c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
            deadline = time.monotonic() + 300
            while got < expected and time.monotonic() < deadline:
                # consume(n) blocks until n records or the timeout: never ask for more than remain.
                msgs = c.consume(min(10_000, expected - got), 1.0)
                if msgs and first is None:
                    first = time.perf_counter() - t0
                for msg in msgs:
                    err = msg.error()
                    if err is None:
                        got += 1
                    elif err.code() != KafkaError._PARTITION_EOF:
                        raise WorkloadError(f"consume error: {err}")
    finally:
        c.close()
    if got < expected:
        raise WorkloadError(f"consumed {got} of {expected} records")
    u = m.usage
    assert u is not None
    return {"records": got, "records_per_s": got / u.wall, "mb_per_s": got * size / u.wall / MB,
            "first_record_s": first, "usage": u.to_dict()}


# -- end-to-end latency -----------------------------------------------------------------------------
_HEADER = struct.Struct(">qq")  # sequence number, send time (CLOCK_MONOTONIC ns)


def _latency_consumer(bootstrap: str, topic: str, first_seq: int, last_seq: int, conn: Any) -> None:
    """Child process: read the topic, time every record with seq in [first_seq, last_seq)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("bench-latency"),
                  "enable.auto.commit": False, "enable.partition.eof": False})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    lat = array("d")
    want = last_seq - first_seq
    seen = 0
    conn.send("ready")
    deadline = time.monotonic() + 600
    unpack = _HEADER.unpack_from
    poll, now_ns = c.poll, time.monotonic_ns
    while seen < want and time.monotonic() < deadline:
        # poll(), not consume(n): consume() waits until n records or its timeout, adding its own delay.
        msg = poll(0.2)
        if msg is None or msg.error() is not None:
            continue
        now = now_ns()
        seq, sent = unpack(msg.value())
        if first_seq <= seq < last_seq:
            lat.append((now - sent) / 1e3)
            seen += 1
    conn.send(lat.tobytes())
    conn.recv()  # parent reads our CPU time before we exit
    c.close()


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, int(round(q / 100 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def latency(bootstrap: str, broker_pid: int | None, *, rate: int, seconds: float, size: int,
            linger_ms: float = 5, warmup_s: float = 1.0) -> dict[str, Any]:
    topic = unique("latency")
    create_topic(bootstrap, topic)
    warm = int(rate * warmup_s)
    total = warm + int(rate * seconds)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_latency_consumer, args=(bootstrap, topic, warm, total, child), daemon=True)
    proc.start()
    errors: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": linger_ms,
                  "compression.type": "none", "on_delivery": _error_sink(errors),
                  "delivery.report.only.error": True})
    try:
        if not parent.poll(60):
            raise WorkloadError("latency consumer did not start")
        parent.recv()
        pad = os.urandom(max(0, size - _HEADER.size))
        pack = _HEADER.pack
        produce, poll = p.produce, p.poll
        sleep, mono, mono_ns = time.sleep, time.perf_counter, time.monotonic_ns
        late = 0
        meter: Meter | None = None
        t0 = mono()
        for seq in range(total):
            if seq == warm:
                meter = Meter(broker_pid, (proc.pid,) if proc.pid else ()).start()
            due = t0 + seq / rate
            now = mono()
            if now < due:
                sleep(due - now)
            elif now - due > 0.001:
                late += 1
            produce(topic, pack(seq, mono_ns()) + pad)
            poll(0)
        if p.flush(60) or errors:
            raise WorkloadError(f"latency producer: errors {errors[:3]}")
        if not parent.poll(120):
            raise WorkloadError("latency consumer did not finish")
        lat = array("d")
        lat.frombytes(parent.recv())
        assert meter is not None
        usage = meter.stop()
        parent.send("bye")
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
    values = sorted(lat)
    measured = total - warm
    return {"rate": rate, "records": len(values), "missing": measured - len(values), "late_sends": late,
            "p50_ms": _percentile(values, 50) / 1e3, "p99_ms": _percentile(values, 99) / 1e3,
            "p999_ms": _percentile(values, 99.9) / 1e3, "max_ms": (values[-1] / 1e3) if values else None,
            "usage": usage.to_dict()}


# -- transactions -----------------------------------------------------------------------------------
def transactions(bootstrap: str, broker_pid: int | None, *, seconds: float, per_txn: int = 10,
                 size: int = 1024) -> dict[str, Any]:
    topic = unique("txn")
    create_topic(bootstrap, topic)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("bench-txn"),
                  "linger.ms": 0, "compression.type": "none"})
    value = os.urandom(size)
    p.init_transactions(60)

    def one() -> None:
        p.begin_transaction()
        for i in range(per_txn):
            p.produce(topic, value, partition=i % PARTITIONS)
        p.commit_transaction(60)

    one()  # warm-up: AddPartitionsToTxn paths, connections to every leader
    commits = 0
    with Meter(broker_pid) as m:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            one()
            commits += 1
    u = m.usage
    assert u is not None
    return {"commits": commits, "records": commits * per_txn, "commits_per_s": commits / u.wall,
            "records_per_s": commits * per_txn / u.wall, "usage": u.to_dict()}


def consume_transform_produce(bootstrap: str, broker_pid: int | None, *, records: int, size: int = 1024,
                              max_batch: int = 500) -> dict[str, Any]:
    src, dst = unique("ctp-in"), unique("ctp-out")
    create_topic(bootstrap, src)
    create_topic(bootstrap, dst)
    errors: list[str] = []
    fill = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1 << 20,
                     "queue.buffering.max.messages": 2_000_000, "on_delivery": _error_sink(errors),
                     "delivery.report.only.error": True})
    _produce_all(fill, src, records, os.urandom(size))
    if fill.flush(120) or errors:
        raise WorkloadError(f"ctp fill failed: {errors[:3]}")
    del fill

    group = unique("bench-ctp")
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "enable.partition.eof": False})
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("bench-ctp"),
                  "linger.ms": 5, "batch.size": 1 << 20, "compression.type": "none"})
    p.init_transactions(60)
    c.subscribe([src])
    done = commits = 0
    meter: Meter | None = None
    try:
        deadline = time.monotonic() + 300
        while done < records and time.monotonic() < deadline:
            msgs = c.consume(min(max_batch, records - done), 1.0)
            msgs = [m for m in msgs if m.error() is None]
            if not msgs:
                continue
            if meter is None:  # group join and first fetch are outside the measurement
                meter = Meter(broker_pid).start()
            p.begin_transaction()
            for msg in msgs:
                # The "transform" is deliberately trivial: the benchmark measures the broker.
                p.produce(dst, msg.value(), key=msg.key(), partition=msg.partition())
            p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 60)
            p.commit_transaction(60)
            done += len(msgs)
            commits += 1
        if meter is None or done < records:
            raise WorkloadError(f"ctp processed {done} of {records} records")
        usage = meter.stop()
    except KafkaException as e:
        raise WorkloadError(f"ctp: {e}") from e
    finally:
        c.close()
    del p
    return {"records": done, "commits": commits, "records_per_s": done / usage.wall,
            "mb_per_s": done * size / usage.wall / MB, "commits_per_s": commits / usage.wall,
            "usage": usage.to_dict()}
