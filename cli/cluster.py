"""`kbroker cluster`: a local kbroker cluster for development — etcd and N brokers on 127.0.0.1.

``up --dir DIR [--brokers N|auto] [--etcd-nodes M] [--base-port P] [--config FILE] [--override k=v ...]``
starts an etcd cluster of M members (default 1; the Debian package ``etcd-server``, a clear error
names it when the binary is missing) — member i on ports P+100+2(i-1) (clients) and P+101+2(i-1)
(peers), its data in ``DIR/etcd`` (one member) or ``DIR/etcd-<i>`` — then N brokers (default 3) as
background processes (``--brokers auto``: one per core of the host, since a kbroker process uses
one core; docs/operations.md says when that pays): node ids 1..N on ports P..P+N-1, each with ``DIR/node-<id>/server.properties``
(so ``kbroker serve DIR/node-<id>/server.properties`` restarts one by hand) and its log in
``DIR/node-<id>/broker.log``. Every broker gets the same configs: the cluster's defaults (replication
factors fitted to N), then the properties of ``--config FILE``, then the ``--override`` flags; each
node's own keys (node.id, listeners, log.dirs, kbroker.etcd.endpoints) are set by the tool. It prints
the bootstrap servers and records everything in ``DIR/cluster.json``.

The settings are kept: ``up --dir DIR`` after ``down`` starts the same cluster (same sizes, ports,
``--config`` file — read again — and overrides) on its data; ``--override k=v`` on a later ``up`` adds
to or replaces the recorded overrides (``--override k=`` removes one), ``--config`` replaces the file.
The sizes and ports of an existing cluster cannot change.

``status --dir DIR`` lists the etcd members and the brokers — pid, running or stopped, address, and
per broker the partitions it leads, the replicas it holds and how many of those are in the ISR (from
a Metadata request) — then the controller and the partition totals (offline, under-replicated). A
broker started by hand from its ``server.properties`` counts as running: a node is the process that
holds its log dir's lock (``DIR/node-<id>/data/.lock``).
``down --dir DIR`` stops the brokers (those started by hand too), then the etcd members, by pid
(SIGTERM, SIGKILL after 30 s); a pid is signalled only while it is still the process recorded (its
command line) or still holds the node's log-dir lock (pids get reused).

Ports are probed with SO_REUSEADDR, as the brokers and etcd bind them: a port with connections left in
TIME-WAIT by a cluster just stopped is free to listen on, so ``up`` right after ``down`` works.
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

from cli.common import CliError, load_properties

ETCD_PACKAGE = "etcd-server"
STATE_FILE = "cluster.json"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
REPO_ROOT = Path(__file__).resolve().parents[1]
# Set per node by the tool; a --config file's values are ignored (with a note), an --override is refused.
NODE_KEYS = ("node.id", "broker.id", "listeners", "advertised.listeners", "log.dirs", "log.dir",
             "kbroker.etcd.endpoints", "process.roles", "controller.quorum.voters")
DEFAULTS = {"brokers": 3, "etcd_nodes": 1, "base_port": 9092}


class ClusterCliError(CliError):
    pass


# --- processes ---------------------------------------------------------------------------------------


def _port_free(port: int) -> bool:
    """Whether a listener could bind ``port`` now. SO_REUSEADDR as the brokers (asyncio) and etcd (Go)
    set it: connections in TIME-WAIT on the port do not make it busy, a listening socket does."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
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


def _cmdline(pid: int) -> list[bytes] | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def _started_pid(entry: dict) -> int | None:
    """The recorded pid while it still runs the command line it was started with."""
    pid = entry.get("pid")
    if pid is None:
        return None
    return pid if _cmdline(pid) == [c.encode() for c in entry["cmd"]] else None


def _lock_holder(data_dir: Path) -> int | None:
    """The pid holding the flock of ``data_dir/.lock`` (storage/dir_lock.py: every broker holds its
    log dir's lock for its life and writes its pid there), confirmed in /proc/locks so that a stale
    pid in the file is never taken for a live broker."""
    lock = data_dir / ".lock"
    try:
        pid = int(lock.read_text().strip() or "0")
        inode = lock.stat().st_ino
        locks = Path("/proc/locks").read_text()
    except (OSError, ValueError):
        return None
    for line in locks.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 12345 08:02:1234567 0 EOF"
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[4] == str(pid) and parts[5].endswith(f":{inode}"):
            return pid
    return None


def _node_pid(base: Path, node: dict) -> int | None:
    """The process serving this node: the one ``up`` started, or one started by hand on its log dir."""
    return _started_pid(node) or _lock_holder(base / f"node-{node['id']}" / "data")


def _stop(pid_now, what: str) -> None:
    """SIGTERM the process ``pid_now()`` names (re-checked before each signal), SIGKILL after 30 s."""
    pid = pid_now()
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while pid_now() == pid and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid_now() == pid:
        print(f"{what} (pid {pid}) did not stop within {STOP_TIMEOUT_S:.0f}s: killing it", file=sys.stderr)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    print(f"stopped {what} (pid {pid})")


# --- state -------------------------------------------------------------------------------------------


def _save(path: Path, state: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, path)


def _upgrade(state: dict) -> dict:
    """A cluster.json written before --etcd-nodes/--override: one etcd member, no overrides."""
    etcd = state.get("etcd", {})
    if "members" not in etcd:
        endpoint = etcd.get("endpoint", "http://127.0.0.1:9192")
        port = int(endpoint.rsplit(":", 1)[1])
        member = {"name": "kbroker", "client_port": port, "peer_port": port + 1, "data": "etcd", "log": "etcd.log"}
        member.update({k: etcd[k] for k in ("pid", "cmd") if k in etcd})
        state["etcd"] = {"members": [member]}
        nodes = state.get("nodes", [])
        state.setdefault("settings", {"brokers": len(nodes), "etcd_nodes": 1,
                                      "base_port": nodes[0]["port"] if nodes else port - 100,
                                      "overrides": {}, "config": None})
    return state


def _load(dir_: str) -> dict:
    path = Path(dir_).resolve() / STATE_FILE
    if not path.exists():
        raise ClusterCliError(f"no cluster in {dir_} ({path} is missing)")
    return _upgrade(json.loads(path.read_text()))


def _endpoints(state: dict) -> str:
    return ",".join(f"http://127.0.0.1:{m['client_port']}" for m in state["etcd"]["members"])


def _any_running(base: Path, state: dict) -> bool:
    return (any(_node_pid(base, n) for n in state.get("nodes", []))
            or any(_started_pid(m) for m in state["etcd"]["members"]))


# --- up ----------------------------------------------------------------------------------------------


def _overrides(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ClusterCliError(f"--override expects key=value, got {item!r}")
        if key in NODE_KEYS:
            raise ClusterCliError(f"{key} is set per node by kbroker cluster and cannot be overridden")
        out[key] = value.strip()
    return out


def _brokers(value: str) -> int:
    """--brokers N, or 'auto': one broker process per core (a kbroker process uses one core)."""
    if value == "auto":
        return os.cpu_count() or 1
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {value!r}") from None


def _settings(args: argparse.Namespace, recorded: dict | None) -> dict:
    """This run's settings: the recorded ones (an existing cluster) under what the flags say."""
    settings = dict(recorded or {"overrides": {}, "config": None, **DEFAULTS})
    for key in ("brokers", "etcd_nodes", "base_port"):
        given = getattr(args, key)
        if given is None:
            continue
        if recorded is not None and given != recorded[key]:
            raise ClusterCliError(f"the cluster in {args.dir} has --{key.replace('_', '-')} {recorded[key]}; "
                                  "an existing cluster keeps its sizes and ports")
        settings[key] = given
    if settings["brokers"] < 1:
        raise ClusterCliError("--brokers must be at least 1")
    if settings["etcd_nodes"] < 1:
        raise ClusterCliError("--etcd-nodes must be at least 1")
    merged = dict(settings["overrides"])
    for key, value in _overrides(args.override).items():
        if value:
            merged[key] = value
        else:
            merged.pop(key, None)  # --override k= : back to the default
    settings["overrides"] = merged
    if args.config is not None:
        settings["config"] = str(Path(args.config).resolve())
    return settings


def _escape(text: str, key: bool = False) -> str:
    """java.util.Properties escaping, ISO-8859-1 safe (other characters as \\uXXXX)."""
    out = []
    for i, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch in "=:#!" and (key or i == 0) or (ch == " " and (key or i == 0)):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) > 0xFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def _node_properties(settings: dict, file_props: dict[str, str], node_id: int, port: int, node_dir: Path,
                     endpoints: str) -> str:
    n = settings["brokers"]
    props = {"default.replication.factor": str(min(n, 3)),
             # The internal topics' factors (Kafka's default 3) fitted to a smaller cluster.
             "offsets.topic.replication.factor": str(min(n, 3)),
             "transaction.state.log.replication.factor": str(min(n, 3)),
             "transaction.state.log.min.isr": str(min(n, 2))}
    props.update(file_props)
    props.update(settings["overrides"])
    props.update({"node.id": str(node_id), "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                  "log.dirs": str(node_dir / "data"), "kbroker.etcd.endpoints": endpoints})
    head = "# written by kbroker cluster up: change it with up --config FILE / --override k=v\n"
    return head + "".join(f"{_escape(k, key=True)}={_escape(v)}\n" for k, v in props.items())


def _etcd_members(settings: dict) -> list[dict]:
    one = settings["etcd_nodes"] == 1
    members = []
    for i in range(1, settings["etcd_nodes"] + 1):
        client = settings["base_port"] + 100 + 2 * (i - 1)
        # One member keeps the names of the single-etcd layout (so older cluster dirs start again).
        members.append({"name": "kbroker" if one else f"etcd-{i}", "client_port": client, "peer_port": client + 1,
                        "data": "etcd" if one else f"etcd-{i}", "log": "etcd.log" if one else f"etcd-{i}.log"})
    return members


def cmd_up(args: argparse.Namespace) -> int:
    etcd = shutil.which("etcd")
    if etcd is None:
        raise ClusterCliError(f"etcd not found on PATH: install the Debian package {ETCD_PACKAGE} "
                              f"(apt-get install {ETCD_PACKAGE})")
    base = Path(args.dir).resolve()
    state_path = base / STATE_FILE
    recorded = _load(args.dir) if state_path.exists() else None
    if recorded is not None and _any_running(base, recorded):
        raise ClusterCliError(f"a cluster from {base} is still running: `kbroker cluster down --dir {args.dir}` first")
    settings = _settings(args, recorded["settings"] if recorded else None)
    file_props: dict[str, str] = {}
    if settings["config"]:
        for key, value in load_properties(settings["config"]).items():
            if key in NODE_KEYS:
                print(f"kbroker cluster: ignoring {key} from {settings['config']}: set per node", file=sys.stderr)
            else:
                file_props[key] = value
    broker_ports = [settings["base_port"] + i for i in range(settings["brokers"])]
    members = _etcd_members(settings)
    ports = broker_ports + [p for m in members for p in (m["client_port"], m["peer_port"])]
    busy = [p for p in ports if not _port_free(p)]
    if busy:
        raise ClusterCliError(f"port(s) {', '.join(map(str, busy))} on 127.0.0.1 are in use; choose another --base-port")
    base.mkdir(parents=True, exist_ok=True)
    state: dict = {"settings": settings, "etcd": {"members": members}, "nodes": []}
    endpoints = _endpoints(state)
    initial = ",".join(f"{m['name']}=http://127.0.0.1:{m['peer_port']}" for m in members)
    procs = []
    for m in members:
        client_url, peer_url = f"http://127.0.0.1:{m['client_port']}", f"http://127.0.0.1:{m['peer_port']}"
        m["cmd"] = [etcd, "--name", m["name"], "--data-dir", str(base / m["data"]),
                    "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
                    "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                    "--initial-cluster", initial, "--initial-cluster-state", "new",
                    "--initial-cluster-token", f"kbroker-{base.name}", "--log-level", "warn", "--logger", "zap"]
        proc = _spawn(m["cmd"], base / m["log"])
        m["pid"] = proc.pid
        procs.append((m, proc))
        _save(state_path, state)
    # The members start together: none is healthy before a quorum of them runs.
    for m, proc in procs:
        _wait(lambda url=f"http://127.0.0.1:{m['client_port']}": _etcd_healthy(url), f"etcd member {m['name']}",
              proc, base / m["log"])
        print(f"etcd {m['name']:<8} pid {proc.pid:>7}  http://127.0.0.1:{m['client_port']}")
    for i, port in enumerate(broker_ports, start=1):
        node_dir = base / f"node-{i}"
        node_dir.mkdir(exist_ok=True)
        props = node_dir / "server.properties"
        props.write_bytes(_node_properties(settings, file_props, i, port, node_dir, endpoints).encode("iso-8859-1"))
        cmd = [sys.executable, "-m", "broker", "serve", str(props)]
        log_path = node_dir / "broker.log"
        proc = _spawn(cmd, log_path, cwd=REPO_ROOT)
        state["nodes"].append({"id": i, "pid": proc.pid, "port": port, "cmd": cmd, "log": str(log_path)})
        _save(state_path, state)
        _wait(lambda p=port: _listening(p), f"broker {i}", proc, log_path)
        print(f"node {i:<3} pid {proc.pid:>7}  127.0.0.1:{port}  ({props})")
    if settings["config"] or settings["overrides"]:
        shown = [f"--config {settings['config']}"] if settings["config"] else []
        shown += [f"{k}={v}" for k, v in sorted(settings["overrides"].items())]
        print("broker configs: " + " ".join(shown))
    print("bootstrap servers: " + ",".join(f"127.0.0.1:{p}" for p in broker_ports))
    return 0


# --- status ------------------------------------------------------------------------------------------


async def _metadata(ports: list[int]) -> object | None:
    from kafka.protocol.metadata import MetadataRequest

    from protocol.client import ProtocolClient

    for port in ports:
        try:
            async with asyncio.timeout(10):
                async with ProtocolClient("127.0.0.1", port) as client:
                    return await client.request(MetadataRequest(version=12, topics=None,
                                                                allow_auto_topic_creation=False,
                                                                include_topic_authorized_operations=False), 12)
        except (OSError, TimeoutError, EOFError, asyncio.IncompleteReadError):
            continue
    return None


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def cmd_status(args: argparse.Namespace) -> int:
    base = Path(args.dir).resolve()
    state = _load(args.dir)
    nodes = state["nodes"]
    pids = {n["id"]: _node_pid(base, n) for n in nodes}
    md = asyncio.run(_metadata([n["port"] for n in nodes if pids[n["id"]]]))
    rows = [["ETCD", "PID", "STATE", "ENDPOINT"]]
    for m in state["etcd"]["members"]:
        pid = _started_pid(m)
        rows.append([m["name"], str(pid or m.get("pid") or "-"), "running" if pid else "stopped",
                     f"http://127.0.0.1:{m['client_port']}"])
    for line in _table(rows):
        print(line)
    print()
    leads: dict[int, int] = {}
    replicas: dict[int, int] = {}
    in_isr: dict[int, int] = {}
    offline, under = [], []
    for t in (md.topics if md is not None else []):
        for p in t.partitions:
            name = f"{t.name}-{p.partition_index}"
            if p.leader_id < 0:
                offline.append(name)
            else:
                leads[p.leader_id] = leads.get(p.leader_id, 0) + 1
            if len(p.isr_nodes) < len(p.replica_nodes):
                under.append(name)
            for r in p.replica_nodes:
                replicas[r] = replicas.get(r, 0) + 1
            for r in p.isr_nodes:
                in_isr[r] = in_isr.get(r, 0) + 1
    rows = [["NODE", "PID", "STATE", "ADDRESS", "LEADER", "REPLICAS", "IN-ISR"]]
    for n in nodes:
        pid = pids[n["id"]]
        manual = pid is not None and pid != _started_pid(n)
        counts = [str(d.get(n["id"], 0)) if md is not None else "?" for d in (leads, replicas, in_isr)]
        rows.append([str(n["id"]), str(pid or n["pid"]), ("running (by hand)" if manual else "running") if pid
                     else "stopped", f"127.0.0.1:{n['port']}", *counts])
    for line in _table(rows):
        print(line)
    print()
    if md is None:
        print("controller: unknown (no broker answered)")
        return 0
    total = sum(len(t.partitions) for t in md.topics)
    print(f"controller: {md.controller_id if md.controller_id >= 0 else 'unknown'}")
    print(f"partitions: {total}  offline: {len(offline)}  under-replicated: {len(under)}")
    for what, names in (("offline", offline), ("under-replicated", under)):
        if names:
            shown = sorted(names)[:20]
            print(f"{what}: {' '.join(shown)}" + (f" ... ({len(names) - 20} more)" if len(names) > 20 else ""))
    return 0


# --- down --------------------------------------------------------------------------------------------


def cmd_down(args: argparse.Namespace) -> int:
    base = Path(args.dir).resolve()
    state = _load(args.dir)
    for n in state["nodes"]:
        _stop(lambda n=n: _node_pid(base, n), f"node {n['id']}")
    for m in state["etcd"]["members"]:
        _stop(lambda m=m: _started_pid(m), f"etcd {m['name']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kbroker cluster", description="A local kbroker cluster on 127.0.0.1.")
    sub = parser.add_subparsers(dest="action", required=True)
    up = sub.add_parser("up", help="start etcd and N brokers (again, after down, with the same settings)")
    up.add_argument("--dir", required=True)
    up.add_argument("--brokers", type=_brokers,
                    help=f"number of brokers, or 'auto': one per core of this host, os.cpu_count() "
                         f"(default {DEFAULTS['brokers']})")
    up.add_argument("--etcd-nodes", type=int, help="members of the etcd cluster (default 1)")
    up.add_argument("--base-port", type=int,
                    help="first broker port (default 9092); etcd member i uses base+100+2(i-1) and the next")
    up.add_argument("--config", metavar="FILE", help="a properties file of broker configs for every node (kept)")
    up.add_argument("--override", action="append", metavar="KEY=VALUE",
                    help="a broker config for every node, over --config (repeatable, kept; KEY= removes one)")
    up.set_defaults(func=cmd_up)
    st = sub.add_parser("status", help="etcd members, brokers, leaderships and ISR counts")
    st.add_argument("--dir", required=True)
    st.set_defaults(func=cmd_status)
    dn = sub.add_parser("down", help="stop the brokers (also those started by hand) and etcd")
    dn.add_argument("--dir", required=True)
    dn.set_defaults(func=cmd_down)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except CliError as e:
        print(f"kbroker cluster {args.action}: {e}", file=sys.stderr)
        return 1
