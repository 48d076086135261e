"""`kbroker cluster up/status/down`: a local etcd + 3 brokers started, inspected and stopped by pid."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker_proc import REPO_ROOT
from tests.helpers.tools import require_tool


def _kbroker(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=180, env=env)


def _free_base_port() -> int:
    """A port P with P..P+2 and P+100, P+101 free on 127.0.0.1 (the ports `cluster up` uses)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base > 60000:
            continue
        ok = True
        for port in [base, base + 1, base + 2, base + 100, base + 101]:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
        if ok:
            return base
    raise AssertionError("no free port range")


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


def test_cluster_up_status_down(tmp_path: Path) -> None:
    require_tool("etcd", shutil.which("etcd") is not None, "etcd not on PATH (apt-get install etcd-server)")
    d = tmp_path / "c"
    base = _free_base_port()
    try:
        up = _kbroker("cluster", "up", "--brokers", "3", "--dir", str(d), "--base-port", str(base))
        assert up.returncode == 0, up.stdout + up.stderr
        bootstrap = f"127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}"
        assert f"bootstrap servers: {bootstrap}" in up.stdout
        for i in (1, 2, 3):
            props = (d / f"node-{i}" / "server.properties").read_text()
            assert f"node.id={i}" in props and f"127.0.0.1:{base + i - 1}" in props
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic("cli-t", num_partitions=3, replication_factor=1)]).values():
            f.result(timeout=90)
        status = _kbroker("cluster", "status", "--dir", str(d))
        assert status.returncode == 0, status.stderr
        assert f"etcd http://127.0.0.1:{base + 100}" in status.stdout
        lines = [line for line in status.stdout.splitlines() if line.startswith("node ")]
        assert len(lines) == 3 and all("running" in line for line in lines)
        assert sum(line.count("cli-t-") for line in lines) == 3
    finally:
        down = _kbroker("cluster", "down", "--dir", str(d))
    assert down.returncode == 0, down.stderr
    state = json.loads((d / "cluster.json").read_text())
    pids = [n["pid"] for n in state["nodes"]] + [state["etcd"]["pid"]]
    assert len(pids) == 4 and not any(_alive(p) for p in pids)


def test_cluster_up_without_etcd_names_the_package(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}  # python only, no etcd
    if shutil.which("etcd", path=env["PATH"]):
        pytest.skip("etcd lives next to python")
    out = _kbroker("cluster", "up", "--brokers", "1", "--dir", str(tmp_path / "x"), env=env)
    assert out.returncode == 1 and "etcd-server" in out.stderr
