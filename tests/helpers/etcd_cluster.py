"""A multi-member etcd cluster of real etcd processes (default 3), for cluster tests and fault campaigns.

Members ``etcd-1``..``etcd-N`` each have their own data dir, log and ports. By default they all
listen on 127.0.0.1 (free ports); ``hosts`` (one address per member) and ``prefixes`` (a command
prefix per member, e.g. a network namespace's ``nsenter``) place them elsewhere, ports then fixed
(2379 client, 2380 peer). ``start()`` launches every member and waits until each one reports
healthy (a health answer needs an elected leader, so members are launched together). A member can
be killed, paused and restarted alone (``member(i)`` is an EtcdProcess; a restart rejoins with its
data dir). ``endpoints`` is the comma-separated value for ``kbroker.etcd.endpoints``;
``leader()`` asks the members who leads (etcd's JSON gateway, ``/v3/maintenance/status``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from .broker_proc import free_port
from .etcd_proc import EtcdProcess

# Slower than the single-member test timings: three members on two shared cores must not call
# elections because one of them was not scheduled for half a second.
CLUSTER_HEARTBEAT_MS = 100
CLUSTER_ELECTION_MS = 1000


class EtcdCluster:
    def __init__(self, base: Path, size: int = 3, *, hosts: list[str] | None = None,
                 prefixes: list[list[str]] | None = None, heartbeat_ms: int = CLUSTER_HEARTBEAT_MS,
                 election_ms: int = CLUSTER_ELECTION_MS) -> None:
        self.base = Path(base)
        names = [f"etcd-{i}" for i in range(1, size + 1)]
        hosts = hosts or ["127.0.0.1"] * size
        fixed = len(set(hosts)) == size  # one address each: the default ports do
        ports = [(2379, 2380) if fixed else (free_port(), free_port()) for _ in names]
        peer_urls = [f"http://{h}:{p[1]}" for h, p in zip(hosts, ports, strict=True)]
        initial = ",".join(f"{n}={u}" for n, u in zip(names, peer_urls, strict=True))
        token = f"kbroker-test-{os.getpid()}-{id(self)}"
        self.members: list[EtcdProcess] = [
            EtcdProcess(self.base / name, name=name, client_port=ports[i][0], peer_port=ports[i][1],
                        log_path=self.base / f"{name}.etcd.log", host=hosts[i], initial_cluster=initial,
                        cluster_token=token, prefix=(prefixes[i] if prefixes else None),
                        heartbeat_ms=heartbeat_ms, election_ms=election_ms)
            for i, name in enumerate(names)]

    def member(self, i: int) -> EtcdProcess:
        """Member ``i`` (1-based)."""
        return self.members[i - 1]

    @property
    def endpoints(self) -> str:
        return ",".join(m.client_url for m in self.members)

    @property
    def client_port(self) -> int:  # EtcdProcess compatibility for helpers that take "an etcd"
        return self.members[0].client_port

    def start(self, timeout: float = 60) -> None:
        for m in self.members:
            m.launch()
        for m in self.members:
            m.wait_healthy(timeout)

    def stop(self) -> None:
        for m in self.members:
            with contextlib.suppress(Exception):
                m.stop()
            m.kill()

    def running(self) -> list[EtcdProcess]:
        return [m for m in self.members if m.running]

    def leader(self) -> int | None:
        """The 1-based index of the member the others call leader, or None if none answers."""
        ids: dict[str, int] = {}
        leader_id = None
        for i, m in enumerate(self.members, start=1):
            if not m.running:
                continue
            try:
                st = m.gateway("/v3/maintenance/status", {}, timeout=2)
            except Exception:  # noqa: BLE001 - paused, cut off or starting
                continue
            ids[str(st.get("header", {}).get("member_id"))] = i
            leader_id = str(st.get("leader")) if st.get("leader") else leader_id
        return ids.get(leader_id) if leader_id else None

    def __enter__(self) -> EtcdCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
