"""docker-compose.yml for real: images built without a registry, etcd + three brokers in containers.

Slow (``make test-all`` / ``make compose-test``), root only. deploy/container/prepare.sh installs the
engine from Debian packages and builds the images (timed; the numbers are printed); then the project's
compose file runs, with its own defaults (RF=3, min.insync.replicas=2, internal topics included),
under docker-compose.hostnet.yml so that every container stays on loopback. Issue 16, acceptance 1:

- the cluster comes up and every broker passes its healthcheck; the monitoring profile's Prometheus
  (an image of Debian's binary) scrapes the three brokers;
- stock clients against localhost:19092 with RF=3 topics: confluent-kafka (AdminClient, an idempotent
  acks=all producer, a group consumer) and kcat (-L, -P, -C);
- a transactional consume-transform-produce of 10,000 records (confluent-kafka, read_committed,
  send_offsets_to_transaction): the output is the input, transformed, once;
- one broker container killed (SIGKILL) while a producer and a group consumer run: both carry on
  (acks=all still satisfied by the two replicas left in the ISR), the ISR shrinks to the live brokers;
  the container started again rejoins the ISR of every partition (Metadata);
- the Schema Registry on every broker (localhost:8081, 8082, 8083, issue 30): an Avro schema registered
  through one broker is served by all three; an AvroSerializer producer writes through it to a topic
  with ``confluent.value.schema.validation=true`` (raw bytes are refused with INVALID_RECORD) and an
  AvroDeserializer reading through another broker gets the records back;
- `down` then `up`: every record is still there (named volumes), and so is the schema;
- everything the test created (containers, volumes, networks of its compose project) is removed at
  the end; the images stay cached for the next run.

Every phase is timed and the table printed (also when a phase fails). A failure names its phase in
the test's failure line and prints, right away, the state and last log lines of etcd and every
broker container. The "healthy" phases print a timeline per broker: when its container started,
when it logged its start, and every healthcheck run (how long it took, its result). Grafana has no image here: the
profile's grafana service is only checked by test_compose_config.py. The default bridge network cannot
be run on these machines (its traffic would leave loopback); only the hostnet override is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.broker_proc import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

STATE = Path(os.environ.get("KBROKERTEST_COMPOSE_STATE", "/var/tmp/kbroker-compose-test"))
PROJECT = f"kbroker-ctest-{uuid.uuid4().hex[:6]}"
BROKERS = {1: "localhost:19092", 2: "localhost:29092", 3: "localhost:39092"}
BOOTSTRAP = BROKERS[1]
SERVICES = ("kbroker-1", "kbroker-2", "kbroker-3")
RECORDS = 300
KILL_RECORDS = 1_000  # produced on each side of the kill
TXN_RECORDS = 10_000
KILLED = 3  # not the bootstrap broker: the clients keep their way in
COMPOSE = [str(REPO_ROOT / "deploy/container/compose.sh"), "-p", PROJECT, "-f", "docker-compose.yml",
           "-f", "docker-compose.hostnet.yml"]


def _container(node: int) -> str:
    return f"{PROJECT}_kbroker-{node}_1"


class Phases:
    """Wall time of each phase of the run, printed as a table at the end (also after a failure).

    A phase that raises is reported by name: ``diagnose()`` (the containers' state and logs) is
    printed at once and the test fails with "phase '<name>' failed: <error>" as its first line."""

    def __init__(self, diagnose: Callable[[], str] = lambda: "") -> None:
        self.times: list[tuple[str, float]] = []
        self.diagnose = diagnose
        self.failed: str | None = None

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        except (Exception, pytest.fail.Exception) as e:
            if self.failed is not None:  # an inner phase already reported it
                raise
            self.failed = name
            report = self.diagnose()
            print(f"\ncompose test: phase {name!r} failed after {time.monotonic() - t0:.1f} s: "
                  f"{type(e).__name__}: {e}\n{report}", flush=True)
            pytest.fail(f"phase {name!r} failed: {type(e).__name__}: {e}\n{report}", pytrace=True)
        finally:
            self.times.append((name, time.monotonic() - t0))

    def report(self) -> str:
        width = max((len(n) for n, _ in self.times), default=0)
        lines = [f"  {name:<{width}}  {secs:7.1f} s" for name, secs in self.times]
        lines.append(f"  {'total':<{width}}  {sum(s for _, s in self.times):7.1f} s")
        return "compose test phases:\n" + "\n".join(lines)


@pytest.fixture(scope="module")
def engine_env() -> Iterator[dict[str, str]]:
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("the compose test prepares podman and images with apt-get: run it as root on Debian")
    t0 = time.monotonic()
    out = subprocess.run([str(REPO_ROOT / "deploy/container/prepare.sh"), str(STATE)], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=1500)
    print(f"\n{out.stdout}prepare.sh wall time {time.monotonic() - t0:.1f} s", flush=True)
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).splitlines()[-40:])
        print(f"compose test: phase 'prepare' failed (prepare.sh exit code {out.returncode}):\n{tail}", flush=True)
        pytest.fail(f"phase 'prepare' failed: deploy/container/prepare.sh exited {out.returncode}\n{tail}")
    env = dict(os.environ)
    for line in (STATE / "env.sh").read_text().splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value
    yield env


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


def _logs(env: dict[str, str], node: int, lines: int = 40) -> str:
    out = _podman(env, "logs", "--tail", str(lines), _container(node), check=False)
    return f"--- kbroker-{node} ---\n{out.stdout}{out.stderr}"


def _diagnose(env: dict[str, str], lines: int = 25) -> str:
    """State (status, exit code, restarts, start time) and last log lines of etcd and each broker."""
    parts = []
    for name in (f"{PROJECT}_etcd_1", *(_container(n) for n in BROKERS)):
        state = _podman(env, "inspect", "-f", "{{.State.Status}} exit={{.State.ExitCode}} "
                        "restarts={{.RestartCount}} started={{.State.StartedAt}}", name, check=False)
        logs = _podman(env, "logs", "--tail", str(lines), name, check=False)
        parts.append(f"--- {name}: {(state.stdout or state.stderr).strip()} ---\n{logs.stdout}{logs.stderr}".rstrip())
    return "\n".join(parts)


def _started_at(env: dict[str, str], name: str) -> float | None:
    """The container's start (podman inspect .State.StartedAt) as a Unix time."""
    out = _podman(env, "inspect", "-f", "{{.State.StartedAt.UnixNano}}", name, check=False).stdout.strip()
    return int(out) / 1e9 if out.isdigit() and int(out) > 0 else None


def _log_time(env: dict[str, str], name: str, needle: str) -> float | None:
    """Unix time of the last log line of ``name`` containing ``needle`` (kbroker's ISO-8601 UTC prefix)."""
    from datetime import datetime

    out = _podman(env, "logs", name, check=False)
    for line in reversed((out.stdout + out.stderr).splitlines()):
        if needle in line:
            try:
                return datetime.fromisoformat(line.split()[0].replace("Z", "+00:00")).timestamp()
            except (ValueError, IndexError):
                return None
    return None


def _wait_healthy(env: dict[str, str], nodes: list[int], deadline_s: float = 300) -> None:
    """Runs each broker's image healthcheck (ApiVersions) until all pass, then prints a timeline per
    broker: container start, "kbroker node N started" in its log, and every healthcheck run (its
    start, how long it took, its exit code and, for a failure, its last output line).

    podman schedules healthchecks with systemd timers, which these machines lack, so they are run
    here on demand (`podman healthcheck run`, the same command the engine would run)."""
    t0, wall0 = time.monotonic(), time.time()
    print(f"healthy phase starts: {_meminfo()}", flush=True)
    pending = set(nodes)
    runs: dict[int, list[str]] = {n: [] for n in nodes}
    while pending:
        for node in sorted(pending):
            h0 = time.time()
            out = _podman(env, "healthcheck", "run", _container(node), check=False)
            last = (out.stdout + out.stderr).strip().splitlines()[-1:] or [""]
            runs[node].append(f"+{h0 - wall0:6.1f}s {time.time() - h0:5.2f}s rc={out.returncode}"
                              + (f" {last[0][:120]}" if out.returncode else ""))
            if out.returncode == 0:
                pending.discard(node)
        if pending:
            if time.monotonic() - t0 >= deadline_s:
                print(_healthy_timeline(env, nodes, wall0, runs), flush=True)
                raise AssertionError(f"brokers {sorted(pending)} not healthy after {deadline_s:.0f} s")
            time.sleep(1)
    print(_healthy_timeline(env, nodes, wall0, runs), flush=True)


def _meminfo() -> str:
    """Dirty and Writeback page-cache sizes: a big image build leaves its layers to be written out."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    except OSError:
        return "?"
    return ", ".join(f"{k} {fields[k].strip()}" for k in ("Dirty", "Writeback") if k in fields)


def _etcd_disk_latency() -> str:
    """etcd's own fsync and commit latencies so far (its /metrics histograms): count, mean, and how many
    took over 0.5 s and over 1 s."""
    import urllib.request

    try:
        with urllib.request.urlopen("http://127.0.0.1:2379/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError as e:
        return f"etcd metrics unavailable ({e!r})"
    out = []
    for metric, label in (("etcd_disk_wal_fsync_duration_seconds", "WAL fsync"),
                          ("etcd_disk_backend_commit_duration_seconds", "backend commit")):
        vals: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith(metric):
                key, _, v = line.rpartition(" ")
                vals[key] = float(v)
        count = vals.get(f"{metric}_count", 0.0)
        total = vals.get(f"{metric}_sum", 0.0)
        within_512ms = vals.get(f'{metric}_bucket{{le="0.512"}}', count)
        within_1s = vals.get(f'{metric}_bucket{{le="1.024"}}', count)
        out.append(f"{label}: {count:.0f}, mean {1000 * total / count if count else 0:.1f} ms, "
                   f"over 0.5 s {count - within_512ms:.0f}, over 1 s {count - within_1s:.0f}")
    return "etcd " + "; ".join(out)


def _healthy_timeline(env: dict[str, str], nodes: list[int], wall0: float, runs: dict[int, list[str]]) -> str:
    lines = [f"healthy phase timeline (seconds from its start, {time.strftime('%H:%M:%S', time.gmtime(wall0))} UTC; "
             f"now {_meminfo()}):"]
    for node in nodes:
        name = _container(node)
        started = _started_at(env, name)
        logged = _log_time(env, name, f"kbroker node {node} started")
        restarts = _podman(env, "inspect", "-f", "{{.RestartCount}}", name, check=False).stdout.strip()
        lines.append(f"  kbroker-{node}: container started "
                     + (f"{started - wall0:+.1f}s" if started else "?") + ", logged its start "
                     + (f"{logged - wall0:+.1f}s" if logged else "not yet")
                     + f", {len(runs[node])} healthcheck run(s), {restarts or '?'} restart(s)")
        shown = runs[node] if len(runs[node]) <= 8 else [*runs[node][:4], "...", *runs[node][-3:]]
        lines += [f"    {r}" for r in shown]
        if restarts not in ("", "0"):  # why the earlier starts ended: their error lines
            out = _podman(env, "logs", name, check=False)
            errors = [ln for ln in (out.stdout + out.stderr).splitlines() if " ERROR " in ln or "could not start" in ln]
            lines += [f"    | {ln[:220]}" for ln in errors[-6:]]
    lines.append("  " + _etcd_disk_latency())
    return "\n".join(lines)


def _stop_brokers_then_down(env: dict[str, str], *extra: str) -> None:
    """`down`, the brokers first: podman-compose 1.6 stops all services at once, so etcd could be
    gone before a broker's controlled shutdown (leaderships handed over, lease revoked) is done."""
    _compose(env, "stop", *SERVICES)
    _compose(env, "--profile", "monitoring", "down", *extra)


def _admin() -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": BOOTSTRAP})


def _wait_until(check: Callable[[], Any], what: str, deadline_s: float = 180, every_s: float = 0.5) -> Any:
    """Polls ``check`` until it returns something truthy (exceptions count as "not yet")."""
    t0 = time.monotonic()
    last = "none"
    while time.monotonic() - t0 < deadline_s:
        try:
            if result := check():
                return result
        except Exception as e:  # noqa: BLE001 - a broker starting or dying: ask again
            # repr only: a kept traceback would pin the callers' frames (and their clients).
            last = repr(e)
        time.sleep(every_s)
    pytest.fail(f"timed out after {deadline_s:.0f} s waiting for {what} (last error: {last})")


def _partitions(topic: str) -> dict[int, Any]:
    """Metadata of ``topic``'s partitions (leader, replicas, isrs), as clients see it."""
    md = _admin().list_topics(topic, timeout=20).topics[topic]
    assert md.error is None, md.error
    return dict(md.partitions)


def _create_topic(name: str, partitions: int, replication_factor: int = 3) -> None:
    """Create the topic and wait until each partition has a leader and a full ISR of 3."""
    from confluent_kafka.admin import NewTopic

    admin = _admin()  # kept referenced: a destroyed client fails its futures
    admin.create_topics([NewTopic(name, partitions, replication_factor)])[name].result(60)
    _wait_isr(name, {1, 2, 3}, partitions=partitions)


def _wait_isr(topic: str, isr: set[int], *, partitions: int | None = None, deadline_s: float = 240) -> dict:
    """Wait until every partition of ``topic`` has a leader among ``isr`` and exactly ``isr`` in sync."""
    def check() -> dict | None:
        parts = _partitions(topic)
        if partitions is not None and len(parts) != partitions:
            return None
        ok = all(p.error is None and p.leader in isr and set(p.isrs) == isr for p in parts.values())
        return parts if ok and parts else None
    return _wait_until(check, f"{topic}: every partition led by one of {sorted(isr)} with ISR {sorted(isr)}",
                       deadline_s)


def _producer(**extra: Any) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": BOOTSTRAP, "acks": "all", "enable.idempotence": True,
                     "message.timeout.ms": 180000, **extra})


def _produce(producer: Any, topic: str, count: int, prefix: str, flush_s: float = 200) -> None:
    errors: list[object] = []
    for i in range(count):
        producer.produce(topic, key=f"k{i}", value=f"{prefix}{i}",
                         on_delivery=lambda err, _msg: err and errors.append(err))
        producer.poll(0)
    assert producer.flush(flush_s) == 0, "records not delivered"
    assert errors == [], errors[:5]


def _consumer(group: str | None = None, **extra: Any) -> Any:
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": group or f"g-{uuid.uuid4().hex[:8]}",
                     "auto.offset.reset": "earliest", "enable.partition.eof": False, **extra})


def _poll_until(consumer: Any, values: list[str], done: Callable[[list[str]], bool], deadline_s: float) -> None:
    t0 = time.monotonic()
    while not done(values) and time.monotonic() - t0 < deadline_s:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            values.append(msg.value().decode())


def _consume_all(topic: str, expected: int, deadline_s: float = 180) -> list[str]:
    """Reads ``topic`` from the start with a new group (read_committed, librdkafka's default)
    until ``expected`` records arrived or the deadline passed."""
    consumer = _consumer()
    consumer.subscribe([topic])
    values: list[str] = []
    try:
        _poll_until(consumer, values, lambda v: len(v) >= expected, deadline_s)
        # a little longer: more than expected (duplicates) must show
        _poll_until(consumer, values, lambda v: False, 2)
    finally:
        consumer.close()
    return values


REGISTRIES = {1: "http://localhost:8081", 2: "http://localhost:8082", 3: "http://localhost:8083"}
AVRO_SCHEMA = ('{"type":"record","name":"Order","namespace":"compose",'
               '"fields":[{"name":"id","type":"int"},{"name":"item","type":"string"}]}')


def _registry_get(node: int, path: str) -> Any:
    import json
    import urllib.request

    with urllib.request.urlopen(REGISTRIES[node] + path, timeout=20) as resp:
        return json.loads(resp.read())


def _schema_registry(topic: str, count: int) -> None:
    """Register through kbroker-2's registry, produce Avro to a validated topic, read through kbroker-3's."""
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import NewTopic
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    for node in REGISTRIES:
        _wait_until(lambda n=node: _registry_get(n, "/subjects") is not None, f"the registry of kbroker-{node}")
    admin = _admin()
    admin.create_topics([NewTopic(topic, 3, 3, config={"confluent.value.schema.validation": "true"})])[topic].result(60)
    _wait_isr(topic, {1, 2, 3}, partitions=3)
    ser = AvroSerializer(SchemaRegistryClient({"url": REGISTRIES[2]}), AVRO_SCHEMA)
    producer = _producer()
    errors: list[object] = []
    for i in range(count):
        value = ser({"id": i, "item": f"item-{i}"}, SerializationContext(topic, MessageField.VALUE))
        producer.produce(topic, value=value, on_delivery=lambda err, _msg: err and errors.append(err))
    assert producer.flush(200) == 0 and errors == [], errors[:5]
    latest = _registry_get(2, f"/subjects/{topic}-value/versions/latest")
    for node in REGISTRIES:
        _wait_until(lambda n=node: _registry_get(n, f"/subjects/{topic}-value/versions/latest") == latest,
                    f"the schema on kbroker-{node}'s registry")
    refused: list[object] = []
    raw = Producer({"bootstrap.servers": BOOTSTRAP, "retries": 0, "enable.idempotence": False})
    raw.produce(topic, value=b"not avro", on_delivery=lambda err, _msg: refused.append(err))
    raw.flush(60)
    assert [e.code() for e in refused] == [KafkaError.INVALID_RECORD], refused
    _assert_avro_readable(topic, count)


def _assert_avro_readable(topic: str, count: int) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    de = AvroDeserializer(SchemaRegistryClient({"url": REGISTRIES[3]}))
    consumer = _consumer()
    consumer.subscribe([topic])
    got: list[dict] = []
    t0 = time.monotonic()
    try:
        while len(got) < count and time.monotonic() - t0 < 180:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(de(msg.value(), SerializationContext(topic, MessageField.VALUE)))
    finally:
        consumer.close()
    assert sorted(got, key=lambda v: v["id"]) == [{"id": i, "item": f"item-{i}"} for i in range(count)]


def _kcat(*args: str, stdin: str | None = None) -> str:
    out = subprocess.run(["kcat", "-b", BOOTSTRAP, *args], input=stdin, capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _wait_prometheus_targets(deadline_s: float = 180) -> list[str]:
    """Prometheus (monitoring profile) scrapes every broker's metrics endpoint: the `up` targets."""
    import json
    import urllib.request

    def check() -> list[str] | None:
        with urllib.request.urlopen("http://127.0.0.1:9090/api/v1/targets", timeout=5) as resp:
            targets = json.load(resp)["data"]["activeTargets"]
        healthy = sorted(t["scrapeUrl"] for t in targets if t["health"] == "up")
        return healthy if len(healthy) == 3 else None
    return _wait_until(check, "Prometheus scraping the three brokers", deadline_s, every_s=1)


def _broker_config(node: int, name: str) -> str:
    from confluent_kafka.admin import ConfigResource, ResourceType

    res = ConfigResource(ResourceType.BROKER, str(node))
    admin = _admin()  # kept referenced: a destroyed client fails its futures
    return admin.describe_configs([res])[res].result(30)[name].value


def _transactional_copy(source: str, sink: str, count: int) -> str:
    """Consume-transform-produce in transactions of up to 1,000 records: read_committed in,
    upper-cased out, the consumer's offsets committed inside each transaction
    (send_offsets_to_transaction). Returns the group id."""
    group = f"ctp-{uuid.uuid4().hex[:8]}"
    producer = _producer(**{"transactional.id": f"ctp-{uuid.uuid4().hex[:8]}", "transaction.timeout.ms": 120000,
                            "message.timeout.ms": 120000})
    producer.init_transactions(120)
    consumer = _consumer(group, **{"enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.subscribe([source])
    done = 0
    deadline = time.monotonic() + 600
    try:
        while done < count and time.monotonic() < deadline:
            batch = [m for m in consumer.consume(1000, timeout=2.0) if m.error() is None]
            if not batch:
                continue
            producer.begin_transaction()
            for msg in batch:
                producer.produce(sink, key=msg.key(), value=msg.value().upper(), partition=msg.partition())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 120)
            producer.commit_transaction(120)
            done += len(batch)
    finally:
        consumer.close()
    assert done == count, f"{done} of {count} records copied"
    return group


def _committed_total(group: str, topic: str, partitions: int) -> int:
    from confluent_kafka import TopicPartition

    consumer = _consumer(group)
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        consumer.close()
    return sum(tp.offset for tp in tps if tp.offset >= 0)


def _kill_and_carry_on(env: dict[str, str], phase: Phases, topic: str) -> None:
    """A producer and a group consumer run across the SIGKILL of one broker's container; both carry on
    (the two replicas left satisfy min.insync.replicas=2), and the ISR shrinks to the live brokers."""
    producer = _producer()
    consumer = _consumer()
    consumer.subscribe([topic])
    values: list[str] = []
    try:
        with phase("kill: clients before"):
            _produce(producer, topic, KILL_RECORDS, "before-kill-")
            _poll_until(consumer, values, lambda v: len(v) >= KILL_RECORDS, 180)
            assert sorted(values) == sorted(f"before-kill-{i}" for i in range(KILL_RECORDS))
        with phase(f"kill: kbroker-{KILLED} killed, clients carry on"):
            leaders = {p: md.leader for p, md in sorted(_partitions(topic).items())}
            print(f"{topic} leaders before the kill (partition: node): {leaders}")
            _podman(env, "kill", _container(KILLED))
            _produce(producer, topic, KILL_RECORDS, "after-kill-")
            _poll_until(consumer, values, lambda v: len(v) >= 2 * KILL_RECORDS, 240)
            after = sorted(v for v in values if v.startswith("after-kill-"))
            assert after == sorted(f"after-kill-{i}" for i in range(KILL_RECORDS)), (
                f"{len(after)} of {KILL_RECORDS} records produced after the kill consumed")
        with phase("kill: ISR without the killed broker"):
            # The controller drops the dead broker from every ISR once its lease expires
            # (broker.session.timeout.ms); unless the container was started again meanwhile.
            state = _podman(env, "inspect", "-f", "{{.State.Status}}", _container(KILLED)).stdout.strip()
            print(f"kbroker-{KILLED} after the kill: {state}")
            if state != "running":
                parts = _wait_isr(topic, {1, 2, 3} - {KILLED})
                print(f"{topic} after the kill (partition: leader, ISR): "
                      f"{ {p: (md.leader, sorted(md.isrs)) for p, md in sorted(parts.items())} }")
    finally:
        consumer.close()


def _restart_and_rejoin(env: dict[str, str], topics: list[str]) -> None:
    """Starts the killed broker again (unless its restart policy already did); it registers once its
    killed incarnation's lease expired, serves, and its replicas catch up and rejoin every ISR."""
    def started() -> bool:
        state = _podman(env, "inspect", "-f", "{{.State.Status}}", _container(KILLED)).stdout.strip()
        if state in ("exited", "stopped", "created"):
            _podman(env, "start", _container(KILLED), check=False)
            return False
        return _podman(env, "healthcheck", "run", _container(KILLED), check=False).returncode == 0
    try:
        _wait_until(started, f"kbroker-{KILLED} serving again", 300, every_s=1)
    except BaseException:
        print(_logs(env, KILLED, 80))
        raise
    for t in topics:
        _wait_isr(t, {1, 2, 3})


def test_compose_cluster(engine_env: dict[str, str]) -> None:
    env = engine_env
    phase = Phases(lambda: _diagnose(env))
    topic, kcat_topic, kill_topic = "compose-orders", "compose-kcat", "compose-kill"
    try:
        with phase("up -d"):
            _compose(env, "up", "-d")
        with phase("healthy"):
            _wait_healthy(env, [1, 2, 3])
            # The image's build stage compiled the optional C record walk (Dockerfile).
            _podman(env, "exec", _container(1), "/opt/kbroker/bin/python", "-c", "import storage._recwalk")

        with phase("monitoring: prometheus scrapes 3 brokers"):
            # The monitoring profile's Prometheus (Debian's binary standing in for prom/prometheus).
            _compose(env, "--profile", "monitoring", "up", "-d", "prometheus")
            _wait_prometheus_targets()

        with phase("stock clients (RF=3)"):
            # The compose file's defaults reached the brokers through the KBROKER_* mapping.
            assert _broker_config(1, "min.insync.replicas") == "2"
            assert _broker_config(2, "default.replication.factor") == "3"
            # Every broker advertises its own host port on the client listener.
            listing = _kcat("-L")
            for node, address in BROKERS.items():
                assert f"broker {node} at {address}" in listing, listing
            _create_topic(topic, 3)
            _produce(_producer(), topic, RECORDS, "v")
            assert sorted(_consume_all(topic, RECORDS)) == sorted(f"v{i}" for i in range(RECORDS))
            # kcat on a topic created with the broker default (-1): RF=3 from default.replication.factor
            _create_topic(kcat_topic, 1, replication_factor=-1)
            assert len(_partitions(kcat_topic)[0].replicas) == 3
            _kcat("-P", "-t", kcat_topic, stdin="".join(f"line{i}\n" for i in range(50)))
            got = _kcat("-C", "-t", kcat_topic, "-o", "beginning", "-e", "-q").split()
            assert got == [f"line{i}" for i in range(50)]

        with phase("schema registry: register, validated produce, read through another broker"):
            _schema_registry("compose-avro", RECORDS)

        with phase("txn: 10,000 input records produced"):
            _create_topic("ctp-in", 3)
            _create_topic("ctp-out", 3)
            _produce(_producer(), "ctp-in", TXN_RECORDS, "t")
        with phase("txn: consume-transform-produce"):
            group = _transactional_copy("ctp-in", "ctp-out", TXN_RECORDS)
        with phase("txn: output read_committed"):
            out = _consume_all("ctp-out", TXN_RECORDS)
            assert len(out) == TXN_RECORDS and sorted(out) == sorted(f"T{i}" for i in range(TXN_RECORDS))
            assert _committed_total(group, "ctp-in", 3) == TXN_RECORDS
            for internal in ("__transaction_state", "__consumer_offsets"):
                assert all(len(p.replicas) == 3 for p in _partitions(internal).values()), internal

        _create_topic(kill_topic, 3)
        _kill_and_carry_on(env, phase, kill_topic)
        with phase(f"kbroker-{KILLED} restarted, back in every ISR"):
            _restart_and_rejoin(env, [topic, kcat_topic, kill_topic, "ctp-in", "ctp-out", "__consumer_offsets",
                                      "__transaction_state"])

        with phase("down (brokers, then the rest)"):
            _stop_brokers_then_down(env)
        with phase("up -d again, healthy"):
            _compose(env, "up", "-d")
            _wait_healthy(env, [1, 2, 3])
        with phase("data still there (volumes)"):
            for t in (topic, kcat_topic, kill_topic, "ctp-out"):
                _wait_isr(t, {1, 2, 3})
            assert sorted(_consume_all(topic, RECORDS)) == sorted(f"v{i}" for i in range(RECORDS))
            assert _kcat("-C", "-t", kcat_topic, "-o", "beginning", "-e", "-q").split() == [
                f"line{i}" for i in range(50)]
            kill_values = _consume_all(kill_topic, 2 * KILL_RECORDS)
            assert sorted(kill_values) == sorted(f"{side}-kill-{i}" for side in ("before", "after")
                                                 for i in range(KILL_RECORDS))
            out = _consume_all("ctp-out", TXN_RECORDS)
            assert len(out) == TXN_RECORDS and sorted(out) == sorted(f"T{i}" for i in range(TXN_RECORDS))
            _wait_until(lambda: _registry_get(1, "/subjects") == ["compose-avro-value"], "the schema after up")
            _assert_avro_readable("compose-avro", RECORDS)
    finally:
        with phase("down -v (cleanup)"):
            subprocess.run([*COMPOSE, "stop", *SERVICES], cwd=REPO_ROOT, env=env, capture_output=True, timeout=300)
            subprocess.run([*COMPOSE, "--profile", "monitoring", "down", "-v"], cwd=REPO_ROOT, env=env,
                           capture_output=True, timeout=300)
        print(phase.report())
    # Nothing of this run's compose project is left (other containers/volumes are not ours to judge).
    left = _podman(env, "ps", "-a", "--filter", f"label=io.podman.compose.project={PROJECT}", "-q").stdout
    assert left.strip() == ""
    volumes = _podman(env, "volume", "ls", "-q").stdout.split()
    assert not [v for v in volumes if v.startswith(PROJECT)]
    networks = _podman(env, "network", "ls", "--format", "{{.Name}}").stdout.split()
    assert not [n for n in networks if n.startswith(PROJECT)]
