"""One campaign from start to report: cluster, topics, workers, faults, final drain, check.

Phases (logged to ``<run>/campaign.log`` and stdout):
1. a 3-broker cluster on a 3-member etcd (tests/campaign/cluster.py), the workload topics (2
   partitions each, RF=3, min.insync.replicas=2) and the internal topics, all fully in sync;
2. the workers (tests/campaign/worker.py, a subprocess each) run for ``duration`` seconds; a worker
   that exits early (its watchdog caught a hung call) is started again under a new restart number;
3. meanwhile faults, one at a time: a gap, a fault of the next kind (every kind once, in a shuffled
   order, then again), its hold, its heal, then a wait until the cluster is whole again (every
   broker up, every partition led with its full ISR), whose time is recorded;
4. after the load: everything healed, the cluster whole again, then the final drain (every key
   read from the beginning to its high watermark, confluent-kafka and, for the queue, kafka-python);
5. the history is checked (tests/campaign/checker.py) and the report written (tests/campaign/report.py).

Exit code: 0 valid, 1 anomalies, 2 the run itself went wrong (cluster not whole again, drain not
complete, a broker logged a traceback) without anomalies. The last line printed is the summary.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from tests.helpers.broker_proc import REPO_ROOT
from tests.helpers.fault_cluster import create_topic

from . import probes, report
from .checker import check
from .cluster import CampaignCluster
from .history import load, make_key
from .nemeses import NEMESES, Fault, NemesisContext
from .nemeses.base import restart_broker
from .options import Options

INTERNAL = ["__consumer_offsets", "__transaction_state"]
RECOVER_IN_LOOP_S = 90.0
WORKER_GRACE_S = 60.0
MAX_WORKER_RESTARTS = 50  # a worker that keeps dying (a broken client setup) is not restarted forever


@dataclass
class WorkerSpec:
    index: int
    workload: str
    client: str
    keys: list[str]
    restart: int = 0
    proc: subprocess.Popen | None = None
    restarts: int = 0


class Campaign:
    def __init__(self, opts: Options) -> None:
        self.opts = opts
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.run_dir = (opts.out / f"{stamp}-seed{opts.seed}").resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.run_dir / "campaign.log", "a", buffering=1)
        self.rng = random.Random(opts.seed)
        self.epoch_ns = time.monotonic_ns()
        self.faults: list[Fault] = []
        self.problems: list[str] = []
        self.notes: list[str] = []
        self.workers: list[WorkerSpec] = []
        self.cluster: CampaignCluster | None = None
        self.queue_topics = [f"cq{i}" for i in range(opts.queue_topics)]
        self.txn_topics = [f"cx{i}" for i in range(opts.txn_topics)]
        self._stop_monitor = threading.Event()

    # --- utilities ---------------------------------------------------------------------------

    def now_s(self) -> float:
        return (time.monotonic_ns() - self.epoch_ns) / 1e9

    def log(self, msg: str) -> None:
        line = f"[{self.now_s():8.1f}s] {msg}"
        print(line, flush=True)
        self._log.write(line + "\n")

    @property
    def topics(self) -> list[str]:
        out = []
        if "queue" in self.opts.workloads:
            out += self.queue_topics
        if "txn" in self.opts.workloads:
            out += self.txn_topics
        return out

    def keys(self, topics: list[str]) -> list[str]:
        return [make_key(t, p) for t in topics for p in (0, 1)]

    # --- phases ------------------------------------------------------------------------------

    def run(self) -> int:
        previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(SystemExit(143)))
        result = None
        ops = []
        try:
            self.log(f"run dir {self.run_dir}; options {json.dumps(self.opts.as_dict(), default=str)}")
            self.cluster = CampaignCluster(self.run_dir, netns=self.opts.netns,
                                           disk_mb=self.opts.disk_mb or None, faketime=self.opts.faketime,
                                           env=self.opts.broker_env)
            try:
                self.setup()
                self.load_and_faults()
                self.final_heal()
                self.drain()
            finally:
                self._stop_monitor.set()
                self.stop_workers(kill=True)
                self.problems += self.cluster.stop()
            ops = load(self.run_dir)
            result = check(ops)
            opts = {**self.opts.as_dict(), "run_dir": str(self.run_dir)}
            faults = [f.as_dict() for f in self.faults]
            png = report.write(self.run_dir, opts, ops, result, faults, self.problems, self.notes)
            self.log(f"report: {self.run_dir}/summary.txt, timeline {png}")
        except BaseException as e:
            self.problems.append(f"campaign aborted: {e!r}")
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)
            line = report.summary_line(self.opts.as_dict(), result, [f.as_dict() for f in self.faults],
                                       self.problems, self.run_dir)
            self._log.write(line + "\n")
            self._log.close()
            print(line, flush=True)
        if not result.valid:
            return 1
        return 2 if self.problems else 0

    def setup(self) -> None:
        c = self.cluster
        assert c is not None
        self.log(f"starting etcd ({len(c.etcd.members)} members) and {len(c.brokers)} brokers")
        c.start()
        for t in self.topics:
            create_topic(c.bootstrap, t, 2, 3, {"min.insync.replicas": "2"})
        # The internal topics come with the first FindCoordinator of each kind.
        for key, kind in (("cq", probes.KEY_GROUP), ("cx-w0", probes.KEY_TXN)):
            deadline = time.monotonic() + 60
            while True:
                try:
                    probes.coordinator(c, key, kind)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        took = probes.wait_healthy(c, self.topics + INTERNAL, 120)
        if took is None:
            raise RuntimeError("the cluster did not get every partition in sync after start-up")
        self.log(f"cluster ready: {c.bootstrap}; topics {self.topics} + internal, all in sync")

    def load_and_faults(self) -> None:
        self.epoch_ns = time.monotonic_ns()
        self.start_workers()
        self.log(f"load started: {len(self.workers)} workers for {self.opts.duration:.0f} s")
        self.nemesis_loop(self.opts.duration)
        self.wait_workers(self.opts.duration + WORKER_GRACE_S)

    # --- workers -----------------------------------------------------------------------------

    def start_workers(self) -> None:
        o = self.opts
        if "queue" in o.workloads:
            qkeys = self.keys(self.queue_topics)
            for i in range(o.queue_workers):
                client = "kafka-python" if i >= o.queue_workers - o.kafka_python_workers else "confluent"
                self.workers.append(WorkerSpec(i, "queue", client, qkeys))
        if "txn" in o.workloads:
            xkeys = self.keys(self.txn_topics)
            for i in range(o.txn_workers):
                self.workers.append(WorkerSpec(100 + i, "txn", "confluent", xkeys))
        for w in self.workers:
            self._spawn(w)
        threading.Thread(target=self._monitor, daemon=True, name="worker-monitor").start()

    def _spawn(self, w: WorkerSpec) -> None:
        assert self.cluster is not None
        o = self.opts
        cmd = [sys.executable, "-m", "tests.campaign.worker", "--workload", w.workload, "--client", w.client,
               "--worker", str(w.index), "--restart", str(w.restart), "--bootstrap", self.cluster.bootstrap,
               "--keys", ",".join(w.keys), "--epoch-ns", str(self.epoch_ns), "--until-s", str(o.duration),
               "--seed", str(o.seed), "--out", str(self.run_dir / f"history-w{w.index}-r{w.restart}.jsonl"),
               "--abort-p", str(o.abort_p), "--rate", str(o.rate), "--group-protocol", o.group_protocol]
        with open(self.run_dir / f"worker-{w.index}.log", "ab") as out:
            w.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                      env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})

    def _monitor(self) -> None:
        while not self._stop_monitor.wait(0.5):
            for w in self.workers:
                if w.proc is None or w.proc.poll() is None:
                    continue
                if self.now_s() < self.opts.duration - 5:
                    code = w.proc.returncode
                    if w.restarts >= MAX_WORKER_RESTARTS:
                        if w.restarts == MAX_WORKER_RESTARTS:
                            w.restarts += 1
                            self.problems.append(f"worker {w.index} exited {MAX_WORKER_RESTARTS} times; not restarted")
                        continue
                    w.restart += 1
                    w.restarts += 1
                    self.log(f"worker {w.index} ({w.workload}/{w.client}) exited with {code}; restart {w.restart}")
                    self.notes.append(f"worker {w.index} exited with {code} at {self.now_s():.1f} s and was restarted")
                    self._spawn(w)

    def wait_workers(self, until_s: float) -> None:
        for w in self.workers:
            while w.proc is not None and w.proc.poll() is None and self.now_s() < until_s:
                time.sleep(0.2)
        self._stop_monitor.set()
        self.stop_workers(kill=True)

    def stop_workers(self, kill: bool) -> None:
        for w in self.workers:
            if w.proc is not None and w.proc.poll() is None:
                self.log(f"worker {w.index} still running at the end: killed (its open operation is indeterminate)")
                w.proc.kill()
                w.proc.wait()

    # --- faults ------------------------------------------------------------------------------

    def nemesis_loop(self, duration: float) -> None:
        c = self.cluster
        assert c is not None
        ctx = NemesisContext(cluster=c, rng=self.rng, topics=self.topics,
                             txn_ids=[f"cx-w{100 + i}" for i in range(max(1, self.opts.txn_workers))],
                             groups=["cq", "ct"], now_s=self.now_s, log=self.log, hold_scale=self.opts.hold_scale)
        nemeses = []
        for kind in self.opts.faults:
            n = NEMESES[kind](ctx)
            why = n.unavailable()
            if why:
                self.log(f"fault kind {kind} unavailable: {why}")
                self.notes.append(f"fault kind {kind} not run: {why}")
            else:
                nemeses.append(n)
        if not nemeses:
            while self.now_s() < duration:
                time.sleep(0.5)
            return
        order: list = []
        rounds = 0
        tail = min(15.0, duration * 0.1)
        while True:
            gap = self.rng.uniform(*self.opts.fault_gap)
            if self.now_s() + gap >= duration - tail:
                break
            if not order:
                if self.opts.rounds and rounds >= self.opts.rounds:
                    break
                rounds += 1
                order = nemeses[:]
                self.rng.shuffle(order)
            time.sleep(gap)
            n = order.pop()
            try:
                fault = n.start()
            except Exception as e:  # noqa: BLE001 - a fault that could not be applied is logged, not fatal
                self.log(f"fault {n.kind} could not start: {e!r}")
                self.notes.append(f"{n.kind} fault at {self.now_s():.1f} s could not start: {e!r}")
                continue
            self.faults.append(fault)
            hold = min(fault.hold_s, max(1.0, duration - self.now_s()))
            self.log(f"FAULT {fault.kind}/{fault.variant} on {fault.target} for {hold:.1f} s")
            time.sleep(hold)
            self.heal(fault)
            self.recover(fault, RECOVER_IN_LOOP_S)
        while self.now_s() < duration:
            time.sleep(0.5)

    def heal(self, fault: Fault) -> None:
        try:
            if fault.heal is not None:
                fault.heal()
        except Exception as e:  # noqa: BLE001
            fault.notes.append(f"heal failed: {e!r}")
            self.log(f"heal of {fault.kind} failed: {e!r}")
        fault.end_s = self.now_s()
        self.log(f"healed {fault.kind}/{fault.variant} {'; '.join(fault.notes)}")

    def ensure_up(self) -> None:
        """Restart what stopped by itself (a broker that halted, an etcd member), as an operator would."""
        c = self.cluster
        assert c is not None
        for m in c.etcd.members:
            if not m.running:
                self.log(f"etcd member {m.name} is down: starting it")
                m.start(timeout=60)
        for node, b in c.brokers.items():
            if not b.running:
                code = b.proc.returncode if b.proc is not None else None
                self.log(f"broker {node} is down (exit code {code}): starting it")
                self.notes.append(f"broker {node} had exited (code {code}) at {self.now_s():.1f} s; restarted")
                restart_broker(b)

    def recover(self, fault: Fault, timeout: float) -> None:
        try:
            self.ensure_up()
        except Exception as e:  # noqa: BLE001
            fault.notes.append(f"restart failed: {e!r}")
        took = probes.wait_healthy(self.cluster, self.topics + INTERNAL, timeout)
        fault.recovered_s = None if took is None else (self.now_s() - fault.end_s if fault.end_s else took)
        if took is None:
            self.log(f"cluster not whole again {timeout:.0f} s after the heal")
        with open(self.run_dir / "faults.jsonl", "a") as f:
            f.write(json.dumps(fault.as_dict()) + "\n")

    # --- the end -----------------------------------------------------------------------------

    def final_heal(self) -> None:
        c = self.cluster
        assert c is not None
        if c.lab is not None:
            c.lab.heal_all()
        for b in c.brokers.values():
            if b.clock is not None:
                b.set_clock("+0")
        for d in c.disks.values():
            d.free()
        with contextlib.suppress(Exception):
            self.ensure_up()
        took = probes.wait_healthy(c, self.topics + INTERNAL, self.opts.recover_s)
        if took is None:
            self.problems.append(f"the cluster was not whole again {self.opts.recover_s:.0f} s after the load")
            self.log("cluster NOT whole again after the load; draining anyway")
        else:
            self.log(f"cluster whole again {took:.1f} s after the load")

    def drain(self) -> None:
        assert self.cluster is not None
        jobs = []
        if "queue" in self.opts.workloads:
            jobs += [("queue", "confluent", self.queue_topics), ("queue", "kafka-python", self.queue_topics)]
        if "txn" in self.opts.workloads:
            jobs.append(("txn", "confluent", self.txn_topics))
        until = self.now_s() + self.opts.drain_s
        for i, (wl, client, topics) in enumerate(jobs):
            cmd = [sys.executable, "-m", "tests.campaign.worker", "--drain", "--workload", wl, "--client", client,
                   "--restart", str(i), "--bootstrap", self.cluster.bootstrap, "--keys", ",".join(self.keys(topics)),
                   "--epoch-ns", str(self.epoch_ns), "--until-s", str(until),
                   "--out", str(self.run_dir / f"history-drain-{wl}-{client}.jsonl")]
            res = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True,
                                 env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                                 timeout=self.opts.drain_s + 120)
            self.log(f"drain {wl}/{client}: exit {res.returncode}: {res.stdout.strip()[-500:]}")
            if res.returncode != 0:
                self.problems.append(f"drain {wl}/{client} incomplete (exit {res.returncode}): "
                                     f"{(res.stdout + res.stderr).strip()[-1500:]}")


def run(opts: Options) -> int:
    return Campaign(opts).run()
