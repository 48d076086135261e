"""`kbroker cluster`: a local kbroker cluster for development — one etcd and N brokers on 127.0.0.1.

``up --brokers N --dir DIR [--base-port P]`` starts etcd (the Debian package ``etcd-server``; a clear
error names it when the binary is missing) on ports P+100/P+101 with its data in ``DIR/etcd``, then N
brokers as background processes: node ids 1..N on ports P..P+N-1, each with
``DIR/node-<id>/server.properties`` (so ``kbroker serve DIR/node-<id>/server.properties`` restarts
one by hand) and its log in ``DIR/node-<id>/broker.log``. It prints the bootstrap servers and records
the pids in ``DIR/cluster.json``.
``status --dir DIR`` lists each node's id, pid (and whether it runs), port and the partitions it
leads (from a Metadata request), the controller and the etcd endpoint.
``down --dir DIR`` stops the brokers, then etcd, by the pids recorded (SIGTERM, SIGKILL after 30 s);
a pid is only signalled while its command line is still the one started (pids get reused).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ETCD_PACKAGE = "etcd-server"
STATE_FILE = "cluster.json"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
REPO_ROOT = Path(__file__).resolve().parents[1]


class ClusterCliError(RuntimeError):
    pass


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _spawn(cmd: list[str], log_path: Path, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        # A session of its own: the cluster outlives this command and a Ctrl-C in its terminal.
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=cwd,
                                start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _wait(condition, what: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").splitlines()[-15:]
            raise ClusterCliError(f"{what} exited with code {proc.returncode}; last lines of {log_path}:\n"
                                  + "\n".join(tail))
        with contextlib.suppress(OSError, ValueError):
            if condition():
                return
        time.sleep(0.1)
    raise ClusterCliError(f"{what} did not come up within {START_TIMEOUT_S:.0f}s (see {log_path})")


def _etcd_healthy(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
        return json.loads(resp.read()).get("health") == "true"


def _listening(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1):
        return True


def cmd_up(args: argparse.Namespace) -> int:
    etcd = shutil.which("etcd")
    if etcd is None:
        raise ClusterCliError(f"etcd not found on PATH: install the Debian package {ETCD_PACKAGE} "
                              f"(apt-get install {ETCD_PACKAGE})")
    base = Path(args.dir).resolve()
    state_path = base / STATE_FILE
    if state_path.exists() and _any_running(json.loads(state_path.read_text())):
        raise ClusterCliError(f"a cluster from {base} is still running: `kbroker cluster down --dir {args.dir}` first")
    if args.brokers < 1:
        raise ClusterCliError("--brokers must be at least 1")
    broker_ports = [args.base_port + i for i in range(args.brokers)]
    client_port, peer_port = args.base_port + 100, args.base_port + 101
    busy = [p for p in [*broker_ports, client_port, peer_port] if not _port_free(p)]
    if busy:
        raise ClusterCliError(f"port(s) {', '.join(map(str, busy))} on 127.0.0.1 are in use; choose another --base-port")
    base.mkdir(parents=True, exist_ok=True)
    client_url, peer_url = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
    state: dict = {"etcd": {"endpoint": client_url}, "nodes": []}
    etcd_log = base / "etcd.log"
    etcd_cmd = [etcd, "--name", "kbroker", "--data-dir", str(base / "etcd"), "--listen-client-urls", client_url,
                "--advertise-client-urls", client_url, "--listen-peer-urls", peer_url,
                "--initial-advertise-peer-urls", peer_url, "--initial-cluster", f"kbroker={peer_url}",
                "--log-level", "warn", "--logger", "zap"]
    proc = _spawn(etcd_cmd, etcd_log)
    state["etcd"].update(pid=proc.pid, cmd=etcd_cmd)
    _save(state_path, state)
    _wait(lambda: _etcd_healthy(client_url), "etcd", proc, etcd_log)
    print(f"etcd     pid {proc.pid:>7}  {client_url}")
    for i, port in enumerate(broker_ports, start=1):
        node_dir = base / f"node-{i}"
        node_dir.mkdir(exist_ok=True)
        props = node_dir / "server.properties"
        props.write_text(f"# written by kbroker cluster up\nnode.id={i}\nlisteners=PLAINTEXT://127.0.0.1:{port}\n"
                         f"log.dirs={node_dir / 'data'}\nkbroker.etcd.endpoints={client_url}\n"
                         f"default.replication.factor={min(args.brokers, 3)}\n"
                         # The internal topics' factors (Kafka's default 3) fitted to a smaller cluster.
                         f"offsets.topic.replication.factor={min(args.brokers, 3)}\n"
                         f"transaction.state.log.replication.factor={min(args.brokers, 3)}\n"
                         f"transaction.state.log.min.isr={min(args.brokers, 2)}\n")
        cmd = [sys.executable, "-m", "broker", "serve", str(props)]
        log_path = node_dir / "broker.log"
        proc = _spawn(cmd, log_path, cwd=REPO_ROOT)
        state["nodes"].append({"id": i, "pid": proc.pid, "port": port, "cmd": cmd, "log": str(log_path)})
        _save(state_path, state)
        _wait(lambda p=port: _listening(p), f"broker {i}", proc, log_path)
        print(f"node {i:<3} pid {proc.pid:>7}  127.0.0.1:{port}  ({props})")
    print("bootstrap servers: " + ",".join(f"127.0.0.1:{p}" for p in broker_ports))
    return 0


def _save(path: Path, state: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, path)


def _load(dir_: str) -> dict:
    path = Path(dir_).resolve() / STATE_FILE
    if not path.exists():
        raise ClusterCliError(f"no cluster in {dir_} ({path} is missing)")
    return json.loads(path.read_text())


def _running(entry: dict) -> bool:
    """The recorded process still runs with the command line it was started with."""
    try:
        raw = Path(f"/proc/{entry['pid']}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    return raw.split(b"\0")[:-1] == [c.encode() for c in entry["cmd"]]


def _any_running(state: dict) -> bool:
    return any(_running(n) for n in state.get("nodes", [])) or ("pid" in state.get("etcd", {})
                                                                  and _running(state["etcd"]))


async def _leaderships(ports: list[int]) -> tuple[int, dict[int, list[str]]]:
    from kafka.protocol.metadata import MetadataRequest

    from protocol.client import ProtocolClient

    for port in ports:
        try:
            async with asyncio.timeout(10):
                async with ProtocolClient("127.0.0.1", port) as client:
                    md = await client.request(MetadataRequest(version=12, topics=None, allow_auto_topic_creation=False,
                                                              include_topic_authorized_operations=False), 12)
        except (OSError, TimeoutError):
            continue
        leads: dict[int, list[str]] = {}
        for t in md.topics:
            for p in t.partitions:
                leads.setdefault(p.leader_id, []).append(f"{t.name}-{p.partition_index}")
        return md.controller_id, leads
    return -1, {}


def cmd_status(args: argparse.Namespace) -> int:
    state = _load(args.dir)
    nodes = state["nodes"]
    controller, leads = asyncio.run(_leaderships([n["port"] for n in nodes if _running(n)]))
    etcd = state["etcd"]
    print(f"etcd {etcd['endpoint']}  pid {etcd.get('pid')}  {'running' if _running(etcd) else 'stopped'}")
    print(f"controller: {controller if controller >= 0 else 'unknown'}")
    for n in nodes:
        led = sorted(leads.get(n["id"], []))
        print(f"node {n['id']}  pid {n['pid']}  {'running' if _running(n) else 'stopped'}  127.0.0.1:{n['port']}  "
              f"leads {len(led)}: {' '.join(led) if led else '-'}")
    offline = sorted(leads.get(-1, []))
    if offline:
        print(f"offline partitions ({len(offline)}): {' '.join(offline)}")
    return 0


def _stop(entry: dict, what: str) -> None:
    if not _running(entry):
        return
    os.kill(entry["pid"], signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _running(entry) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _running(entry):
        print(f"{what} (pid {entry['pid']}) did not stop within {STOP_TIMEOUT_S:.0f}s: killing it", file=sys.stderr)
        os.kill(entry["pid"], signal.SIGKILL)
    print(f"stopped {what} (pid {entry['pid']})")


def cmd_down(args: argparse.Namespace) -> int:
    state = _load(args.dir)
    for n in state["nodes"]:
        _stop(n, f"node {n['id']}")
    if "pid" in state["etcd"]:
        _stop(state["etcd"], "etcd")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="kbroker cluster", description="A local kbroker cluster on 127.0.0.1.")
    sub = parser.add_subparsers(dest="action", required=True)
    up = sub.add_parser("up", help="start etcd and N brokers")
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--dir", required=True)
    up.add_argument("--base-port", type=int, default=9092, help="first broker port; etcd uses base+100 and base+101")
    up.set_defaults(func=cmd_up)
    st = sub.add_parser("status", help="list nodes, pids, ports and leaderships")
    st.add_argument("--dir", required=True)
    st.set_defaults(func=cmd_status)
    dn = sub.add_parser("down", help="stop the brokers and etcd")
    dn.add_argument("--dir", required=True)
    dn.set_defaults(func=cmd_down)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ClusterCliError as e:
        print(f"kbroker cluster: {e}", file=sys.stderr)
        return 1
