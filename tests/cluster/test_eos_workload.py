"""Issue 15, acceptance 1: Kafka's EOS system-test workload (transactions_test.py) on 3 brokers.

Real etcd, three real brokers. An input topic (2 partitions) and an output topic (3), RF=3 and
min.insync.replicas=2, as in Kafka's test. The input is seeded with an idempotent producer (value =
key = the record's number). Transactional copiers (tests/helpers/eos_copier.py, confluent-kafka, a
subprocess each, one per input partition, transactional ids ``copier-<i>``) copy it to the output in
transactions of 750 records with ~10 % aborted on purpose, committing their input offsets with
send_offsets_to_transaction(consumer_group_metadata()); they subscribe as members of one group,
with ``group.protocol`` classic or consumer. Meanwhile a read_committed consumer reads the output.

While the copy runs (paced so the bounces fall inside it), one broker at a time, each time waiting
until every partition of the two topics, ``__transaction_state`` and ``__consumer_offsets`` has its
full ISR again and the copiers have committed more since:
- clean bounces: SIGTERM, restart, for every broker;
- hard bounces: kill -9, restart once the old etcd lease is gone, for every broker, the first one
  being the transaction coordinator of ``copier-0`` killed while a transaction of it is prepared
  (every broker runs with ``KBROKERTEST_DELAY_POINT=txn.before_markers:<ms>``, which holds a
  prepared transaction before its markers; the kill follows the broker's log line for it);
- hard bounces of the copiers: kill -9 a copier, start a new one with the same transactional.id
  (its InitProducerId fences the old one and aborts what it left open).
A copier that exits by itself (a fatal client error, or its watchdog: librdkafka 2.16's
send_offsets_to_transaction can hang past its timeout once the group coordinator's broker went away,
confluentinc/librdkafka#5511) is started again with the same transactional.id and counted.
The copy then finishes unthrottled. Result, as Kafka's test demands: the output read with
read_committed is exactly the input, no duplicate and no loss, and so is what the concurrent
consumer saw (an aborted record would show up as a duplicate: every input value is committed once).
The ordered variant copies 1 partition to 1 partition (a third of the records) and checks order.

Default suite: ``test_eos_workload_small`` (10,000 records, one hard bounce of the coordinator with
a prepared transaction). Slow (``make test-all``): the 100,000-record runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.metadata import FindCoordinatorRequest

from tests.helpers.broker_proc import REPO_ROOT
from tests.helpers.cluster_proc import BrokerCluster
from tests.helpers.cluster_state import checked_cluster, start_when_lease_gone, wait_full_isr, wait_until
from tests.helpers.etcd_proc import EtcdProcess
from tests.helpers.wire import send_request

INPUT, OUTPUT = "input-topic", "output-topic"
GROUP = "transactions-test-consumer-group"
TXN_SIZE = 750
ABORT_RATE = 0.1
MARKER_DELAY_MS = 300  # how long a prepared transaction waits for its markers (the kill window)
INTERNAL_PARTITIONS = 6  # __transaction_state and __consumer_offsets: fewer than Kafka's 50, less load
RF = 3
MAX_COPIER_RESTARTS = 20  # copiers that exit by themselves (fatal client errors) are restarted, this often at most
PROGRESS_WAIT_S = 180.0  # a bounce must be followed by new commits within this
FINISH_WAIT_S = 600.0
READ_WAIT_S = 90.0  # reading the output back once every transaction is complete

OVERRIDES = {
    "replica.lag.time.max.ms": "5000",
    "replica.fetch.backoff.ms": "200",
    "auto.create.topics.enable": "false",
    "transaction.state.log.num.partitions": str(INTERNAL_PARTITIONS),
    "offsets.topic.num.partitions": str(INTERNAL_PARTITIONS),
    # A killed copier's partitions go to its successor after the old member's session expires.
    "group.min.session.timeout.ms": "3000",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "3000",
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.consumer.min.heartbeat.interval.ms": "500",
}


@dataclass
class Spec:
    records: int
    in_parts: int = 2
    out_parts: int = 3
    protocol: str = "classic"
    copy_seconds: float = 120.0  # the copy is paced to last about this long while bouncing
    check_order: bool = False
    finish_wait_s: float = FINISH_WAIT_S  # after the bounces, until every input record is committed


@pytest.fixture
def cluster(etcd: EtcdProcess, tmp_path: Path) -> Iterator[BrokerCluster]:
    delay = {"KBROKERTEST_DELAY_POINT": f"txn.before_markers:{MARKER_DELAY_MS}"}
    with checked_cluster(etcd, tmp_path, 3, {node: delay for node in (1, 2, 3)}, **OVERRIDES) as c:
        yield c


# -- copiers -------------------------------------------------------------------------------------
@dataclass
class CopierProc:
    index: int
    args: list[str]
    log_dir: Path
    proc: subprocess.Popen | None = None
    starts: int = 0

    @property
    def tid(self) -> str:
        return f"copier-{self.index}"

    def start(self, throttled: bool) -> None:
        self.starts += 1
        args = list(self.args)
        if not throttled:  # the pacing was lifted: a successor copies at full speed too
            args[args.index("--max-rate") + 1] = "0"
        out = (self.log_dir / f"{self.tid}.{self.starts}.log").open("wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.eos_copier", *args,
                                      "--seed", str(self.index * 1000 + self.starts)],
                                     cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        out.close()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def signal(self, sig: int) -> None:
        if self.running:
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def last_log(self, lines: int = 30) -> str:
        path = self.log_dir / f"{self.tid}.{self.starts}.log"
        with contextlib.suppress(FileNotFoundError):
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        return ""


class OutputReader(threading.Thread):
    """The concurrent read_committed consumer of the output (assign() of every partition from 0)."""

    def __init__(self, bootstrap: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.partitions = bootstrap, partitions
        self.got: list[tuple[int, bytes, bytes]] = []  # (partition, value, src header)
        self.errors: list[str] = []
        self.stop_at: int | None = None  # stop once this many were read (set at the end)
        self.deadline = time.monotonic() + 3600
        self.halt = threading.Event()

    def run(self) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "concurrent-consumer",
                      "enable.auto.commit": False, "isolation.level": "read_committed",
                      "topic.metadata.refresh.interval.ms": 2000})
        try:
            c.assign([TopicPartition(OUTPUT, p, OFFSET_BEGINNING) for p in range(self.partitions)])
            while not self.halt.is_set() and time.monotonic() < self.deadline:
                if self.stop_at is not None and len(self.got) >= self.stop_at:
                    break
                for m in c.consume(num_messages=1000, timeout=0.5):
                    if m.error() is None:
                        self.got.append((m.partition(), m.value(), dict(m.headers() or []).get("src", b"")))
                    elif m.error().code() != KafkaError._PARTITION_EOF:
                        self.errors.append(str(m.error()))
        finally:
            c.close()


class EosRun:
    """One run of the workload: topics, seed, copiers (with a supervisor thread), bounces, checks."""

    def __init__(self, cluster: BrokerCluster, tmp: Path, spec: Spec) -> None:
        self.cluster, self.spec = cluster, spec
        self.bootstrap = cluster.bootstrap
        self.log_dir = tmp / "copiers"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.inputs: dict[int, list[bytes]] = {}
        self.copiers: list[CopierProc] = []
        self.lock = threading.Lock()
        self.throttled = True
        self.unexpected_exits: list[str] = []
        self.events: list[str] = []
        self.t0 = time.monotonic()
        self.stopping = threading.Event()
        self.supervisor = threading.Thread(target=self._supervise, daemon=True)
        self.reader = OutputReader(self.bootstrap, spec.out_parts)

    def note(self, what: str) -> None:
        line = f"[{time.monotonic() - self.t0:6.1f} s] {what}"
        self.events.append(line)
        print(line, flush=True)

    # -- setup ----------------------------------------------------------------------------------
    def create_topics(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        conf = {"min.insync.replicas": "2"}
        futures = admin.create_topics([NewTopic(INPUT, self.spec.in_parts, RF, config=conf),
                                       NewTopic(OUTPUT, self.spec.out_parts, RF, config=conf)],
                                      operation_timeout=60, request_timeout=60)
        for f in futures.values():
            f.result(90)
        wait_full_isr(self.cluster, INPUT, self.spec.in_parts, RF)
        wait_full_isr(self.cluster, OUTPUT, self.spec.out_parts, RF)

    def seed(self) -> None:
        """``records`` values 0..N-1 over the input partitions in turn, idempotent acks=all."""
        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                      "linger.ms": 10, "message.timeout.ms": 120000})
        errors: list[str] = []

        def on_delivery(err, msg) -> None:
            if err is not None:
                errors.append(str(err))
        parts = self.spec.in_parts
        self.inputs = {q: [] for q in range(parts)}
        deadline = time.monotonic() + 300
        for i in range(self.spec.records):
            v = str(i).encode()
            while True:
                try:
                    p.produce(INPUT, key=v, value=v, partition=i % parts, on_delivery=on_delivery)
                    break
                except BufferError:
                    assert time.monotonic() < deadline, "seeding not done in 300 s"
                    p.poll(0.05)
            self.inputs[i % parts].append(v)
        assert p.flush(max(1.0, deadline - time.monotonic())) == 0, "seed records unacknowledged"
        assert not errors, f"seed delivery errors: {errors[:5]}"

    def start_copiers(self) -> None:
        rate = self.spec.records / self.spec.in_parts / self.spec.copy_seconds
        for i in range(self.spec.in_parts):
            args = ["--bootstrap", self.bootstrap, "--transactional-id", f"copier-{i}", "--group", GROUP,
                    "--input", INPUT, "--output", OUTPUT, "--group-protocol", self.spec.protocol,
                    "--txn-size", str(TXN_SIZE), "--abort-rate", str(ABORT_RATE), "--max-rate", f"{rate:.1f}"]
            c = CopierProc(i, args, self.log_dir)
            c.start(throttled=True)
            self.copiers.append(c)
        self.supervisor.start()
        self.reader.start()

    def _supervise(self) -> None:
        """Restart a copier that exited by itself (a fatal client error), as a restarted service would."""
        while not self.stopping.wait(0.5):
            with self.lock:
                for c in self.copiers:
                    if c.proc is not None and c.proc.poll() is not None:
                        self.unexpected_exits.append(f"{c.tid} start {c.starts} exited {c.proc.returncode}:\n"
                                                     f"{c.last_log()}")
                        self.note(f"{c.tid} exited by itself with {c.proc.returncode}; restarting")
                        if len(self.unexpected_exits) <= MAX_COPIER_RESTARTS:
                            c.start(self.throttled)

    # -- progress -------------------------------------------------------------------------------
    def committed(self) -> int:
        """Input records the group has committed (stable offsets only: read_committed asks with require_stable)."""
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP, "isolation.level": "read_committed"})
        try:
            tps = c.committed([TopicPartition(INPUT, q) for q in range(self.spec.in_parts)], timeout=20)
        finally:
            c.close()
        return sum(max(tp.offset, 0) for tp in tps)

    def wait_progress(self, since: int, what: str) -> int:
        target = min(self.spec.records, since + TXN_SIZE)
        n = wait_until(lambda: (v := self.committed()) >= target and v, f"{what}: copiers to commit past {target}",
                       PROGRESS_WAIT_S, interval=0.5)
        self.note(f"{what}: {n} of {self.spec.records} committed")
        return n

    def wait_committed(self, target: int) -> int:
        return wait_until(lambda: (v := self.committed()) >= target and v,
                          f"copiers to commit {target} of {self.spec.records}", PROGRESS_WAIT_S, interval=0.5)

    def wait_healthy(self) -> None:
        for topic, parts in ((INPUT, self.spec.in_parts), (OUTPUT, self.spec.out_parts),
                             ("__transaction_state", INTERNAL_PARTITIONS), ("__consumer_offsets", INTERNAL_PARTITIONS)):
            wait_full_isr(self.cluster, topic, parts, RF)

    # -- bounces --------------------------------------------------------------------------------
    def coordinator_of(self, tid: str) -> int:
        def ask() -> int | None:
            for b in self.cluster.brokers.values():
                if b.running:
                    r = send_request(b.bootstrap, FindCoordinatorRequest(key=tid, key_type=1), 1, timeout=10)
                    if r.error_code == 0:
                        return r.node_id
            return None
        return wait_until(ask, f"the coordinator of {tid}")

    def clean_bounce(self, node: int) -> None:
        b = self.cluster.brokers[node]
        code = b.stop(60)
        assert code == 0, f"broker {node} exited with {code} on SIGTERM\n{b.log_tail()}"
        start_when_lease_gone(b)
        self.note(f"clean bounce of broker {node} done")

    def hard_bounce(self, node: int) -> None:
        b = self.cluster.brokers[node]
        b.kill()
        start_when_lease_gone(b)
        self.note(f"hard bounce of broker {node} done")

    def hard_bounce_prepared_coordinator(self) -> int:
        """kill -9 the coordinator of copier-0 while one of its transactions is prepared (the broker
        logs the marker delay when it starts holding one); returns the node."""
        node = self.coordinator_of("copier-0")
        b = self.cluster.brokers[node]
        mark = "fault injection: delaying txn.before_markers"
        seen = b.log_text().count(mark)
        wait_until(lambda: b.log_text().count(mark) > seen, f"a prepared transaction on broker {node}",
                   PROGRESS_WAIT_S, interval=0.02)
        b.kill()
        self.note(f"broker {node} (coordinator of copier-0) killed -9 holding a prepared transaction")
        start_when_lease_gone(b)
        self.note(f"hard bounce of coordinator broker {node} done")
        return node

    def hard_bounce_copier(self, i: int) -> None:
        with self.lock:
            c = self.copiers[i]
            c.kill()
            c.start(self.throttled)
        self.note(f"{c.tid} killed -9 and started again (start {c.starts})")

    # -- end ------------------------------------------------------------------------------------
    def finish(self) -> None:
        """Lift the pacing, wait until everything is committed, stop the copiers."""
        with self.lock:
            self.throttled = False
            for c in self.copiers:
                c.signal(signal.SIGUSR1)
        wait_until(lambda: self.committed() >= self.spec.records, "copiers to commit every input record",
                   self.spec.finish_wait_s, interval=1.0)
        self.note("all input committed")
        self.close()

    def close(self) -> None:
        self.stopping.set()
        if self.supervisor.is_alive():
            self.supervisor.join(10)
        with self.lock:
            for c in self.copiers:
                c.stop()
                c.kill()

    def read_output(self) -> dict[int, list[tuple[bytes, bytes]]]:
        """Everything in the output under read_committed, per partition in offset order."""
        n_parts = self.spec.out_parts
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "verifying-consumer",
                      "enable.auto.commit": False, "isolation.level": "read_committed",
                      "enable.partition.eof": True})
        got: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(n_parts)}
        eof: set[int] = set()
        try:
            c.assign([TopicPartition(OUTPUT, p, OFFSET_BEGINNING) for p in range(n_parts)])
            deadline = time.monotonic() + READ_WAIT_S
            while time.monotonic() < deadline:
                if len(eof) == n_parts and sum(map(len, got.values())) >= self.spec.records:
                    break
                for m in c.consume(num_messages=1000, timeout=0.5):
                    if m.error() is None:
                        got[m.partition()].append((m.value(), dict(m.headers() or []).get("src", b"")))
                        eof.discard(m.partition())
                    elif m.error().code() == KafkaError._PARTITION_EOF:
                        eof.add(m.partition())
        finally:
            c.close()
        return got


def problems_with(name: str, values: list[bytes], sources: list[bytes], inputs: dict[int, list[bytes]]) -> list[str]:
    """Multiset equality of ``values`` with the input; duplicates traced to their transactions."""
    expected = {v for vs in inputs.values() for v in vs}
    counts = Counter(values)
    dups = {v: n for v, n in counts.items() if n > 1}
    out = []
    if dups:
        where = {v: [s.decode() for val, s in zip(values, sources, strict=True) if val == v] for v in list(dups)[:5]}
        out.append(f"{name}: {len(dups)} values more than once, e.g. {where}")
    extra = set(counts) - expected
    if extra:
        out.append(f"{name}: {len(extra)} values not in the input, e.g. {sorted(extra)[:5]}")
    missing = expected - set(counts)
    if missing:
        out.append(f"{name}: {len(missing)} of {len(expected)} input values missing, "
                   f"e.g. {sorted(missing, key=int)[:10]}")
    return out


def verify(run: EosRun) -> None:
    final = run.read_output()
    values = [v for p in sorted(final) for v, _ in final[p]]
    sources = [s for p in sorted(final) for _, s in final[p]]
    problems = problems_with("output (read_committed)", values, sources, run.inputs)
    # The concurrent consumer must reach the same end; it never saw an aborted record if it has
    # no duplicate (every value is committed exactly once, so an aborted copy would be a second one).
    reader = run.reader
    reader.stop_at = run.spec.records
    reader.join(READ_WAIT_S)  # the final read above got everything there is: this is the reader catching up
    reader.halt.set()
    conc_values = [v for _, v, _ in reader.got]
    problems += problems_with("concurrent read_committed consumer", conc_values, [s for _, _, s in reader.got],
                              run.inputs)
    if run.spec.check_order:
        assert len(run.inputs) == 1 and len(final) == 1
        if [v for v, _ in final[0]] != run.inputs[0]:
            problems.append("output order differs from the input order")
        if conc_values != run.inputs[0]:
            problems.append("the concurrent consumer's order differs from the input order")
    aborted = committed_txns = 0
    for path in run.log_dir.glob("*.log"):
        lines = path.read_text(errors="replace").splitlines()
        aborted += sum(line.startswith("aborted ") for line in lines)
        committed_txns += sum(line.startswith("committed ") for line in lines)
    run.note(f"verified: {len(values)} records read back, {len(conc_values)} by the concurrent consumer; "
             f"{committed_txns} transactions committed, {aborted} aborted; "
             f"{len(run.unexpected_exits)} copier exits by themselves")
    assert not problems, "\n".join(problems + run.events)
    assert len(run.unexpected_exits) <= MAX_COPIER_RESTARTS, "\n\n".join(run.unexpected_exits)


def run_workload(cluster: BrokerCluster, tmp: Path, spec: Spec, plan: list[tuple[str, int | None]]) -> EosRun:
    """Seed, copy while executing ``plan`` ((action, target) steps), finish, verify."""
    run = EosRun(cluster, tmp, spec)
    run.create_topics()
    run.seed()
    run.note(f"seeded {spec.records} records over {spec.in_parts} partitions")
    try:
        run.start_copiers()
        done = run.wait_progress(0, "copiers started")
        run.wait_healthy()
        for i, action_target in enumerate(plan):
            # Spread the steps over the copy (step i once (i+1)/(steps+1) of the input is committed),
            # so every one of them meets transactions in flight, as Kafka's bounces do.
            done = max(done, run.wait_committed(spec.records * (i + 1) // (len(plan) + 1)))
            action, target = action_target
            if action == "clean":
                assert target is not None
                run.clean_bounce(target)
            elif action == "hard":
                assert target is not None
                run.hard_bounce(target)
            elif action == "hard_coordinator":
                run.hard_bounce_prepared_coordinator()
            elif action == "copier":
                assert target is not None
                run.hard_bounce_copier(target)
            else:
                raise AssertionError(action)
            run.wait_healthy()
            done = run.wait_progress(done, f"after {action} {target if target is not None else ''}".strip())
        run.finish()
    finally:
        run.close()
    verify(run)
    return run


def broker_plan(spec: Spec) -> list[tuple[str, int | None]]:
    return ([("clean", n) for n in (1, 2, 3)] + [("hard_coordinator", None)] + [("hard", n) for n in (1, 2, 3)]
            + [("copier", i) for i in range(spec.in_parts)])


@pytest.mark.timeout(900)
def test_eos_workload_small(cluster: BrokerCluster, tmp_path: Path) -> None:
    """10,000 records, one hard bounce: the coordinator of copier-0 killed holding a prepared transaction."""
    spec = Spec(records=10_000, copy_seconds=30, finish_wait_s=180)
    run_workload(cluster, tmp_path, spec, [("hard_coordinator", None)])


@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_eos_workload_100k(cluster: BrokerCluster, tmp_path: Path, protocol: str) -> None:
    spec = Spec(records=100_000, protocol=protocol, copy_seconds=120)
    run_workload(cluster, tmp_path, spec, broker_plan(spec))


@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_eos_workload_ordered(cluster: BrokerCluster, tmp_path: Path, protocol: str) -> None:
    """1 input partition -> 1 output partition, a third of the records: order is checked too."""
    spec = Spec(records=100_000 // 3, in_parts=1, out_parts=1, protocol=protocol, copy_seconds=120, check_order=True)
    run_workload(cluster, tmp_path, spec, broker_plan(spec))
