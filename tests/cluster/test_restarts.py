"""Issue 14, acceptance 5 and 6: restarts and failovers under idempotent producers (real etcd, 3 brokers).

- Rolling restart: each broker in turn gets SIGTERM (controlled shutdown hands its leaderships to
  other ISR members), is started again and the test waits for every ISR to be full before the next
  one, while a confluent-kafka idempotent acks=all producer keeps writing. The producer sees no
  fatal error and no failed delivery (librdkafka retries the retriable ones by itself); everything
  it wrote is read back exactly once, in produce order per partition.
- Whole-cluster restart (slow): kill -9 every broker and etcd, start etcd, then the brokers: all
  acknowledged records are back and every partition has a leader and a full ISR again.
- Idempotence across failover: a batch acknowledged by a leader that is then killed, sent again with
  the same producer id, epoch and sequence to the new leader (a producer retrying because it never
  saw the answer), is recognised as a duplicate (its original offset, nothing appended): the new
  leader rebuilt the producer state from what it replicated.
- Producer ids are unique across brokers and restarts: InitProducerId on every broker, twice, with
  a SIGTERM restart and a kill -9 restart of all brokers in between.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.errors import ErrorCode
from storage import batch as rb
from tests.compat.rdkafka_io import consume_all
from tests.helpers.cluster_proc import BrokerCluster
from tests.helpers.cluster_state import (
    assert_partition_replicas_identical,
    init_producer_id,
    list_offset,
    produce_raw,
    start_when_lease_gone,
    stop_and_check,
    view,
    wait_full_isr,
    wait_until,
)
from tests.helpers.etcd_proc import EtcdProcess

TIMEOUT = 90
PARTITIONS = 6


@pytest.fixture
def cluster(etcd: EtcdProcess, tmp_path: Path) -> Iterator[BrokerCluster]:
    c = BrokerCluster(etcd, tmp_path, 3, **{"replica.fetch.backoff.ms": "200", "replica.lag.time.max.ms": "5000"})
    problems: list[str] = []
    try:
        c.start()
        yield c
    finally:
        problems = stop_and_check(c)
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


def create(cluster: BrokerCluster, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    fs = admin.create_topics([NewTopic(topic, partitions, 3, config={"min.insync.replicas": "2"})],
                             operation_timeout=60, request_timeout=60)
    fs[topic].result(TIMEOUT)
    wait_full_isr(cluster, topic, partitions, 3)


class IdempotentLoad:
    """A confluent-kafka idempotent acks=all producer writing values 0, 1, 2, ... in a thread until
    stopped (bounded: at most ``max_records`` and ``max_seconds``), recording every acknowledgement,
    failed delivery and error callback."""

    def __init__(self, bootstrap: str, topic: str, *, max_records: int = 200_000, max_seconds: float = 240,
                 rate: float = 1_000) -> None:
        self.topic = topic
        self.max_records, self.max_seconds, self.rate = max_records, max_seconds, rate
        self.acked: list[tuple[int, int, int]] = []  # (partition, offset, value)
        self.failed: list[str] = []
        self.errors: list[KafkaError] = []
        self.sent = 0
        self._stop = threading.Event()
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 120_000, "error_cb": self.errors.append})
        self._thread = threading.Thread(target=self._run, name="idempotent-load", daemon=True)

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self.failed.append(f"{msg.value()!r}: {err}")
        else:
            self.acked.append((msg.partition(), msg.offset(), int(msg.value())))

    def _run(self) -> None:
        start = time.monotonic()
        while not self._stop.is_set() and self.sent < self.max_records and time.monotonic() - start < self.max_seconds:
            # Paced, so that the load spans the restarts instead of finishing before the first.
            if self.sent > (time.monotonic() - start) * self.rate:
                self.producer.poll(0.01)
                continue
            try:
                self.producer.produce(self.topic, key=str(self.sent % 1000).encode(), value=str(self.sent).encode(),
                                      on_delivery=self._on_delivery)
                self.sent += 1
            except BufferError:
                self.producer.poll(0.1)
            self.producer.poll(0)
        self.producer.flush(150)

    def start(self) -> IdempotentLoad:
        self._thread.start()
        return self

    def acked_count(self) -> int:
        return len(self.acked)

    def stop(self) -> None:
        self._stop.set()
        self.finish()

    def finish(self) -> None:
        """Wait until the producer has sent (or been stopped) and flushed."""
        self._thread.join(self.max_seconds + 200)
        assert not self._thread.is_alive(), "producer did not finish flushing"

    def check(self, bootstrap: str, partitions: int = PARTITIONS) -> None:
        """No fatal error, no failed delivery; everything sent is read back once, in order per partition."""
        fatal = [e for e in self.errors if e.fatal()]
        assert not fatal, fatal
        assert not self.failed, self.failed[:5]
        assert len(self.acked) == self.sent
        rows = consume_all(bootstrap, self.topic, partitions, self.sent, timeout=TIMEOUT)
        values = [int(r.value) for r in rows]
        assert len(values) == self.sent, f"read {len(values)} records, {self.sent} acknowledged"
        assert sorted(values) == list(range(self.sent)), "records lost or duplicated"
        by_partition: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for r in rows:
            by_partition[r.partition].append((r.offset, int(r.value)))
        for p, got in by_partition.items():
            in_offset_order = [v for _, v in sorted(got)]
            assert in_offset_order == sorted(in_offset_order), f"partition {p}: not in produce order"
        assert sorted((p, o) for p, o, _ in self.acked) == sorted((r.partition, r.offset) for r in rows)


def test_rolling_restart_under_idempotent_load(cluster: BrokerCluster) -> None:
    topic = "rolling"
    create(cluster, topic)
    load = IdempotentLoad(cluster.bootstrap, topic).start()
    try:
        for node, broker in cluster.brokers.items():
            before = load.acked_count()
            wait_until(lambda b=before: load.acked_count() > b + 500, f"progress before restarting broker {node}")
            assert broker.stop() == 0, broker.log_tail()
            broker.start(timeout=60)
            wait_full_isr(cluster, topic, PARTITIONS, 3)
        before = load.acked_count()
        wait_until(lambda: load.acked_count() > before + 500, "progress after the last restart")
    finally:
        load.stop()
    print(f"{load.sent} records; producer error callbacks: {sorted({e.name() for e in load.errors})}")
    load.check(cluster.bootstrap)
    for p in range(PARTITIONS):
        assert_partition_replicas_identical(cluster, topic, p)


@pytest.mark.slow
def test_kill9_all_brokers_and_etcd_then_restart(cluster: BrokerCluster, etcd: EtcdProcess) -> None:
    topic = "whole"
    create(cluster, topic)
    load = IdempotentLoad(cluster.bootstrap, topic, max_records=20_000, rate=5_000).start()
    load.finish()
    assert not load.failed and len(load.acked) == 20_000
    for b in cluster.brokers.values():
        b.kill()
    etcd.kill()

    etcd.start()
    for b in cluster.brokers.values():
        start_when_lease_gone(b)
    parts = wait_full_isr(cluster, topic, PARTITIONS, 3)
    assert all(i.leader in (1, 2, 3) for i in parts.values())
    load.check(cluster.bootstrap)
    for p in range(PARTITIONS):
        assert_partition_replicas_identical(cluster, topic, p)


def test_retry_across_leader_change_is_deduplicated(cluster: BrokerCluster) -> None:
    topic = "dedup"
    create(cluster, topic, 1)
    info = view(cluster, topic)[0]
    old = cluster.brokers[info.leader]
    err, pid, epoch = init_producer_id(old)
    assert err == 0

    def idem_batch(seq: int, n: int = 5) -> bytes:
        return rb.build_batch([(f"k{seq + i}".encode(), f"v{seq + i}".encode()) for i in range(n)],
                              producer_id=pid, producer_epoch=epoch, base_sequence=seq)

    assert produce_raw(old, topic, 0, idem_batch(0), acks=-1) == (0, 0)
    assert produce_raw(old, topic, 0, idem_batch(5), acks=-1) == (0, 5)
    # acks=all answered: both followers hold seq 0-9. The leader dies before the producer saw the answer.
    old.kill()
    follower_ids = {n for n in info.replicas if n != info.leader}
    survivor = cluster.brokers[min(follower_ids)]

    def new_leader():
        now = view(cluster, topic, via=survivor)[0]
        return now if now.leader in follower_ids and now.epoch > info.epoch else None
    new = cluster.brokers[wait_until(new_leader, "a new leader", TIMEOUT).leader]

    # The retry of seq 5-9: a duplicate, answered with its original offset and not appended again.
    err, base = produce_raw(new, topic, 0, idem_batch(5), acks=-1)
    assert (ErrorCode(err), base) == (ErrorCode.NONE, 5)
    assert list_offset(new, topic, 0) == (0, 10)
    # The next sequence continues where the old leader stopped; a gap would be OUT_OF_ORDER_SEQUENCE_NUMBER.
    assert produce_raw(new, topic, 0, idem_batch(10), acks=-1) == (0, 10)
    err, _ = produce_raw(new, topic, 0, idem_batch(20), acks=-1)
    assert err == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER

    start_when_lease_gone(old)
    wait_full_isr(cluster, topic, 1, 3)
    assert assert_partition_replicas_identical(cluster, topic, 0) == (15, 3)
    rows = consume_all(cluster.bootstrap, topic, 1, 15, timeout=TIMEOUT)
    assert [r.key for r in rows] == [f"k{i}".encode() for i in range(15)]


def test_producer_ids_unique_across_brokers_and_restarts(cluster: BrokerCluster) -> None:
    ids: list[tuple[str, int, int]] = []

    def take(round_name: str) -> None:
        for node, b in cluster.brokers.items():
            for _ in range(2):
                err, pid, epoch = wait_until(lambda b=b: (r := init_producer_id(b))[0] == 0 and r,
                                             f"InitProducerId on broker {node}", TIMEOUT)
                assert epoch == 0
                ids.append((f"{round_name} broker {node}", pid, epoch))

    take("first start")
    for b in cluster.brokers.values():  # SIGTERM restart of every broker
        assert b.stop() == 0, b.log_tail()
        b.start(timeout=60)
    take("after SIGTERM restarts")
    for b in cluster.brokers.values():
        b.kill()
    for b in cluster.brokers.values():
        start_when_lease_gone(b)
    take("after kill -9 of all brokers")
    pids = [pid for _, pid, _ in ids]
    assert len(pids) == 18 and len(set(pids)) == 18, ids
