"""Issue 14, acceptance 2: kill -9 of a leader under an idempotent acks=all load loses nothing.

Three real brokers on a real etcd; a topic of 6 partitions, RF=3, min.insync.replicas=2. A stock
confluent-kafka idempotent producer (acks=all) writes N records, each partition's values being that
partition's own sequence 0, 1, 2, ... (partition chosen explicitly, so order is checkable). Once
about a third is acknowledged, the broker leading the most partitions is killed with SIGKILL; the
controller moves those leaderships to a live ISR member after the lease expires and the producer
follows by itself. Afterwards a consumer reads every partition up to its high watermark: every
acknowledged record is there exactly once, and each partition's sequence is strictly increasing
(no duplicate, no reordering). A delivery error is a failure too: the failover must be invisible to
an idempotent producer except as latency.

``test_leader_kill_10k`` (10,000 records) is in the default suite; ``test_leader_kill_100k`` is the
acceptance size, marked slow.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.helpers.etcd_proc import EtcdProcess
from tests.helpers.fault_cluster import FaultCluster, create_topic, try_views, wait_isr_full
from tests.helpers.replica_compare import partition_dir, replica_differences
from tests.helpers.waiting import wait_for

TOPIC = "failover"
PARTITIONS = 6
RF = 3
PRODUCE_DEADLINE_S = 300.0  # the whole load, kill and failover included
CONSUME_DEADLINE_S = 180.0
MAX_IN_FLIGHT = 5000  # records queued in the producer but not yet acknowledged

OVERRIDES = {"broker.session.timeout.ms": "3000", "replica.lag.time.max.ms": "5000"}


@pytest.fixture
def cluster(etcd: EtcdProcess, tmp_path: Path) -> Iterator[FaultCluster]:
    c = FaultCluster(etcd, tmp_path, 3, proxied=False, **OVERRIDES)
    try:
        c.start()
        yield c
    finally:
        problems = c.stop()
    assert not problems, "\n\n".join(problems)


def busiest_leader(cluster: FaultCluster) -> tuple[int, list[int]]:
    """(node id leading the most partitions of TOPIC, those partitions) from a live broker's Metadata."""
    for b in cluster.brokers.values():
        if b.running and (views := try_views(b.bootstrap, TOPIC)):
            node = Counter(v.leader for v in views.values() if v.leader > 0).most_common(1)[0][0]
            return node, sorted(p for p, v in views.items() if v.leader == node)
    raise AssertionError("no broker answered Metadata")


class Load:
    """The idempotent producer's run: what was acknowledged (partition -> sequences), errors, timings."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        self.ack_times: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
        self.errors: list[str] = []
        self.count = 0

    def on_delivery(self, err, msg) -> None:
        if err is not None:
            with self.lock:
                self.errors.append(f"partition {msg.partition()} value {msg.value()!r}: {err}")
            return
        now = time.monotonic()
        with self.lock:
            self.acked[msg.partition()].append(int(msg.value()))
            self.ack_times[msg.partition()].append(now)
            self.count += 1


def produce_with_kill(cluster: FaultCluster, total: int) -> tuple[Load, int, float, list[int]]:
    """Produce ``total`` records, killing the busiest leader once a third is acknowledged.
    Returns (load, victim node, kill time, partitions it led)."""
    load = Load()
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 120000, "request.timeout.ms": 10000,
                         "retry.backoff.ms": 100, "topic.metadata.refresh.interval.ms": 1000})
    seq = [0] * PARTITIONS
    victim, killed_at, moved = 0, 0.0, []
    deadline = time.monotonic() + PRODUCE_DEADLINE_S
    for i in range(total):
        p = i % PARTITIONS
        while True:
            assert time.monotonic() < deadline, f"load not done in {PRODUCE_DEADLINE_S} s ({load.count} acked)"
            if len(producer) < MAX_IN_FLIGHT:
                try:
                    producer.produce(TOPIC, value=str(seq[p]).encode(), partition=p, on_delivery=load.on_delivery)
                    break
                except BufferError:
                    pass
            producer.poll(0.05)
        seq[p] += 1
        producer.poll(0)
        if not victim and load.count >= total // 3:
            victim, moved = busiest_leader(cluster)
            killed_at = time.monotonic()
            cluster.brokers[victim].kill()
    remaining = max(1.0, deadline - time.monotonic())
    assert producer.flush(remaining) == 0, f"{len(producer)} records unacknowledged after the deadline"
    assert victim, "the load finished before a third was acknowledged"
    return load, victim, killed_at, moved


def consume_all(cluster: FaultCluster) -> tuple[dict[int, list[int]], dict[int, int]]:
    """Every record of TOPIC up to each partition's high watermark, as partition -> values in order;
    and the high watermarks."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "leader-kill-check",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "topic.metadata.refresh.interval.ms": 1000})
    got: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        positions = dict.fromkeys(range(PARTITIONS), 0)
        deadline = time.monotonic() + CONSUME_DEADLINE_S
        while any(positions[p] < ends[p] for p in range(PARTITIONS)):
            assert time.monotonic() < deadline, f"consumed up to {positions}, high watermarks {ends}"
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error() is not None:
                    continue
                got[msg.partition()].append(int(msg.value()))
                positions[msg.partition()] = msg.offset() + 1
    finally:
        consumer.close()
    return got, ends


def check(load: Load, got: dict[int, list[int]]) -> None:
    for p in range(PARTITIONS):
        values = got[p]
        dupes = [v for v, n in Counter(values).items() if n > 1]
        assert not dupes, f"partition {p}: duplicated sequences {dupes[:10]} ({len(dupes)} in all)"
        disorder = [(a, b) for a, b in zip(values, values[1:], strict=False) if b <= a]
        assert not disorder, f"partition {p}: order broken at {disorder[:5]}"
        missing = sorted(set(load.acked[p]) - set(values))
        assert not missing, f"partition {p}: {len(missing)} acknowledged records lost, first {missing[:10]}"
        # The acknowledgements themselves came back in order (idempotent producer, one partition).
        assert load.acked[p] == sorted(load.acked[p]), f"partition {p}: acknowledged out of order"


def run_leader_kill(cluster: FaultCluster, total: int) -> None:
    create_topic(cluster.bootstrap, TOPIC, PARTITIONS, RF, {"min.insync.replicas": "2"})
    wait_isr_full(cluster.brokers[1].bootstrap, TOPIC, RF)
    load, victim, killed_at, moved = produce_with_kill(cluster, total)
    views = try_views(next(b for n, b in cluster.brokers.items() if n != victim).bootstrap, TOPIC)
    assert all(v.leader not in (-1, victim) for v in views.values()), f"leaders after the kill: {views}"
    got, ends = consume_all(cluster)
    check(load, got)
    # The two survivors hold byte-identical batches below each high watermark (the follower may
    # still be fetching the last ones the consumer saw).
    for p in range(PARTITIONS):
        reps = {f"broker {n}": partition_dir(b.data_dir, TOPIC, p) for n, b in cluster.brokers.items() if n != victim}
        wait_for(lambda reps=reps, p=p: not replica_differences(reps, ends[p]),
                 f"partition {p}: survivors' replicas identical below {ends[p]}", timeout=60)
    # Failover as the producer saw it: the longest pause between acknowledgements on each moved
    # partition (delivery reports are timed when polled, so this is approximate).
    stall = {p: round(max((b - a for a, b in zip(load.ack_times[p], load.ack_times[p][1:], strict=False)),
                          default=0.0), 2) for p in moved}
    print(f"\nleader kill: node {victim} led partitions {moved}; acked {load.count}/{total}; "
          f"longest pause between acknowledgements per moved partition (s): {stall}")
    assert not load.errors, f"{len(load.errors)} delivery errors, first: {load.errors[:5]}"
    assert load.count == total


def test_leader_kill_10k(cluster: FaultCluster) -> None:
    run_leader_kill(cluster, 10_000)


@pytest.mark.slow
def test_leader_kill_100k(cluster: FaultCluster) -> None:
    run_leader_kill(cluster, 100_000)
