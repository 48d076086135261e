"""Coordinators in a 3-broker test cluster (issue 15 tests): who coordinates a transactional id or a
group, ids that land on a chosen broker, data partitions led by other brokers, read_committed reads.

Everything asks the brokers over the wire (FindCoordinator v3, Metadata through cluster_state) and
treats a broker that is down or still starting as "not yet"; waits have generous deadlines.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from kafka.protocol.metadata import FindCoordinatorRequest

from coordinator.partition_access import partition_for
from tests.helpers.cluster_proc import BrokerCluster
from tests.helpers.cluster_state import WAIT_S, checked_cluster, live, view, wait_full_isr, wait_until
from tests.helpers.etcd_proc import EtcdProcess
from tests.helpers.fault_cluster import create_topic
from tests.helpers.wire import send_request

TXN_TOPIC = "__transaction_state"
GROUP_TOPIC = "__consumer_offsets"
KEY_GROUP, KEY_TXN = 0, 1
# Few internal partitions: 50 RF=3 partitions per topic on 2 shared cores only slow the start-up.
INTERNAL_PARTITIONS = 6
COORD_OVERRIDES = {
    "transaction.state.log.num.partitions": str(INTERNAL_PARTITIONS),
    "offsets.topic.num.partitions": str(INTERNAL_PARTITIONS),
    "replica.lag.time.max.ms": "5000",
    "replica.fetch.backoff.ms": "200",
}


@contextmanager
def coord_cluster(etcd: EtcdProcess, base: Path, env: dict[int, dict[str, str]] | None = None,
                  **overrides: str) -> Iterator[BrokerCluster]:
    """Three brokers (node ids 1-3) with COORD_OVERRIDES; ``env`` adds environment variables per node
    (fault injection on one broker only). At exit every broker is stopped and the test fails on a
    traceback in a broker log or a non-zero exit on SIGTERM (cluster_state.stop_and_check)."""
    with checked_cluster(etcd, base, 3, env, **{**COORD_OVERRIDES, **overrides}) as cluster:
        yield cluster


def find_coordinator(bootstrap: str, key: str, key_type: int) -> tuple[int, int]:
    """(error code, node id) of FindCoordinator v3 asked of one broker."""
    resp = send_request(bootstrap, FindCoordinatorRequest(version=3, key=key, key_type=key_type), 3, timeout=10)
    return resp.error_code, resp.node_id


def wait_coordinator(cluster: BrokerCluster, key: str, key_type: int, *, not_node: int | None = None,
                     timeout: float = WAIT_S) -> int:
    """The node id a live broker names as coordinator of ``key`` (and, with ``not_node``, other than it)."""
    def ask() -> int | None:
        for b in live(cluster):
            try:
                err, node = find_coordinator(b.bootstrap, key, key_type)
            except Exception:  # noqa: BLE001 - a broker starting or dying: ask the next one
                continue
            if err == 0 and node != not_node and cluster.brokers[node].running:
                return node
        return None
    return wait_until(ask, f"a coordinator for {key!r}" + (f" other than node {not_node}" if not_node else ""),
                      timeout)


def ensure_internal_topic(cluster: BrokerCluster, topic: str) -> dict:
    """Create ``topic`` (__transaction_state or __consumer_offsets) through a FindCoordinator and
    wait until each of its partitions has a leader and a full ISR of 3."""
    wait_coordinator(cluster, "probe", KEY_TXN if topic == TXN_TOPIC else KEY_GROUP)
    return wait_full_isr(cluster, topic, INTERNAL_PARTITIONS, 3)


def id_led_by(cluster: BrokerCluster, topic: str, node: int, prefix: str) -> tuple[str, int]:
    """A key (``prefix-N``) whose coordinator partition of ``topic`` is led by ``node``, and that
    partition. Fails if ``node`` leads none of them (placement spreads the leaders)."""
    parts = sorted(p for p, info in view(cluster, topic).items() if info.leader == node)
    assert parts, f"node {node} leads no partition of {topic}: {view(cluster, topic)}"
    for i in range(100_000):
        key = f"{prefix}-{i}"
        if partition_for(key, INTERNAL_PARTITIONS) in parts:
            return key, partition_for(key, INTERNAL_PARTITIONS)
    raise AssertionError("no key found")  # unreachable: the hash spreads over 6 partitions


def data_topic(cluster: BrokerCluster, name: str, partitions: int, *, min_isr: int = 2) -> dict:
    """An RF=3 topic with every partition led and fully in sync; returns its partition views."""
    create_topic(cluster.bootstrap, name, partitions, 3, {"min.insync.replicas": str(min_isr)})
    return wait_full_isr(cluster, name, partitions, 3)


def read_all(bootstrap: str, topic: str, partitions: Iterable[int], expected: int, *,
             isolation: str = "read_committed", timeout: float = WAIT_S) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of ``partitions`` from the beginning, as (offset, value), once at least ``expected``
    records were read and no more arrive for a moment; assign() only, no group involved."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "coord-cluster-reader", "enable.auto.commit": False,
                  "isolation.level": isolation, "auto.offset.reset": "earliest", "enable.partition.eof": True})
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in partitions}
    try:
        c.assign([TopicPartition(topic, p, 0) for p in got])
        deadline = time.monotonic() + timeout
        idle_since = time.monotonic()
        while time.monotonic() < deadline:
            msgs = c.consume(num_messages=500, timeout=0.5)
            real = [m for m in msgs if m.error() is None]
            for m in real:
                got[m.partition()].append((m.offset(), m.value()))
            if real:
                idle_since = time.monotonic()
            if sum(map(len, got.values())) >= expected and time.monotonic() - idle_since > 2.0:
                return got
        raise AssertionError(f"read {sum(map(len, got.values()))} of {expected} records of {topic} "
                             f"({isolation}) within {timeout} s")
    finally:
        c.close()
