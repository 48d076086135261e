"""Issue 14, acceptance 4: network partitions of a leader, made with PartitionProxy (blackhole cuts).

Three real brokers (tests/helpers/fault_cluster.py): each reaches etcd through its own proxy, and
followers fetch from it through a proxy in front of its REPLICATION listener; clients reach every
broker directly. Topic of 3 partitions, RF=3, min.insync.replicas=2. The victim is the leader of
partition 0. Two cases:

(a) ``etcd_and_followers``: the victim loses etcd and its followers (nothing replicates from it);
(b) ``etcd_only``: the victim loses etcd but its followers keep fetching from it and clients keep
    producing to it: the dangerous case, where only the victim's own fencing deadline (last
    acknowledged keepalive + TTL - margin) stops it from acknowledging next to the new leader.

Load: for every (broker, partition) one thread sends raw Produce requests (tests/helpers/wire.py,
kafka-python's structs) to that broker with acks=all (acks=1 in a variant), one unique value per
request, and records (partition, broker answering, send time, receive time, value) of every
acknowledgement; a poller records (time, partition, leader, leader epoch) from every broker's
Metadata. Asserted, per partition:

* the acknowledgement windows of different leaders never overlap: every request the old leader
  acknowledged was *sent* before the new leader's first acknowledgement was *received* (the bounds
  that can only fail on a real overlap, whatever the scheduling of this process), and the new
  leader has a higher epoch;
* the old leader's last acknowledged request was sent before a surviving broker's Metadata first
  showed the new leader (it stopped acknowledging before the new leader was elected);
* after the heal the old leader registers again, follows (its divergent tail truncated) and
  rejoins the ISR; its replica is byte-identical to the others below the high watermark
  (tests/helpers/replica_compare.py);
* no acknowledged record is lost: with acks=all none at all; with acks=1 none acknowledged by a
  leader after the election (records the old leader acknowledged with acks=1 but never replicated
  may be truncated: Kafka's acks=1 semantics; the test reports how many were).
All slow (each ~1 minute).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from protocol.errors import ErrorCode
from tests.helpers.etcd_proc import EtcdProcess
from tests.helpers.fault_cluster import (
    FaultCluster,
    PartitionView,
    create_topic,
    produce_once,
    try_views,
    wait_isr_full,
    wait_views,
)
from tests.helpers.replica_compare import assert_replicas_identical, partition_dir
from tests.helpers.wire import RawConnection

pytestmark = pytest.mark.slow

TOPIC = "cut"
PARTITIONS = 3
RF = 3
LOAD_DEADLINE_S = 300.0  # hard bound on every producer thread
WAIT_S = 120.0
ACKS_BEFORE = 20  # acknowledgements per partition before the cut, and from each new leader after it
REQUEST_TIMEOUT_MS = 2000


@dataclass(frozen=True)
class Ack:
    partition: int
    node: int
    sent: float
    received: float
    value: bytes
    offset: int


@dataclass(frozen=True)
class Seen:
    at: float
    asked: int
    partition: int
    leader: int
    epoch: int


class Recorder:
    """Producer threads (one per broker and partition) and a Metadata poller, until stopped."""

    def __init__(self, cluster: FaultCluster, acks: int) -> None:
        self.cluster, self.acks = cluster, acks
        self.lock = threading.Lock()
        self.acked: list[Ack] = []
        self.errors: dict[tuple[int, int], int] = defaultdict(int)  # (node, error code) -> count
        self.seen: list[Seen] = []
        self.stop_event = threading.Event()
        self.deadline = time.monotonic() + LOAD_DEADLINE_S
        self.threads = [threading.Thread(target=self._produce, args=(n, p), daemon=True)
                        for n in cluster.brokers for p in range(PARTITIONS)]
        self.threads.append(threading.Thread(target=self._poll, daemon=True))

    def __enter__(self) -> Recorder:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(30)

    def running(self) -> bool:
        return not self.stop_event.is_set() and time.monotonic() < self.deadline

    def _produce(self, node: int, partition: int) -> None:
        broker = self.cluster.brokers[node]
        conn: RawConnection | None = None
        i = 0
        while self.running():
            i += 1
            value = f"{node}/{partition}/{i}".encode()
            try:
                if conn is None:
                    conn = RawConnection(broker.bootstrap, timeout=REQUEST_TIMEOUT_MS / 1000 + 10)
                sent = time.monotonic()
                err, offset = produce_once(conn, TOPIC, partition, [value], self.acks, REQUEST_TIMEOUT_MS)
                received = time.monotonic()
            except Exception:  # broker restarting or connection lost: reconnect, no ack recorded
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()
                conn = None
                self.stop_event.wait(0.2)
                continue
            with self.lock:
                if err == ErrorCode.NONE:
                    self.acked.append(Ack(partition, node, sent, received, value, offset))
                else:
                    self.errors[(node, err)] += 1
            # Pace: non-leaders answer at once; keep the shared machine for the brokers.
            self.stop_event.wait(0.01 if err == ErrorCode.NONE else 0.05)
        if conn is not None:
            conn.close()

    def _poll(self) -> None:
        while self.running():
            for node, b in self.cluster.brokers.items():
                now = time.monotonic()
                for v in try_views(b.bootstrap, TOPIC).values():
                    with self.lock:
                        self.seen.append(Seen(now, node, v.partition, v.leader, v.epoch))
            self.stop_event.wait(0.2)

    # --- views of what was recorded --------------------------------------------------------

    def acks_of(self, partition: int, node: int | None = None, after: float = 0.0) -> list[Ack]:
        with self.lock:
            return [a for a in self.acked if a.partition == partition and (node is None or a.node == node)
                    and a.sent >= after]

    def first_seen_leader_other_than(self, partition: int, old: int, observers: set[int]) -> Seen | None:
        with self.lock:
            return next((s for s in self.seen if s.partition == partition and s.asked in observers
                         and s.leader not in (-1, old)), None)


def consume_values(cluster: FaultCluster, ends: dict[int, int]) -> dict[int, list[bytes]]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "partition-check",
                         "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 1000})
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    positions = dict.fromkeys(range(PARTITIONS), 0)
    try:
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + WAIT_S
        while any(positions[p] < ends[p] for p in range(PARTITIONS)):
            assert time.monotonic() < deadline, f"consumed up to {positions}, high watermarks {ends}"
            for msg in consumer.consume(500, timeout=0.5):
                if msg.error() is None:
                    got[msg.partition()].append(msg.value())
                    positions[msg.partition()] = msg.offset() + 1
    finally:
        consumer.close()
    return got


def high_watermarks(cluster: FaultCluster) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "partition-hw"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in range(PARTITIONS)}
    finally:
        consumer.close()


@pytest.fixture
def cluster(etcd: EtcdProcess, tmp_path: Path) -> Iterator[FaultCluster]:
    c = FaultCluster(etcd, tmp_path, 3)
    try:
        c.start()
        yield c
    finally:
        problems = c.stop()
    assert not problems, "\n\n".join(problems)


def run_partition(cluster: FaultCluster, *, cut_followers: bool, acks: int) -> None:
    create_topic(cluster.bootstrap, TOPIC, PARTITIONS, RF, {"min.insync.replicas": "2"})
    before = wait_isr_full(cluster.brokers[1].bootstrap, TOPIC, RF)
    victim = before[0].leader
    moved = sorted(p for p, v in before.items() if v.leader == victim)
    survivors = {n for n in cluster.brokers if n != victim}
    observer = cluster.brokers[min(survivors)].bootstrap
    with Recorder(cluster, acks) as rec:
        wait_for_acks(rec, range(PARTITIONS), "acknowledgements on every partition before the cut")
        cut_at = time.monotonic()
        cluster.isolate(victim, etcd=True, replication=cut_followers)
        after = wait_views(observer, TOPIC, lambda vs: all(vs[p].leader in survivors for p in moved),
                           f"new leaders for {moved} (victim {victim} cut off)", WAIT_S)
        elected_seen = time.monotonic()
        for p in moved:
            assert after[p].epoch > before[p].epoch, f"partition {p}: epoch {before[p].epoch} -> {after[p].epoch}"
        wait_for_acks(rec, moved, "acknowledgements from the new leaders", after=elected_seen,
                      nodes={p: after[p].leader for p in moved})
        healed_at = time.monotonic()
        cluster.heal(victim)
        # The victim's lease expired meanwhile: it registers again, follows, catches up, rejoins.
        rejoined = wait_views(observer, TOPIC, lambda vs: all(victim in v.isr and len(v.isr) == RF
                                                              for v in vs.values()),
                              f"victim {victim} back in every ISR after the heal", WAIT_S)
        wait_for_acks(rec, range(PARTITIONS), "acknowledgements after the rejoin", after=time.monotonic())
    report(rec, victim, moved, before, after, cut_at, elected_seen, healed_at)

    for p in moved:
        check_windows(rec, p, victim, after[p].leader, survivors)
    for p in set(range(PARTITIONS)) - set(moved):
        nodes = {a.node for a in rec.acks_of(p)}
        assert nodes == {rejoined[p].leader}, f"partition {p} kept its leader but was acknowledged by {nodes}"

    ends = high_watermarks(cluster)
    got = consume_values(cluster, ends)
    for p in range(PARTITIONS):
        present = set(got[p])
        assert len(present) == len(got[p]), f"partition {p}: a value appears twice"
        acked = rec.acks_of(p)
        if acks == 1 and p in moved:
            # acks=1: what the old leader acknowledged but never replicated may be truncated (Kafka's
            # semantics); everything a leader elected afterwards acknowledged must be there.
            truncated = [a for a in acked if a.node == victim and a.value not in present]
            print(f"partition {p}: {len(truncated)} of {len(rec.acks_of(p, victim))} acks=1 acknowledgements of "
                  f"the old leader truncated" + (f", sent {truncated[0].sent - cut_at:+.2f} s to "
                                                 f"{truncated[-1].sent - cut_at:+.2f} s" if truncated else ""))
            acked = [a for a in acked if a.node != victim]
        lost = [a for a in acked if a.value not in present]
        assert not lost, f"partition {p}: {len(lost)} acknowledged records lost, e.g. {lost[:3]}"
        # The healed victim truncated and follows: byte-identical to the others below the HW.
        reps = {f"broker {n}": partition_dir(b.data_dir, TOPIC, p) for n, b in cluster.brokers.items()}
        wait_replicas_identical(reps, ends[p])


def wait_for_acks(rec: Recorder, partitions, what: str, *, after: float = 0.0,
                  nodes: dict[int, int] | None = None) -> None:
    deadline = time.monotonic() + WAIT_S
    while not all(len(rec.acks_of(p, (nodes or {}).get(p), after)) >= ACKS_BEFORE for p in partitions):
        if time.monotonic() > deadline:
            counts = {p: len(rec.acks_of(p, (nodes or {}).get(p), after)) for p in partitions}
            raise AssertionError(f"timed out after {WAIT_S} s waiting for {what}: {counts}; errors {dict(rec.errors)}")
        time.sleep(0.1)


def wait_replicas_identical(reps: dict[str, Path], hw: int) -> None:
    """The followers may still be fetching the last batches below the HW the consumer saw."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            assert_replicas_identical(reps, hw)
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def check_windows(rec: Recorder, p: int, old: int, new: int, survivors: set[int]) -> None:
    old_acks, new_acks = rec.acks_of(p, old), rec.acks_of(p, new)
    assert old_acks and new_acks, f"partition {p}: acks old {len(old_acks)} new {len(new_acks)}"
    last_old = max(a.sent for a in old_acks)
    first_new = min(a.received for a in new_acks)
    assert last_old < first_new, (f"partition {p}: old leader {old} acknowledged a request sent "
                                  f"{last_old - first_new:.3f} s after new leader {new}'s first acknowledgement")
    seen = rec.first_seen_leader_other_than(p, old, survivors)
    assert seen is not None and last_old < seen.at, (
        f"partition {p}: old leader {old} acknowledged a request sent after {seen} showed the new leader")
    others = {a.node for a in rec.acks_of(p)} - {old, new}
    assert not others, f"partition {p}: acknowledged by {others} too"


def report(rec: Recorder, victim: int, moved: list[int], before: dict[int, PartitionView],
           after: dict[int, PartitionView], cut_at: float, elected_seen: float, healed_at: float) -> None:
    lines = [f"victim {victim}, partitions moved {moved}; times relative to the cut:"]
    for p in moved:
        old = rec.acks_of(p, victim)
        new = rec.acks_of(p, after[p].leader)
        seen = rec.first_seen_leader_other_than(p, victim, set(rec.cluster.brokers) - {victim})
        lines.append(f"  p{p}: old leader {victim} epoch {before[p].epoch}: last ack sent "
                     f"{max(a.sent for a in old) - cut_at:+.2f} s, received {max(a.received for a in old) - cut_at:+.2f} s;"
                     f" new leader {after[p].leader} epoch {after[p].epoch} seen {seen.at - cut_at if seen else 0:+.2f} s,"
                     f" first ack sent {min(a.sent for a in new) - cut_at:+.2f} s,"
                     f" received {min(a.received for a in new) - cut_at:+.2f} s")
    lines.append(f"  elected seen {elected_seen - cut_at:+.2f} s, healed {healed_at - cut_at:+.2f} s; "
                 f"acks {len(rec.acked)}, errors by (node, code) {dict(rec.errors)}")
    print("\n" + "\n".join(lines))


@pytest.mark.parametrize("acks", [-1, 1], ids=["acks_all", "acks_1"])
def test_leader_cut_from_etcd_and_followers(cluster: FaultCluster, acks: int) -> None:
    run_partition(cluster, cut_followers=True, acks=acks)


@pytest.mark.parametrize("acks", [-1, 1], ids=["acks_all", "acks_1"])
def test_leader_cut_from_etcd_only(cluster: FaultCluster, acks: int) -> None:
    run_partition(cluster, cut_followers=False, acks=acks)
