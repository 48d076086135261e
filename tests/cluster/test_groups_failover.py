"""Issue 15, acceptance 4: a consumer group survives kill -9 of its coordinator's broker.

Three real brokers on a real etcd; an RF=3 topic of 6 partitions filled up front. Three stock
confluent-kafka consumers (threads) in one group, ``group.protocol=classic`` and
``group.protocol=consumer`` (KIP-848), process records in small batches and commit each batch
synchronously. Once the group is formed (every partition assigned, each consumer owning some) and
about a third is processed and committed, the broker coordinating the group (leader of its
``__consumer_offsets`` partition) is killed with SIGKILL. The controller elects a new leader of
that partition, which loads the group and its offsets; the consumers find it and carry on.

A shared ledger records every processed record (partition, offset, consumer, assignment
generation as the consumer saw it, before/after the kill) and every successful commit. Checks:

- no partition is ever processed from an offset older than its last successful commit (a record
  processed at offset o while a commit of c > o for its partition had already succeeded is a
  violation: the committed offsets were lost or a stale owner kept going), across the
  generations before and after the kill;
- once the coordinator moved, the committed offsets it serves are at least the last ones committed
  before the kill, and the group is described on it with its 3 members;
- every record is processed (at least once), and at the end the committed offsets are the log end.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.helpers.cluster_state import WAIT_S, wait_until
from tests.helpers.coord_cluster import (
    GROUP_TOPIC,
    KEY_GROUP,
    coord_cluster,
    data_topic,
    ensure_internal_topic,
    wait_coordinator,
)
from tests.helpers.etcd_proc import EtcdProcess

TOPIC = "group-failover"
PARTITIONS = 6
PER_PARTITION = 600
CONSUMERS = 3
BATCH = 10
PACE_S = 0.05  # between batches: the kill must land while the group is busy
RUN_DEADLINE_S = 240.0


@dataclass
class Ledger:
    lock: threading.Lock = field(default_factory=threading.Lock)
    killed: bool = False
    last_commit: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    commits_before_kill: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    processed: dict[int, set[int]] = field(default_factory=lambda: defaultdict(set))
    events: list[tuple] = field(default_factory=list)  # (kind, partition, offset, consumer, generation, after)
    violations: list[str] = field(default_factory=list)
    owned: dict[int, set[int]] = field(default_factory=lambda: defaultdict(set))
    generations: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    commit_errors: list[str] = field(default_factory=list)

    def process(self, consumer: int, partition: int, offset: int) -> None:
        with self.lock:
            gen = self.generations[consumer]
            floor = self.last_commit[partition]
            if offset < floor:
                self.violations.append(f"consumer {consumer} (generation {gen}, after kill: {self.killed}) "
                                       f"processed {partition}@{offset} below the last commit {floor}")
            self.processed[partition].add(offset)
            self.events.append(("process", partition, offset, consumer, gen, self.killed))

    def committed(self, consumer: int, offsets: dict[int, int]) -> None:
        with self.lock:
            for p, off in offsets.items():
                self.last_commit[p] = max(self.last_commit[p], off)
                if not self.killed:
                    self.commits_before_kill[p] = max(self.commits_before_kill[p], off)
                self.events.append(("commit", p, off, consumer, self.generations[consumer], self.killed))

    def done(self) -> bool:
        with self.lock:
            return all(self.last_commit[p] == PER_PARTITION for p in range(PARTITIONS))

    def count(self) -> int:
        with self.lock:
            return sum(len(s) for s in self.processed.values())


def _consume(bootstrap: str, group: str, protocol: str, idx: int, ledger: Ledger, stop: threading.Event,
             errors: list[str]) -> None:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "client.id": f"c{idx}"}
    if protocol == "classic":
        conf.update({"session.timeout.ms": 10_000, "heartbeat.interval.ms": 1000})

    def on_assign(_c: Consumer, parts: list[TopicPartition]) -> None:
        with ledger.lock:
            ledger.generations[idx] += 1
            ledger.owned[idx] |= {tp.partition for tp in parts}

    def on_revoke(_c: Consumer, parts: list[TopicPartition]) -> None:
        with ledger.lock:
            ledger.owned[idx] -= {tp.partition for tp in parts}

    c = Consumer(conf)
    try:
        c.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        deadline = time.monotonic() + RUN_DEADLINE_S
        while not stop.is_set() and time.monotonic() < deadline:
            msgs = [m for m in c.consume(num_messages=BATCH, timeout=0.5) if m.error() is None]
            if not msgs:
                continue
            nxt: dict[int, int] = {}
            for m in msgs:
                ledger.process(idx, m.partition(), m.offset())
                nxt[m.partition()] = m.offset() + 1
            try:
                c.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in nxt.items()], asynchronous=False)
                ledger.committed(idx, nxt)
            except KafkaException as e:  # coordinator gone or moving, a rebalance: not committed
                with ledger.lock:
                    ledger.commit_errors.append(f"c{idx}: {e.args[0]}")
            time.sleep(PACE_S)
    except Exception as e:  # noqa: BLE001 - reported by the test
        errors.append(f"consumer {idx}: {e!r}")
    finally:
        c.close()


def _committed_offsets(admin: AdminClient, group: str) -> dict[int, int]:
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    res = admin.list_consumer_group_offsets([req], request_timeout=10)[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in res.topic_partitions if tp.error is None}


def _members(admin: AdminClient, group: str) -> int:
    d = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=30)
    return len(d.members)


# The default suite keeps the consumer protocol (its group state is what moves); classic in test-all.
@pytest.mark.parametrize("protocol", [pytest.param("classic", marks=pytest.mark.slow), "consumer"])
def test_group_survives_coordinator_kill(etcd: EtcdProcess, tmp_path: Path, protocol: str) -> None:
    with coord_cluster(etcd, tmp_path) as cluster:
        ensure_internal_topic(cluster, GROUP_TOPIC)
        data_topic(cluster, TOPIC, PARTITIONS)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 5})
        for p in range(PARTITIONS):
            for i in range(PER_PARTITION):
                producer.produce(TOPIC, value=f"{p}-{i}".encode(), partition=p)
        assert producer.flush(60) == 0

        group = f"failover-{protocol}"
        coord = wait_coordinator(cluster, group, KEY_GROUP)
        ledger, stop, errors = Ledger(), threading.Event(), []
        threads = [threading.Thread(target=_consume, args=(cluster.bootstrap, group, protocol, i, ledger, stop, errors),
                                    daemon=True) for i in range(CONSUMERS)]
        for t in threads:
            t.start()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        try:
            def formed() -> bool:
                with ledger.lock:
                    owned = [ledger.owned[i] for i in range(CONSUMERS)]
                    committed = all(ledger.last_commit[p] > 0 for p in range(PARTITIONS))
                return (all(owned) and set().union(*owned) == set(range(PARTITIONS)) and committed
                        and ledger.count() >= PARTITIONS * PER_PARTITION // 3)
            wait_until(formed, "3 consumers sharing the 6 partitions, a third processed and committed", WAIT_S)
            assert not ledger.done(), "everything processed before the kill: slow the consumers down"

            cluster.brokers[coord].kill()
            with ledger.lock:
                ledger.killed = True
                before = dict(ledger.commits_before_kill)
            killed_at = time.monotonic()

            new_coord = wait_coordinator(cluster, group, KEY_GROUP, not_node=coord)
            offsets = wait_until(lambda: _committed_offsets(admin, group), "committed offsets from the new coordinator")
            lost = {p: (offsets.get(p), c) for p, c in before.items() if offsets.get(p, -1) < c}
            assert not lost, f"committed offsets older than the last commits before the kill: {lost}"
            wait_until(lambda: _members(admin, group) == CONSUMERS, f"{CONSUMERS} members on node {new_coord}")

            wait_until(ledger.done, "every partition processed and committed to its end", RUN_DEADLINE_S)
            recovered_s = time.monotonic() - killed_at
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        assert not errors, errors
        assert not ledger.violations, "\n".join(ledger.violations[:20])
        missing = {p: PER_PARTITION - len(ledger.processed[p]) for p in range(PARTITIONS)
                   if ledger.processed[p] != set(range(PER_PARTITION))}
        assert not missing, f"records never processed: {missing}"
        assert _committed_offsets(admin, group) == {p: PER_PARTITION for p in range(PARTITIONS)}
        processed = sum(1 for e in ledger.events if e[0] == "process")
        after = sum(1 for e in ledger.events if e[0] == "process" and e[5])
        print(f"\n{protocol}: coordinator node {coord} killed, node {new_coord} took the group; "
              f"{processed} records processed ({processed - PARTITIONS * PER_PARTITION} again), {after} after the "
              f"kill; assignments per consumer {dict(ledger.generations)}; {len(ledger.commit_errors)} failed "
              f"commits; done {recovered_s:.1f} s after the kill")
