"""The cluster a campaign runs on: 3 real kbroker processes on a 3-member etcd cluster.

With network namespaces (root; tests/helpers/netns.py) every broker and every etcd member gets its
own namespace and address on a bridge, the harness and its clients sit on the bridge's own address,
and a partition is an nftables drop rule inside a namespace. Without them everything listens on
127.0.0.1 and partitions are not available. Each broker's wall clock can be moved with libfaketime
(Debian ``faketime``): the library is preloaded with ``FAKETIME_TIMESTAMP_FILE`` pointing at a
per-broker file the clock nemesis rewrites (``+0`` normal, ``+300`` five minutes ahead...), read
again every second, and ``FAKETIME_DONT_FAKE_MONOTONIC=1`` so CLOCK_MONOTONIC stays real. Each
broker's log dir can live on its own small tmpfs (tests/helpers/small_disk.py) that the disk
nemesis fills. Processes are started and stopped by pid only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from pathlib import Path

from tests.helpers.broker_proc import BrokerProcess, free_port
from tests.helpers.cluster_state import stop_and_check
from tests.helpers.etcd_cluster import EtcdCluster
from tests.helpers.fake_clock import FakeClock
from tests.helpers.netns import NetLab, Node
from tests.helpers.small_disk import SmallDisk

BROKER_PORT = 9092

# Timings: a 6 s etcd lease (the broker fences itself before it expires), followers out of the ISR
# after 5 s, quick retries; small internal topics (6 partitions each) so the cluster starts fast.
CAMPAIGN_OVERRIDES = {
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "5000",
    "replica.fetch.backoff.ms": "200",
    "replica.fetch.wait.max.ms": "200",
    "auto.create.topics.enable": "false",
    "num.partitions": "1",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "transaction.state.log.num.partitions": "6",
    "offsets.topic.num.partitions": "6",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "3000",
    # Small segments, so rolls (and their snapshots) happen during a run; no time-based deletion,
    # which a clock jumped far ahead would trigger (as in Kafka).
    "log.segment.bytes": str(4 * 1024 * 1024),
    "log.retention.ms": "-1",
}


class CampaignBroker(BrokerProcess):
    """A broker in cluster mode on ``host:port``, optionally inside a namespace, with a fakeable clock."""

    def __init__(self, base: Path, node_id: int, *, host: str, port: int, etcd_endpoints: str,
                 prefix: list[str] | None = None, disk: SmallDisk | None = None, clock_file: Path | None = None,
                 overrides: dict[str, str] | None = None, env: dict[str, str] | None = None) -> None:
        self.node_id = node_id
        self.host = host
        self.prefix = list(prefix or [])
        self.disk = disk
        data_dir = disk.data_dir if disk is not None else base / f"node-{node_id}"
        settings = {**CAMPAIGN_OVERRIDES, "node.id": str(node_id), "kbroker.etcd.endpoints": etcd_endpoints,
                    **(overrides or {})}
        super().__init__(data_dir, port=port, overrides=settings, log_path=base / f"broker-{node_id}.log",
                         env=dict(env or {}))
        self.bootstrap = f"{host}:{port}"
        self.clock = FakeClock(clock_file) if clock_file is not None else None
        if self.clock is not None:
            self.env.update(self.clock.env())

    def command(self) -> list[str]:
        settings = {**self.overrides, "listeners": f"PLAINTEXT://{self.bootstrap}",
                    "advertised.listeners": f"PLAINTEXT://{self.bootstrap}", "log.dirs": str(self.data_dir)}
        cmd = [*self.prefix, self.python, "-m", "broker", "serve"]
        for key, value in settings.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def set_clock(self, spec: str) -> None:
        """libfaketime's offset for this broker, e.g. ``+0``, ``+300``, ``-120`` (seconds)."""
        assert self.clock is not None, "broker started without a fakeable clock"
        self.clock.set(spec)


class CampaignCluster:
    def __init__(self, run_dir: Path, *, brokers: int = 3, etcd_members: int = 3, netns: bool = True,
                 disk_mb: int | None = None, faketime: bool = True, overrides: dict[str, str] | None = None,
                 env: dict[int, dict[str, str]] | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.lab: NetLab | None = NetLab() if netns else None
        self.disks: dict[int, SmallDisk] = {}
        self.broker_nodes: dict[int, Node] = {}
        self.etcd_nodes: dict[int, Node] = {}
        try:
            if self.lab is not None:
                for i in range(1, etcd_members + 1):
                    self.etcd_nodes[i] = self.lab.add(f"e{i}", 20 + i)
                for i in range(1, brokers + 1):
                    self.broker_nodes[i] = self.lab.add(f"b{i}", 10 + i)
            self.etcd = EtcdCluster(
                self.run_dir / "etcd", etcd_members,
                hosts=[n.ip for n in self.etcd_nodes.values()] if self.lab else None,
                prefixes=[n.prefix for n in self.etcd_nodes.values()] if self.lab else None)
            self.brokers: dict[int, CampaignBroker] = {}
            for i in range(1, brokers + 1):
                disk = None
                if disk_mb:
                    disk = SmallDisk(self.run_dir / f"disk-{i}", disk_mb)
                    disk.mount_fs()
                    self.disks[i] = disk
                node = self.broker_nodes.get(i)
                self.brokers[i] = CampaignBroker(
                    self.run_dir, i, host=node.ip if node else "127.0.0.1",
                    port=BROKER_PORT if node else free_port(), etcd_endpoints=self.etcd.endpoints,
                    prefix=node.prefix if node else None, disk=disk,
                    clock_file=(self.run_dir / f"clock-{i}.rc") if faketime else None,
                    overrides=overrides, env=(env or {}).get(i))
        except BaseException:
            self._teardown_infra()
            raise

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    @property
    def client_ip(self) -> str:
        """Where the harness's clients connect from (the bridge), for client-broker partitions."""
        return self.lab.host_ip if self.lab else "127.0.0.1"

    def start(self) -> None:
        self.etcd.start()
        for b in self.brokers.values():
            b.start(timeout=90)

    def stop(self) -> list[str]:
        """Stop everything; what went wrong in the brokers (tracebacks, bad exits) for the report."""
        problems: list[str] = []
        if self.lab is not None:
            self.lab.heal_all()
        for b in self.brokers.values():
            if b.clock is not None:
                with contextlib.suppress(Exception):
                    b.set_clock("+0")
        for d in self.disks.values():
            d.free()
        for b in self.brokers.values():  # one left paused (an interrupted run) would ignore SIGTERM
            if b.running:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(b.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
        try:
            problems = stop_and_check(self)  # type: ignore[arg-type]  (duck-typed: .brokers)
        finally:
            for b in self.brokers.values():
                b.kill()
            self.etcd.stop()
            self._teardown_infra()
        return problems

    def _teardown_infra(self) -> None:
        for d in self.disks.values():
            # Keep the data for a post-mortem: copy it out of the tmpfs before it goes.
            with contextlib.suppress(Exception):
                shutil.copytree(d.data_dir, self.run_dir / f"data-{d.mount.name}", dirs_exist_ok=True)
            d.unmount()
        if self.lab is not None:
            self.lab.close()
