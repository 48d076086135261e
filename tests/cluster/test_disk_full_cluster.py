"""A full log dir on one broker of three (issue 28): that broker halts (as Kafka's with every log dir
failed), its leaderships move to the other replicas and an idempotent acks=all producer goes on
without a delivery error; after space is freed and the broker is started again it catches up, and
every acknowledged record is there exactly once at its offset, on all three replicas byte for byte.

Real etcd, three real brokers; broker 1's log dir is on a small real tmpfs that a file beside it
fills (root only).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.helpers.cluster_state import start_when_lease_gone, wait_full_isr, wait_until
from tests.helpers.etcd_proc import EtcdProcess
from tests.helpers.fault_cluster import FaultCluster, create_topic, try_views
from tests.helpers.replica_compare import partition_dir, replica_differences
from tests.helpers.small_disk import SmallDisk, available_reason

pytestmark = pytest.mark.skipif(available_reason() is not None, reason=str(available_reason()))
TOPIC = "full"
PARTITIONS = 3
FULL_NODE = 1


@pytest.fixture
def cluster(etcd: EtcdProcess, tmp_path: Path) -> Iterator[tuple[FaultCluster, SmallDisk]]:
    with SmallDisk(tmp_path / "disk", 64) as disk:
        c = FaultCluster(etcd, tmp_path, 3, proxied=False, **{"broker.session.timeout.ms": "4000"})
        c.brokers[FULL_NODE].data_dir = disk.data_dir
        try:
            c.start()
            yield c, disk
        finally:
            disk.free()
            problems = c.stop()
        assert not problems, "\n\n".join(problems)


class Load:
    """An idempotent acks=all producer writing each partition's own sequence until stopped."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "log_level": 0})
        self.acked: dict[tuple[int, int], bytes] = {}
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def on_delivery(self, err, msg) -> None:  # noqa: ANN001
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked[(msg.partition(), msg.offset())] = msg.value()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            if i - len(self.acked) - len(self.errors) < 2000:
                self.producer.produce(TOPIC, value=b"%08d" % i + b"x" * 200, partition=i % PARTITIONS,
                                      on_delivery=self.on_delivery)
                i += 1
            self.producer.poll(0.001 if i % 20 else 0.01)
        self.producer.flush(120)


@pytest.mark.slow  # a cluster-fault test (make test-all); the single-node one is in the default suite
def test_full_log_dir_halts_one_broker_and_loses_nothing(cluster: tuple[FaultCluster, SmallDisk]) -> None:
    c, disk = cluster
    full = c.brokers[FULL_NODE]
    create_topic(c.bootstrap, TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    wait_full_isr(c, TOPIC, PARTITIONS, 3)
    load = Load(c.bootstrap)
    load.thread.start()
    try:
        wait_until(lambda: len(load.acked) >= 2000, "2000 records acknowledged")
        disk.fill()
        wait_until(lambda: not full.running, f"broker {FULL_NODE} to halt on its full log dir", timeout=60)
        assert full.proc is not None and full.proc.returncode == 1
        assert "all log dirs in" in full.log_text(), full.log_tail()
        other = c.brokers[2].bootstrap
        wait_until(lambda: (vs := try_views(other, TOPIC)) and all(v.leader not in (-1, FULL_NODE)
                                                                    for v in vs.values()),
                   f"every partition led by a broker other than {FULL_NODE}")
        before = len(load.acked)
        wait_until(lambda: len(load.acked) >= before + 2000, "2000 more records acknowledged without it")
        disk.free()
        start_when_lease_gone(full)
        wait_full_isr(c, TOPIC, PARTITIONS, 3)
        wait_until(lambda: len(load.acked) >= before + 4000, "the load going on with the broker back")
    finally:
        load.stop.set()
        load.thread.join(180)
    assert not load.errors, f"{len(load.errors)} delivery errors, e.g. {load.errors[:3]}"
    wait_full_isr(c, TOPIC, PARTITIONS, 3)

    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "disk-full-check", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    got: dict[tuple[int, int], bytes] = {}
    try:
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        eof: set[int] = set()
        deadline = time.monotonic() + 120
        while len(eof) < PARTITIONS and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.5):
                if m.error() is None:
                    assert (m.partition(), m.offset()) not in got
                    got[(m.partition(), m.offset())] = m.value()
                elif m.error().code() == -191:  # _PARTITION_EOF
                    eof.add(m.partition())
    finally:
        consumer.close()
    missing = [k for k, v in load.acked.items() if got.get(k) != v]
    assert not missing, f"{len(missing)} of {len(load.acked)} acknowledged records missing, e.g. {missing[:5]}"
    values = list(got.values())
    assert len(values) == len(set(values)), "a record is stored twice"
    for p in range(PARTITIONS):
        dirs = {f"broker {n}": partition_dir(b.data_dir, TOPIC, p) for n, b in c.brokers.items()}
        diffs = replica_differences(dirs, max(o for pp, o in got if pp == p) + 1)
        assert not diffs, f"partition {p}: replicas differ: {diffs[:3]}"


def test_idle_broker_halts_when_its_high_watermark_checkpoint_fails(etcd: EtcdProcess, tmp_path: Path) -> None:
    """Found by a campaign: the high-watermark checkpoint (every
    replica.high.watermark.checkpoint.interval.ms) was the first write into a full log dir; it
    logged a traceback and the broker went on, where Kafka fails the dir and halts."""
    with SmallDisk(tmp_path / "disk", 8) as disk:
        c = FaultCluster(etcd, tmp_path, 3, proxied=False, **{"replica.high.watermark.checkpoint.interval.ms": "200",
                                                              "log.flush.offset.checkpoint.interval.ms": "600000"})
        c.brokers[FULL_NODE].data_dir = disk.data_dir
        full = c.brokers[FULL_NODE]
        try:
            c.start()
            create_topic(c.bootstrap, TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
            wait_full_isr(c, TOPIC, PARTITIONS, 3)
            disk.fill()
            wait_until(lambda: not full.running, f"broker {FULL_NODE} to halt on its full log dir", timeout=30)
            assert "all log dirs in" in full.log_text() and "Traceback" not in full.log_text(), full.log_tail()
            disk.free()
            start_when_lease_gone(full)
            wait_full_isr(c, TOPIC, PARTITIONS, 3)
        finally:
            disk.free()
            problems = c.stop()
        assert not problems, "\n\n".join(problems)
