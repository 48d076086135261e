"""docker-compose.yml for real: images built without a registry, etcd + three brokers in containers.

Slow (``make test-all`` / ``make compose-test``), root only. deploy/container/prepare.sh installs the
engine from Debian packages and builds the images (timed; the numbers are printed); then the project's
compose file runs with docker-compose.hostnet.yml so every container stays on loopback. The
monitoring profile's Prometheus (an image of Debian's binary) scrapes the three brokers; stock clients
(confluent-kafka and kcat) work against localhost:19092, including a transactional
consume-transform-produce of 10,000 records read back read_committed (once cross-broker
transactions work: TXN_ACROSS_BROKERS); a killed broker container leaves the
partitions it did not lead usable; `down` then `up` keeps the data (volumes); everything created
(containers, volumes, networks) is removed at the end, the images stay cached.

Replication is not in kbroker yet (ISR = [leader]), so the cluster runs with REPLICATION_FACTOR=1 and
MIN_INSYNC_REPLICAS=1 and the topics have RF=1; the RF=3 / ISR-rejoin steps of issue 16 come with it.
Grafana has no image here: the profile's grafana service is only checked by test_compose_config.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers.broker_proc import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

STATE = Path(os.environ.get("KBROKERTEST_COMPOSE_STATE", "/var/tmp/kbroker-compose-test"))
PROJECT = f"kbroker-ctest-{uuid.uuid4().hex[:6]}"
BROKERS = {1: "localhost:19092", 2: "localhost:29092", 3: "localhost:39092"}
RECORDS = 300
SERVICES = ("kbroker-1", "kbroker-2", "kbroker-3")
TXN_RECORDS = 10_000
# Transactions whose coordinators and partitions sit on different brokers do not work in cluster mode
# yet (issue 15, "Coordinators across the cluster"; the same failure without containers, through
# `kbroker cluster up`): librdkafka's transactional produce times out on a partition led by another
# broker than the transaction coordinator, and TxnOffsetCommit answers INVALID_PRODUCER_ID_MAPPING.
# Turn this on with that issue.
TXN_ACROSS_BROKERS = False
COMPOSE = [str(REPO_ROOT / "deploy/container/compose.sh"), "-p", PROJECT, "-f", "docker-compose.yml",
           "-f", "docker-compose.hostnet.yml"]


def _container(node: int) -> str:
    return f"{PROJECT}_kbroker-{node}_1"


@pytest.fixture(scope="module")
def engine_env() -> dict[str, str]:
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("the compose test prepares podman and images with apt-get: run it as root on Debian")
    t0 = time.monotonic()
    out = subprocess.run([str(REPO_ROOT / "deploy/container/prepare.sh"), str(STATE)], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stdout + out.stderr
    print(f"\n{out.stdout}prepare.sh wall time {time.monotonic() - t0:.1f} s")
    env = dict(os.environ)
    for line in (STATE / "env.sh").read_text().splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value
    # RF=1 until replication lands (see the module docstring).
    env.update(REPLICATION_FACTOR="1", MIN_INSYNC_REPLICAS="1")
    return env


def _compose(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    cmd = [*COMPOSE, *args]
    out = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{cmd}\n{out.stdout}\n{out.stderr}"
    return out


def _podman(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(["podman", *args], env=env, capture_output=True, text=True, timeout=120)
    if check:
        assert out.returncode == 0, f"podman {args}\n{out.stdout}\n{out.stderr}"
    return out


def _wait_healthy(env: dict[str, str], nodes: list[int], deadline_s: float = 240) -> float:
    """Runs each broker's image healthcheck (ApiVersions) until all pass; returns the seconds it took.

    podman schedules healthchecks with systemd timers, which these machines lack, so they are run
    here on demand (`podman healthcheck run`, the same command the engine would run)."""
    t0 = time.monotonic()
    pending = set(nodes)
    while pending:
        for node in sorted(pending):
            if _podman(env, "healthcheck", "run", _container(node), check=False).returncode == 0:
                pending.discard(node)
        if pending:
            assert time.monotonic() - t0 < deadline_s, (
                f"brokers {sorted(pending)} not healthy\n"
                + "\n".join(_podman(env, "logs", "--tail", "30", _container(n), check=False).stdout
                            + _podman(env, "logs", "--tail", "30", _container(n), check=False).stderr
                            for n in pending))
            time.sleep(1)
    return time.monotonic() - t0


def _stop_brokers_then_down(env: dict[str, str]) -> None:
    """`down`, the brokers first: podman-compose 1.6 stops all services at once, so etcd can be gone
    before a broker revokes its lease, and the next `up` then waits for those leases to expire."""
    _compose(env, "stop", *SERVICES)
    _compose(env, "--profile", "monitoring", "down")


def _restart_until_healthy(env: dict[str, str], node: int, deadline_s: float = 180) -> None:
    """Starts a killed broker's container again until it is healthy.

    A broker restarted before the etcd lease of its killed self expires (broker.session.timeout.ms,
    9 s) refuses to start ("node.id N is already registered by a live broker") and exits; Kafka's
    broker would retry its registration instead. So the container is started again (and the restart
    policy may do it too) until the old lease is gone and the broker serves."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        state = _podman(env, "inspect", "-f", "{{.State.Status}}", _container(node)).stdout.strip()
        if state in ("exited", "stopped", "created"):
            _podman(env, "start", _container(node), check=False)
        elif _podman(env, "healthcheck", "run", _container(node), check=False).returncode == 0:
            return
        time.sleep(1)
    pytest.fail(f"broker {node} did not come back\n"
                + _podman(env, "logs", "--tail", "30", _container(node), check=False).stderr)


def _create_topic(name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": BROKERS[1]})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(60)
    deadline = time.monotonic() + 60
    while True:
        md = admin.list_topics(name, timeout=10).topics[name]
        if md.error is None and len(md.partitions) == partitions and all(
                p.leader >= 0 for p in md.partitions.values()):
            return
        assert time.monotonic() < deadline, md
        time.sleep(0.5)


def _leaders(name: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": BROKERS[1]}).list_topics(name, timeout=30).topics[name]
    return {p.id: p.leader for p in md.partitions.values()}


def _produce(name: str, count: int, partitions: list[int] | None = None, prefix: str = "v") -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": BROKERS[1], "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 60000})
    errors: list[object] = []
    for i in range(count):
        kwargs = {"partition": partitions[i % len(partitions)]} if partitions else {}
        producer.produce(name, key=f"k{i}", value=f"{prefix}{i}",
                         on_delivery=lambda err, _msg: err and errors.append(err), **kwargs)
        producer.poll(0)
    assert producer.flush(90) == 0
    assert errors == []


def _consume_all(name: str, expected: int, partitions: list[int] | None = None,
                 counted: str = "") -> list[str]:
    """Reads the topic (or ``partitions``) from the start with a consumer group until ``expected``
    values starting with ``counted`` arrived, or two minutes passed."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": BROKERS[1], "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.partition.eof": False})
    if partitions is None:
        consumer.subscribe([name])
    else:
        consumer.assign([TopicPartition(name, p, 0) for p in partitions])
    values: list[str] = []
    deadline = time.monotonic() + 120
    try:
        while sum(v.startswith(counted) for v in values) < expected and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                values.append(msg.value().decode())
        if partitions is None:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values


def _kcat(*args: str, stdin: str | None = None) -> str:
    out = subprocess.run(["kcat", "-b", BROKERS[1], *args], input=stdin, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _wait_prometheus_targets(deadline_s: float = 120) -> list[str]:
    """Prometheus (monitoring profile) scrapes every broker's metrics endpoint: the `up` targets."""
    import json
    import urllib.request

    t0 = time.monotonic()
    healthy: list[str] = []
    while time.monotonic() - t0 < deadline_s:
        try:
            with urllib.request.urlopen("http://127.0.0.1:9090/api/v1/targets", timeout=5) as resp:
                targets = json.load(resp)["data"]["activeTargets"]
            healthy = sorted(t["scrapeUrl"] for t in targets if t["health"] == "up")
            if len(healthy) == 3:
                return healthy
        except OSError:
            pass
        time.sleep(1)
    return healthy


def _transactional_copy(source: str, sink: str, count: int) -> None:
    """Consume-transform-produce in transactions of 1,000: read_committed in, upper-cased out, the
    consumer offsets committed inside each transaction (send_offsets_to_transaction)."""
    from confluent_kafka import Consumer, Producer

    consumer = Consumer({"bootstrap.servers": BROKERS[1], "group.id": f"ctp-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": BROKERS[1], "transactional.id": f"ctp-{uuid.uuid4().hex[:8]}",
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(60)
    consumer.subscribe([source])
    done = 0
    deadline = time.monotonic() + 300
    try:
        while done < count and time.monotonic() < deadline:
            batch = [m for m in consumer.consume(1000, timeout=2.0) if m.error() is None]
            if not batch:
                continue
            producer.begin_transaction()
            for msg in batch:
                producer.produce(sink, key=msg.key(), value=msg.value().upper())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 60)
            producer.commit_transaction(60)
            done += len(batch)
    finally:
        consumer.close()
    assert done == count


def test_compose_cluster(engine_env: dict[str, str]) -> None:
    env = engine_env
    topic, kcat_topic = "compose-orders", "compose-kcat"
    timings: dict[str, float] = {}
    try:
        t0 = time.monotonic()
        _compose(env, "up", "-d")
        timings["up"] = time.monotonic() - t0
        timings["healthy"] = _wait_healthy(env, [1, 2, 3])

        # The monitoring profile's Prometheus (Debian's binary standing in for prom/prometheus).
        _compose(env, "--profile", "monitoring", "up", "-d", "prometheus")
        assert len(_wait_prometheus_targets()) == 3

        # Stock clients against localhost:19092: every broker advertises its own host port.
        listing = _kcat("-L")
        for node, address in BROKERS.items():
            assert f"broker {node} at {address}" in listing, listing

        _create_topic(topic, 3)
        _produce(topic, RECORDS)
        assert sorted(_consume_all(topic, RECORDS)) == sorted(f"v{i}" for i in range(RECORDS))

        _create_topic(kcat_topic, 1)
        _kcat("-P", "-t", kcat_topic, stdin="".join(f"line{i}\n" for i in range(50)))
        got = _kcat("-C", "-t", kcat_topic, "-o", "beginning", "-e", "-q").split()
        assert got == [f"line{i}" for i in range(50)]

        # A transactional consume-transform-produce of 10,000 records, read back read_committed.
        if TXN_ACROSS_BROKERS:
            _create_topic("ctp-in", 3)
            _create_topic("ctp-out", 3)
            _produce("ctp-in", TXN_RECORDS, prefix="t")
            t0 = time.monotonic()
            _transactional_copy("ctp-in", "ctp-out", TXN_RECORDS)
            timings["txn copy"] = time.monotonic() - t0
            out = _consume_all("ctp-out", TXN_RECORDS, counted="T")
            assert sorted(out) == sorted(f"T{i}" for i in range(TXN_RECORDS))
        else:
            print("transactional consume-transform-produce: not run (TXN_ACROSS_BROKERS is off, issue 15)")

        # Kill one broker (not the bootstrap one): the partitions it did not lead carry on.
        leaders = _leaders(topic)
        _podman(env, "kill", _container(3))
        alive = [p for p, leader in leaders.items() if leader != 3]
        assert alive, leaders
        _produce(topic, 60, partitions=alive, prefix="after-kill-")
        values = _consume_all(topic, 60, partitions=alive, counted="after-kill-")
        assert sum(v.startswith("after-kill-") for v in values) == 60
        _restart_until_healthy(env, 3)

        # down + up: the named volumes keep every record (and the topic's metadata in etcd's volume).
        t0 = time.monotonic()
        _stop_brokers_then_down(env)
        timings["down"] = time.monotonic() - t0
        _compose(env, "up", "-d")
        _wait_healthy(env, [1, 2, 3])
        assert len(_leaders(topic)) == 3
        values = _consume_all(topic, RECORDS + 60)
        assert sorted(values) == sorted([f"v{i}" for i in range(RECORDS)] + [f"after-kill-{i}" for i in range(60)])
        assert _kcat("-C", "-t", kcat_topic, "-o", "beginning", "-e", "-q").split() == [
            f"line{i}" for i in range(50)]
    finally:
        t0 = time.monotonic()
        subprocess.run([*COMPOSE, "stop", *SERVICES], cwd=REPO_ROOT, env=env, capture_output=True, timeout=300)
        subprocess.run([*COMPOSE, "--profile", "monitoring", "down", "-v"], cwd=REPO_ROOT, env=env,
                       capture_output=True, timeout=300)
        timings["down -v"] = time.monotonic() - t0
        print("compose timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    left = _podman(env, "ps", "-a", "--filter", f"label=io.podman.compose.project={PROJECT}", "-q").stdout
    assert left.strip() == ""
    volumes = _podman(env, "volume", "ls", "-q").stdout.split()
    assert not [v for v in volumes if v.startswith(PROJECT)]
    networks = _podman(env, "network", "ls", "--format", "{{.Name}}").stdout.split()
    assert not [n for n in networks if n.startswith(PROJECT)]
