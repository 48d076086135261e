"""A kbroker cluster whose network paths a test can cut: real etcd, real brokers, PartitionProxy in between.

Each broker has two listeners: ``CLIENT://127.0.0.1:<port>`` that clients use directly, and
``REPLICATION://127.0.0.1:<own port>`` (``inter.broker.listener.name=REPLICATION``) advertised as
the address of a PartitionProxy in front of it, so every follower fetch (and every other
inter-broker request) *to* that broker passes through a proxy the test can cut. Each broker also
reaches etcd through its own proxy (``kbroker.etcd.endpoints=http://127.0.0.1:<proxy>``), so one
broker can lose etcd while the others keep it. ``isolate(node, etcd=..., replication=...)`` cuts
those proxies, ``heal(node)`` restores them. Proxies keep their ports across broker restarts.

Also the raw-protocol probes the cluster tests share (Metadata, partition state, raw Produce) and
condition waits for leaders and full ISRs. Processes and proxies are stopped by the test, by pid.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

from storage.batch import build_batch

from .broker_proc import BrokerProcess
from .broker_proc import free_port as stable_port
from .cluster_proc import CLUSTER_OVERRIDES
from .etcd_proc import EtcdProcess
from .partition_proxy import Mode, PartitionProxy
from .wire import RawConnection, send_request

# Timings for fault tests: a lease of 4 s (the broker fences itself ~0.8 s before etcd expires it),
# followers dropped from the ISR after 3 s, quick fetch retries after a cut.
FAULT_OVERRIDES = {
    **CLUSTER_OVERRIDES,
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.backoff.ms": "200",
    "replica.fetch.wait.max.ms": "200",
    "auto.create.topics.enable": "false",
}


class FaultBroker(BrokerProcess):
    """A cluster broker with a client listener, a (proxied) replication listener and a (proxied) etcd."""

    def __init__(self, etcd: EtcdProcess, base: Path, node_id: int, *, proxied: bool = True, **overrides: str) -> None:
        self.node_id = node_id
        self.etcd = etcd
        self.replication_port = stable_port()
        self.etcd_proxy: PartitionProxy | None = None
        self.replication_proxy: PartitionProxy | None = None
        if proxied:
            self.etcd_proxy = PartitionProxy(f"127.0.0.1:{etcd.client_port}", name=f"node-{node_id} etcd")
            self.replication_proxy = PartitionProxy(f"127.0.0.1:{self.replication_port}",
                                                    name=f"node-{node_id} replication")
        settings = {**FAULT_OVERRIDES, "node.id": str(node_id), **overrides}
        super().__init__(base / f"node-{node_id}", port=stable_port(), overrides=settings)

    def command(self) -> list[str]:
        settings = {
            **self.overrides,
            "listeners": f"CLIENT://127.0.0.1:{self.port},REPLICATION://127.0.0.1:{self.replication_port}",
            "advertised.listeners": f"CLIENT://127.0.0.1:{self.port},REPLICATION://"
                                    + (self.replication_proxy.address if self.replication_proxy
                                       else f"127.0.0.1:{self.replication_port}"),
            "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:PLAINTEXT",
            "inter.broker.listener.name": "REPLICATION",
            "kbroker.etcd.endpoints": self.etcd_proxy.url if self.etcd_proxy else self.etcd.endpoints,
            "log.dirs": str(self.data_dir),
        }
        cmd = [self.python, "-m", "broker", "serve"]
        for key, value in settings.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    @property
    def proxies(self) -> list[PartitionProxy]:
        return [p for p in (self.etcd_proxy, self.replication_proxy) if p is not None]


class FaultCluster:
    def __init__(self, etcd: EtcdProcess, base: Path, size: int = 3, *, proxied: bool = True,
                 **overrides: str) -> None:
        self.etcd = etcd
        self.brokers = {i: FaultBroker(etcd, base, i, proxied=proxied, **overrides) for i in range(1, size + 1)}

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def start(self) -> None:
        for b in self.brokers.values():
            for p in b.proxies:
                p.start()
        for b in self.brokers.values():
            b.start(timeout=60)

    def stop(self) -> list[str]:
        """Stop every broker, then the proxies; what went wrong (a non-zero exit on SIGTERM, a
        traceback in a broker log: cluster_state.stop_and_check), for the fixture to assert on."""
        from .cluster_state import stop_and_check

        for b in self.brokers.values():
            for p in b.proxies:  # heal first: a broker blackholed from etcd could not deregister
                with contextlib.suppress(Exception):
                    p.heal()
        try:
            return stop_and_check(self)  # type: ignore[arg-type]  (duck-typed: .brokers)
        finally:
            for b in self.brokers.values():
                b.kill()
                for p in b.proxies:
                    p.stop()

    def __enter__(self) -> FaultCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def isolate(self, node: int, *, etcd: bool = True, replication: bool = True, mode: Mode = "blackhole") -> None:
        b = self.brokers[node]
        assert b.etcd_proxy is not None and b.replication_proxy is not None, "cluster started with proxied=False"
        if etcd:
            b.etcd_proxy.cut(mode)
        if replication:
            b.replication_proxy.cut(mode)

    def heal(self, node: int) -> None:
        for p in self.brokers[node].proxies:
            p.heal()

    def others(self, node: int) -> list[FaultBroker]:
        return [b for n, b in self.brokers.items() if n != node]


# --- raw-protocol probes ---------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionView:
    partition: int
    error: int
    leader: int
    epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def metadata(bootstrap: str, topics: list[str] | None = None, timeout: float = 10.0) -> Any:
    T = MetadataRequest.MetadataRequestTopic
    req = MetadataRequest(version=12, topics=None if topics is None else [T(version=12, topic_id=None, name=t)
                                                                         for t in topics],
                          allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    return send_request(bootstrap, req, 12, timeout=timeout)


def partition_views(bootstrap: str, topic: str, timeout: float = 10.0) -> dict[int, PartitionView]:
    """The partitions of ``topic`` as one broker's Metadata shows them (empty if it knows none)."""
    out = {}
    for t in metadata(bootstrap, [topic], timeout).topics:
        if t.name != topic:
            continue
        for p in t.partitions:
            out[p.partition_index] = PartitionView(p.partition_index, p.error_code, p.leader_id, p.leader_epoch,
                                                   tuple(p.replica_nodes), tuple(p.isr_nodes))
    return out


def try_views(bootstrap: str, topic: str) -> dict[int, PartitionView]:
    """Like partition_views, but {} while the broker is down or unreachable."""
    try:
        return partition_views(bootstrap, topic, timeout=5)
    except Exception:
        return {}


def wait_views(bootstrap: str, topic: str, cond, what: str, timeout: float = 120.0,
               interval: float = 0.1) -> dict[int, PartitionView]:
    """Poll one broker's Metadata until ``cond(views)`` holds; the views that satisfied it."""
    deadline = time.monotonic() + timeout
    last: dict[int, PartitionView] = {}
    while True:
        last = try_views(bootstrap, topic)
        if last and cond(last):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; last views: {last}")
        time.sleep(interval)


def wait_isr_full(bootstrap: str, topic: str, rf: int, timeout: float = 120.0) -> dict[int, PartitionView]:
    return wait_views(bootstrap, topic, lambda vs: all(v.leader > 0 and len(v.isr) == rf for v in vs.values()),
                      f"every partition of {topic} led with a full ISR of {rf}", timeout)


def create_topic(bootstrap: str, name: str, partitions: int, rf: int, configs: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=rf,
                                            config=configs or {})], operation_timeout=60, request_timeout=60)
    for f in futures.values():
        f.result(timeout=90)


def produce_request(topic: str, partition: int, values: list[bytes], acks: int, timeout_ms: int,
                    version: int = 9) -> ProduceRequest:
    P = ProduceRequest.TopicProduceData
    return ProduceRequest(version=version, transactional_id=None, acks=acks, timeout_ms=timeout_ms, topic_data=[
        P(version=version, name=topic, partition_data=[P.PartitionProduceData(
            version=version, index=partition, records=build_batch([(None, v) for v in values]))])])


def produce_once(conn: RawConnection, topic: str, partition: int, values: list[bytes], acks: int,
                 timeout_ms: int = 3000, version: int = 9) -> tuple[int, int]:
    """One raw Produce of ``values`` as one batch: (error code, base offset)."""
    resp = conn.request(produce_request(topic, partition, values, acks, timeout_ms, version), version)
    part = resp.responses[0].partition_responses[0]
    return part.error_code, part.base_offset
