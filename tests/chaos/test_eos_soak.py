"""Exactly-once soak (issue 5, acceptance 4): consume-transform-produce through worker and broker crashes.

Three confluent-kafka workers (tests/chaos/eos_worker.py, separate processes, one transactional.id
each, one consumer group) turn a 6-partition input of 100,000 records into ``T:<value>`` records
on a 6-partition output. The input arrives in chunks over about 20 s so that the chaos overlaps the
processing however fast the machine is. Every 1-3 s a random worker is SIGKILLed and restarted; once,
mid-run, the broker is killed with SIGKILL and restarted on the same data. At the end the group's committed
offsets are the input's end offsets and the output read with read_committed holds every transformed
input exactly once, each output partition in its input partition's order.

Marked slow (``make test-all``). Bounded at SOAK_DEADLINE; prints one summary line.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = [pytest.mark.slow, pytest.mark.timeout(660)]

WORKER = Path(__file__).with_name("eos_worker.py")
PARTITIONS = 6
RECORDS = 100_000
WORKERS = 3
BATCH = 100  # records per transaction at most: many transactions, so kills land inside them
WORK_MS = 20  # simulated processing time inside each transaction, for the same reason
GROUP = "eos-soak"
SRC, DST = "eos-in", "eos-out"
SOAK_DEADLINE = 540  # seconds for the processing phase; the whole test stays under 10 minutes
KILL_EVERY = (1.0, 3.0)  # seconds between worker kills
CHUNKS, CHUNK_EVERY = 20, 1.0  # the input arrives over ~20 s
BROKER_KILL_AT = CHUNKS // 2  # the broker is killed once half the input chunks are written
OVERRIDES = {
    "group.min.session.timeout.ms": "1000",  # workers use 3 s sessions so dead members leave quickly
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
TIMEOUT = 30


class Worker:
    def __init__(self, index: int, bootstrap: str, log_dir: Path) -> None:
        self.index = index
        self.tid = f"eos-worker-{index}"
        self.bootstrap = bootstrap
        self.log_path = log_dir / f"eos-worker-{index}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"===== start #{self.starts}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [sys.executable, str(WORKER), "--bootstrap", self.bootstrap, "--transactional-id", self.tid,
                 "--group", GROUP, "--input", SRC, "--output", DST, "--batch", str(BATCH),
                 "--work-ms", str(WORK_MS)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


class InputFeeder:
    """Writes the input in CHUNKS equal chunks, one every CHUNK_EVERY seconds, while the chaos runs:
    however fast the workers are, kills and the broker restart land in the middle of the processing."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                                  "batch.size": 1 << 20, "queue.buffering.max.messages": RECORDS + 1})
        self.by_partition: dict[int, list[bytes]] = {q: [] for q in range(PARTITIONS)}
        self.next_index = 0
        self.chunks = 0

    def feed(self) -> None:
        end = min(RECORDS, self.next_index + RECORDS // CHUNKS)
        for i in range(self.next_index, end):
            value = b"in-%06d" % i
            q = i % PARTITIONS
            self.producer.produce(SRC, key=value, value=value, partition=q)
            self.by_partition[q].append(value)
        self.next_index = end
        self.chunks += 1
        self.producer.poll(0)

    @property
    def done(self) -> bool:
        return self.next_index >= RECORDS

    def flush(self) -> None:
        assert self.producer.flush(120) == 0, "input records not delivered"
        self.producer = None  # type: ignore[assignment]  # destroy the client: no reconnect noise later


def committed_total(bootstrap: str) -> int | None:
    """Sum of the group's committed input offsets (None while the broker cannot answer)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(SRC, q) for q in range(PARTITIONS)], timeout=5)
        return sum(max(tp.offset, 0) for tp in got)
    except KafkaException:
        return None
    finally:
        c.close()


def read_output(bootstrap: str, isolation: str) -> dict[int, list[bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-verify", "enable.auto.commit": False,
                  "enable.partition.eof": True, "isolation.level": isolation})
    out: dict[int, list[bytes]] = {q: [] for q in range(PARTITIONS)}
    try:
        c.assign([TopicPartition(DST, q, 0) for q in range(PARTITIONS)])
        eof: set[int] = set()
        deadline = time.monotonic() + 120
        while len(eof) < PARTITIONS and time.monotonic() < deadline:
            for m in c.consume(num_messages=10_000, timeout=0.5):
                if m.error() is None:
                    eof.discard(m.partition())
                    out[m.partition()].append(m.value())
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                else:
                    raise AssertionError(m.error())
        assert len(eof) == PARTITIONS, f"no EOF on output partitions {set(range(PARTITIONS)) - eof}"
    finally:
        c.close()
    return out


def test_exactly_once_through_worker_and_broker_kills(broker_factory, tmp_path):
    broker = broker_factory(OVERRIDES)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in (SRC, DST)]).values():
        f.result(TIMEOUT)
    del admin
    feeder = InputFeeder(broker.bootstrap)
    rng = random.Random(int(os.environ.get("EOS_SOAK_SEED", "5")))  # kill schedule; timing varies anyway
    workers = [Worker(i, broker.bootstrap, tmp_path) for i in range(WORKERS)]
    started = time.monotonic()
    kills = crashes = broker_kills = 0
    done = 0
    try:
        for w in workers:
            w.start()
        next_kill = time.monotonic() + rng.uniform(*KILL_EVERY)
        next_chunk = time.monotonic()
        deadline = started + SOAK_DEADLINE
        while time.monotonic() < deadline:
            if not feeder.done and time.monotonic() >= next_chunk:
                feeder.feed()
                next_chunk += CHUNK_EVERY
                if feeder.done:
                    feeder.flush()
            time.sleep(0.25)
            total = committed_total(broker.bootstrap)
            done = total if total is not None else done
            if done >= RECORDS:
                break
            for w in workers:  # a worker that gave up on an error is restarted like a killed one
                if not w.alive:
                    crashes += 1
                    w.start()
            if not broker_kills and feeder.chunks >= BROKER_KILL_AT:
                broker.restart(kill=True)
                broker_kills += 1
            if time.monotonic() >= next_kill:
                victim = rng.choice(workers)
                victim.kill()
                kills += 1
                victim.start()
                next_kill = time.monotonic() + rng.uniform(*KILL_EVERY)
        processing = time.monotonic() - started
    finally:
        for w in workers:
            w.stop()
    assert done == RECORDS, (f"only {done}/{RECORDS} input records committed after {SOAK_DEADLINE}s; "
                             f"worker logs in {tmp_path}\n{broker.log_tail(30)}")

    committed = read_output(broker.bootstrap, "read_committed")
    uncommitted = read_output(broker.bootstrap, "read_uncommitted")
    counts = Counter(v for vs in committed.values() for v in vs)
    inputs = feeder.by_partition
    want = {b"T:" + v for vs in inputs.values() for v in vs}
    duplicates = sum(c - 1 for c in counts.values() if c > 1)
    missing = len(want - counts.keys())
    unexpected = len(counts.keys() - want)
    aborted = sum(map(len, uncommitted.values())) - sum(map(len, committed.values()))
    print(f"\nEOS soak: {RECORDS} inputs over {PARTITIONS} partitions, {WORKERS} workers, "
          f"{sum(counts.values())} committed outputs, duplicates {duplicates}, missing {missing}, "
          f"unexpected {unexpected}, aborted outputs {aborted}, worker SIGKILLs {kills}, "
          f"worker error exits {crashes}, broker kill -9 {broker_kills}, processing {processing:.0f} s")
    assert (duplicates, missing, unexpected) == (0, 0, 0)
    # Each input partition was owned by one producer at a time: the output keeps the input order.
    assert committed == {q: [b"T:" + v for v in vs] for q, vs in inputs.items()}
    assert broker_kills == 1 and kills >= 3
