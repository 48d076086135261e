"""`kbroker cluster up/status/down`: a local etcd + 3 brokers started, inspected and stopped by pid;
broker configs kept across down/up, a node restarted by hand, up right after down with ports in
TIME-WAIT (issue 33, item 4), and a 3-member etcd cluster that loses a member (issue 28)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker_proc import REPO_ROOT
from tests.helpers.tools import require_tool


def _kbroker(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=180, env=env)


def _free_base_port(etcd_nodes: int = 1) -> int:
    """A port P with P..P+2 and P+100.. (two per etcd member) free on 127.0.0.1 (the ports `cluster up` uses)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base > 60000:
            continue
        ok = True
        for port in [base, base + 1, base + 2, *range(base + 100, base + 100 + 2 * etcd_nodes)]:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
        if ok:
            return base
    raise AssertionError("no free port range")


def _alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except FileNotFoundError:
        return False


_NODE_ROW = re.compile(r"^(\d+) +(\d+) +(running \(by hand\)|running|stopped) +127\.0\.0\.1:(\d+) +(\d+|\?) +(\d+|\?) +"
                       r"(\d+|\?)$", re.M)


def _node_rows(status: str) -> dict[int, dict]:
    """`cluster status`'s broker table: NODE PID STATE ADDRESS LEADER REPLICAS IN-ISR."""
    return {int(m[1]): {"pid": int(m[2]), "state": m[3], "port": int(m[4]), "leader": int(m[5]),
                        "replicas": int(m[6]), "isr": int(m[7])} for m in _NODE_ROW.finditer(status)}


def _partition_total(status: str) -> int:
    m = re.search(r"^partitions: (\d+) ", status, re.M)
    assert m, status
    return int(m[1])


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
        assert re.search(rf"^kbroker +\d+ +running +http://127.0.0.1:{base + 100}$", status.stdout, re.M), status.stdout
        nodes = _node_rows(status.stdout)
        assert [n["state"] for n in nodes.values()] == ["running"] * 3, status.stdout
        assert sum(n["leader"] for n in nodes.values()) == _partition_total(status.stdout)
        assert "under-replicated: 0" in status.stdout
    finally:
        down = _kbroker("cluster", "down", "--dir", str(d))
    assert down.returncode == 0, down.stderr
    state = json.loads((d / "cluster.json").read_text())
    pids = [n["pid"] for n in state["nodes"]] + [m["pid"] for m in state["etcd"]["members"]]
    assert len(pids) == 4 and not any(_alive(p) for p in pids)


def test_cluster_up_without_etcd_names_the_package(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}  # python only, no etcd
    if shutil.which("etcd", path=env["PATH"]):
        pytest.skip("etcd lives next to python")
    out = _kbroker("cluster", "up", "--brokers", "1", "--dir", str(tmp_path / "x"), env=env)
    assert out.returncode == 1 and "etcd-server" in out.stderr


def _wait_for(condition, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout:.0f} s")


def _time_wait_on(port: int) -> None:
    """Leave a connection in TIME-WAIT on ``port`` (the side that closes first keeps it, as a
    stopped broker does with its clients' connections), and check that a plain bind now fails."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(1)
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()  # the server side closes first: its end (local port `port`) goes to TIME-WAIT
    client.recv(1)
    client.close()
    server.close()
    with socket.socket() as probe, pytest.raises(OSError):
        probe.bind(("127.0.0.1", port))  # what `up` used to probe with


def test_cluster_keeps_configs_finds_hand_started_nodes_and_restarts_over_time_wait(tmp_path: Path) -> None:
    """Issue 33, item 4, on 3 brokers with a real etcd: `up --config FILE --override k=v` configures
    every broker and is kept across down/up; a node restarted by hand from its server.properties is
    running for `status` and stopped by `down`; `up` right after `down` is not refused for a port in
    TIME-WAIT; `status` prints per-broker leader, replica and ISR counts."""
    require_tool("etcd", shutil.which("etcd") is not None, "etcd not on PATH (apt-get install etcd-server)")
    d = tmp_path / "c"
    base = _free_base_port()
    bootstrap = f"127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}"
    conf = tmp_path / "brokers.properties"
    # ISO-8859-1, as Kafka reads properties files (a UTF-8 reader fails on the 0xE9 byte).
    conf.write_bytes("# r\xe9glages communs\nnum.partitions=4\nnode.id=99\n".encode("iso-8859-1"))
    hand: subprocess.Popen[bytes] | None = None
    try:
        up = _kbroker("cluster", "up", "--brokers", "3", "--dir", str(d), "--base-port", str(base),
                      "--config", str(conf), "--override", "log.retention.ms=3600000")
        assert up.returncode == 0, up.stdout + up.stderr
        assert "ignoring node.id" in up.stderr
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic("kept", replication_factor=3)]).values():
            f.result(timeout=90)  # no partition count: the brokers' num.partitions=4 from --config
        _assert_configs(admin, partitions=4)

        status = _kbroker("cluster", "status", "--dir", str(d))
        nodes = _node_rows(status.stdout)
        assert sorted(nodes) == [1, 2, 3] and all(n["state"] == "running" for n in nodes.values()), status.stdout
        total = _partition_total(status.stdout)
        assert total >= 4 and sum(n["leader"] for n in nodes.values()) == total, status.stdout
        # Replication factor 3 everywhere: every broker holds every partition, all in sync.
        _wait_for(lambda: all(n["replicas"] == n["isr"] == total
                              for n in _node_rows(_kbroker("cluster", "status", "--dir", str(d)).stdout).values()),
                  "every replica in the ISR")

        # Node 2 stopped by its pid and started again by hand from its properties file.
        os.kill(nodes[2]["pid"], signal.SIGTERM)
        _wait_for(lambda: not _alive(nodes[2]["pid"]), "node 2 stopped")
        hand = subprocess.Popen([sys.executable, "-m", "broker", "serve", str(d / "node-2" / "server.properties")],
                                cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        _wait_for(lambda: _node_rows(_kbroker("cluster", "status", "--dir", str(d)).stdout)[2]["state"]
                  == "running (by hand)", "the hand-started node 2 reported running")
        assert _node_rows(_kbroker("cluster", "status", "--dir", str(d)).stdout)[2]["pid"] == hand.pid
    finally:
        down = _kbroker("cluster", "down", "--dir", str(d))
    assert down.returncode == 0, down.stderr
    assert hand is not None and hand.wait(timeout=60) == 0  # down stopped it (SIGTERM: a clean stop)
    assert f"stopped node 2 (pid {hand.pid})" in down.stdout

    # Up again at once, with a broker port in TIME-WAIT and no flags: the same settings, the same data.
    _time_wait_on(base)
    try:
        again = _kbroker("cluster", "up", "--dir", str(d))
        assert again.returncode == 0, again.stdout + again.stderr
        props = (d / "node-3" / "server.properties").read_text(encoding="iso-8859-1")
        assert "num.partitions=4" in props and "log.retention.ms=3600000" in props and "node.id=3" in props
        admin = AdminClient({"bootstrap.servers": bootstrap})
        _wait_for(lambda: "kept" in admin.list_topics(timeout=10).topics, "topic kept back after up")
        _assert_configs(admin, partitions=4)
    finally:
        down = _kbroker("cluster", "down", "--dir", str(d))
    assert down.returncode == 0, down.stderr


def _assert_configs(admin: AdminClient, partitions: int) -> None:
    from confluent_kafka.admin import ConfigResource, ResourceType

    assert len(admin.list_topics("kept", timeout=30).topics["kept"].partitions) == partitions
    for broker in ("1", "2", "3"):
        res = ConfigResource(ResourceType.BROKER, broker)
        entries = admin.describe_configs([res])[res].result(timeout=30)
        assert entries["log.retention.ms"].value == "3600000", broker
        assert entries["num.partitions"].value == str(partitions), broker
        assert entries["node.id"].value == broker


@pytest.mark.slow  # a cluster-fault test (an etcd member killed): make test-all
def test_cluster_with_three_etcd_members_survives_one_killed(tmp_path: Path) -> None:
    """Issue 28: `up --etcd-nodes 3` runs a 3-member etcd cluster; the brokers register, a topic is
    created and used; with one member killed by pid the cluster keeps working (a topic created,
    records written and read, every broker still registered past its session timeout); `status` and
    `down` handle every member."""
    from confluent_kafka import Consumer, Producer

    require_tool("etcd", shutil.which("etcd") is not None, "etcd not on PATH (apt-get install etcd-server)")
    d = tmp_path / "c"
    base = _free_base_port(etcd_nodes=3)
    bootstrap = f"127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}"

    def use_topic(name: str) -> None:
        from confluent_kafka import KafkaError, KafkaException

        admin = AdminClient({"bootstrap.servers": bootstrap})
        deadline = time.monotonic() + 90
        while True:
            try:
                admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=3)])[name].result(timeout=90)
                break
            except KafkaException as e:
                err = e.args[0]
                if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    break  # an attempt that timed out went through
                # A broker whose etcd connection was to the killed member answers REQUEST_TIMED_OUT
                # until its session moves to another member (two missed heartbeats); clients retry.
                assert err.code() == KafkaError.REQUEST_TIMED_OUT and time.monotonic() < deadline, err
                time.sleep(0.5)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 60000})
        for i in range(50):
            producer.produce(name, value=f"{name}-{i}".encode())
        assert producer.flush(90) == 0
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{name}", "auto.offset.reset": "earliest"})
        consumer.subscribe([name])
        seen: set[bytes] = set()
        deadline = time.monotonic() + 90
        while len(seen) < 50 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen.add(msg.value())
        consumer.close()
        assert seen == {f"{name}-{i}".encode() for i in range(50)}

    def brokers() -> set[int]:
        return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers)

    try:
        up = _kbroker("cluster", "up", "--brokers", "3", "--etcd-nodes", "3", "--dir", str(d), "--base-port",
                      str(base))
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads((d / "cluster.json").read_text())
        members = state["etcd"]["members"]
        assert [m["client_port"] for m in members] == [base + 100, base + 102, base + 104]
        endpoints = ",".join(f"http://127.0.0.1:{m['client_port']}" for m in members)
        assert f"kbroker.etcd.endpoints={endpoints}" in (d / "node-1" / "server.properties").read_text()
        _wait_for(lambda: brokers() == {1, 2, 3}, "three brokers registered")
        use_topic("before")

        # The first member (every broker's first endpoint) killed by pid.
        os.kill(members[0]["pid"], signal.SIGKILL)
        killed_at = time.monotonic()
        _wait_for(lambda: not _alive(members[0]["pid"]), "etcd member 1 gone")
        status = _kbroker("cluster", "status", "--dir", str(d)).stdout
        assert re.search(rf"^etcd-1 +{members[0]['pid']} +stopped ", status, re.M), status
        assert len(re.findall(r"^etcd-[23] +\d+ +running ", status, re.M)) == 2, status
        use_topic("after")
        # Past a broker session (9 s by default): the leases were kept alive through the other members.
        _wait_for(lambda: time.monotonic() - killed_at > 12, "a session timeout passed", timeout=60)
        assert brokers() == {1, 2, 3}
        assert all(n["state"] == "running" for n in _node_rows(_kbroker("cluster", "status", "--dir",
                                                                         str(d)).stdout).values())
    finally:
        down = _kbroker("cluster", "down", "--dir", str(d))
    assert down.returncode == 0, down.stderr
    assert "stopped etcd etcd-2" in down.stdout and "stopped etcd etcd-3" in down.stdout
    state = json.loads((d / "cluster.json").read_text())
    pids = [n["pid"] for n in state["nodes"]] + [m["pid"] for m in state["etcd"]["members"]]
    assert len(pids) == 6 and not any(_alive(p) for p in pids)
