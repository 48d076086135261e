"""A kbroker cluster for tests: N real broker processes in cluster mode against one etcd (127.0.0.1).

Each broker gets its own data dir, a free port and ``node.id`` 1..N, with short etcd session
timings so a killed broker's lease expires within a few seconds. Processes are stopped by pid.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from .broker_proc import BrokerProcess
from .etcd_proc import EtcdProcess

# Short, but with room for a slow shared machine: the lease TTL is 3 s, heartbeats every 0.5 s.
CLUSTER_OVERRIDES = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "num.partitions": "1",
}


def cluster_broker(etcd: EtcdProcess, base: Path, node_id: int, **overrides: str) -> BrokerProcess:
    settings = {**CLUSTER_OVERRIDES, "kbroker.etcd.endpoints": etcd.endpoints, "node.id": str(node_id), **overrides}
    return BrokerProcess(base / f"node-{node_id}", overrides=settings)


class BrokerCluster:
    def __init__(self, etcd: EtcdProcess, base: Path, size: int, **overrides: str) -> None:
        self.etcd = etcd
        self.brokers = {i: cluster_broker(etcd, base, i, **overrides) for i in range(1, size + 1)}

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def start(self) -> None:
        for b in self.brokers.values():
            b.start(timeout=60)

    def stop(self) -> None:
        for b in self.brokers.values():
            with contextlib.suppress(Exception):
                b.stop()
            b.kill()
