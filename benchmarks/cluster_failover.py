"""Failover time of a kbroker cluster (issue 14, acceptance 2 and 8): kill -9 of a leader, again and again.

    .venv/bin/python benchmarks/cluster_failover.py [--kills 10] [--quick] [--session-timeout-ms 3000]

A real etcd and 3 real brokers on 127.0.0.1 (tests/helpers), one topic of 6 partitions, RF=3,
min.insync.replicas=2. One prober thread per partition keeps sending acks=all Produce requests of
one small record to the partition's leader (raw protocol, re-reading Metadata from a live broker
after any error, 20 ms apart after an error). Each round: wait until every partition has a leader
and a full ISR, kill -9 the broker leading the most partitions, and measure, for each partition it
led, the time from the kill to the first acknowledgement by the new leader (of a request sent after
the kill). Then the broker is started again (it waits for its old lease to expire) and the next
round waits for the ISR to be full again. Every wait is bounded.

The failover time is mostly ``broker.session.timeout.ms`` less the time since the killed broker's
last heartbeat (etcd expires its lease, then the controller elects a new leader from the ISR),
plus the election and the client's Metadata refresh; the report states the settings. Output: stdout, ``benchmarks/results/cluster_failover.md`` and
``.json`` (with --quick: 3 kills, under ``benchmarks/results/quick/``, which is not committed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from protocol.errors import ErrorCode  # noqa: E402
from tests.helpers.etcd_proc import EtcdProcess  # noqa: E402
from tests.helpers.fault_cluster import (  # noqa: E402
    FaultCluster,
    PartitionView,
    create_topic,
    produce_once,
    try_views,
    wait_isr_full,
)
from tests.helpers.wire import RawConnection  # noqa: E402

TOPIC = "failover-bench"
PARTITIONS = 6
RF = 3
WAIT_S = 120.0
REQUEST_TIMEOUT_MS = 2000


class Probers:
    """One thread per partition producing to its leader; successes as (partition, node, sent, received)."""

    def __init__(self, cluster: FaultCluster, deadline: float) -> None:
        self.cluster = cluster
        self.deadline = deadline
        self.lock = threading.Lock()
        self.acks: list[tuple[int, int, float, float]] = []
        self.errors: Counter[int] = Counter()
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(p,), daemon=True) for p in range(PARTITIONS)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(30)

    def _leader(self, partition: int) -> int:
        for b in self.cluster.brokers.values():
            if b.running and (views := try_views(b.bootstrap, TOPIC)) and partition in views:
                return views[partition].leader
        return -1

    def _run(self, partition: int) -> None:
        conn: RawConnection | None = None
        node = -1
        while not self.stop_event.is_set() and time.monotonic() < self.deadline:
            try:
                if conn is None:
                    node = self._leader(partition)
                    if node < 0:
                        raise ConnectionError("no leader")
                    conn = RawConnection(self.cluster.brokers[node].bootstrap, timeout=REQUEST_TIMEOUT_MS / 1000 + 5)
                sent = time.monotonic()
                err, _offset = produce_once(conn, TOPIC, partition, [b"x" * 100], -1, REQUEST_TIMEOUT_MS)
                received = time.monotonic()
            except Exception:  # noqa: BLE001 - leader down or unknown: ask again
                err = -1
            if err == ErrorCode.NONE:
                with self.lock:
                    self.acks.append((partition, node, sent, received))
                continue
            self.errors[err] += 1
            if conn is not None:
                conn.close()
                conn = None
            self.stop_event.wait(0.02)
        if conn is not None:
            conn.close()

    def first_ack(self, partition: int, not_node: int, after: float) -> float | None:
        with self.lock:
            return next((r for p, n, s, r in self.acks if p == partition and n != not_node and s > after), None)


def busiest(views: dict[int, PartitionView]) -> tuple[int, list[int]]:
    node = Counter(v.leader for v in views.values()).most_common(1)[0][0]
    return node, sorted(p for p, v in views.items() if v.leader == node)


def live_bootstrap(cluster: FaultCluster) -> str:
    return next(b.bootstrap for b in cluster.brokers.values() if b.running)


def run(args: argparse.Namespace, base: Path) -> dict:
    overrides = {"broker.session.timeout.ms": str(args.session_timeout_ms),
                 "broker.heartbeat.interval.ms": str(args.heartbeat_interval_ms),
                 "replica.lag.time.max.ms": str(args.replica_lag_time_max_ms),
                 "replica.fetch.backoff.ms": "200"}
    etcd = EtcdProcess(base / "etcd")
    etcd.start()
    cluster = FaultCluster(etcd, base, 3, proxied=False, **overrides)
    rounds: list[dict] = []
    probers: Probers | None = None
    try:
        cluster.start()
        create_topic(cluster.bootstrap, TOPIC, PARTITIONS, RF, {"min.insync.replicas": "2"})
        probers = Probers(cluster, time.monotonic() + args.kills * 300)
        probers.start()
        for k in range(args.kills):
            views = wait_isr_full(live_bootstrap(cluster), TOPIC, RF, WAIT_S)
            victim, moved = busiest(views)
            killed_at = time.monotonic()
            cluster.brokers[victim].kill()
            times: dict[int, float] = {}
            deadline = killed_at + WAIT_S
            while len(times) < len(moved):
                if time.monotonic() > deadline:
                    raise SystemExit(f"kill {k + 1}: no new leader acknowledged {sorted(set(moved) - set(times))} "
                                     f"within {WAIT_S} s")
                for p in moved:
                    if p not in times and (r := probers.first_ack(p, victim, killed_at)) is not None:
                        times[p] = r - killed_at
                time.sleep(0.01)
            new = try_views(live_bootstrap(cluster), TOPIC)
            rounds.append({"kill": k + 1, "victim": victim, "partitions": moved,
                           "failover_s": {str(p): round(t, 3) for p, t in sorted(times.items())},
                           "new_leaders": {str(p): new[p].leader for p in moved if p in new}})
            print(f"kill {k + 1}/{args.kills}: node {victim} led {moved}; first ack on the new leader after "
                  + ", ".join(f"p{p} {t:.2f} s" for p, t in sorted(times.items())), flush=True)
            cluster.brokers[victim].start(timeout=WAIT_S)  # waits for the old lease to expire
        wait_isr_full(live_bootstrap(cluster), TOPIC, RF, WAIT_S)
    finally:
        if probers is not None:
            probers.stop()
        for problem in cluster.stop():
            print(f"warning: {problem}", file=sys.stderr)
        etcd.stop()
    every = [t for r in rounds for t in r["failover_s"].values()]
    per_kill = [max(r["failover_s"].values()) for r in rounds]
    return {
        "meta": {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": platform.machine(),
                 "cpus": os.cpu_count(), "python": platform.python_version(), "brokers": 3,
                 "partitions": PARTITIONS, "replication_factor": RF, "min_insync_replicas": 2,
                 "settings": {k: v for k, v in cluster.brokers[1].overrides.items()
                              if k.startswith(("broker.", "replica."))}, "kills": args.kills, "quick": args.quick,
                 "produce_request_timeout_ms": REQUEST_TIMEOUT_MS,
                 "load_average": os.getloadavg()},
        "rounds": rounds,
        "summary": {"partition_failovers": len(every),
                    "median_s": round(statistics.median(every), 3), "max_s": round(max(every), 3),
                    "min_s": round(min(every), 3),
                    "per_kill_median_s": round(statistics.median(per_kill), 3),
                    "per_kill_max_s": round(max(per_kill), 3),
                    "prober_errors": {str(k): v for k, v in probers.errors.items()} if probers else {}},
    }


def markdown(result: dict) -> str:
    m, s = result["meta"], result["summary"]
    settings = ", ".join(f"`{k}={v}`" for k, v in m["settings"].items())
    lines = [
        "# cluster_failover: kill -9 of a partition leader",
        "",
        f"- {m['date']}; {m['machine']}, {m['cpus']} CPUs, Python {m['python']}; load average at the end "
        f"{', '.join(f'{x:.1f}' for x in m['load_average'])}",
        f"- 3 brokers + 1 etcd on 127.0.0.1; topic of {m['partitions']} partitions, RF={m['replication_factor']}, "
        f"min.insync.replicas={m['min_insync_replicas']}; {settings}",
        f"- {m['kills']} kills of the broker leading the most partitions; per partition it led: time from the "
        "kill to the first acks=all acknowledgement by the new leader (one prober per partition, raw Produce, "
        "Metadata re-read after every error, 20 ms between attempts)",
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| partition failovers measured | {s['partition_failovers']} |",
        f"| median | {s['median_s']:.2f} s |",
        f"| max | {s['max_s']:.2f} s |",
        f"| min | {s['min_s']:.2f} s |",
        f"| per kill, until every moved partition is served: median / max | {s['per_kill_median_s']:.2f} s / "
        f"{s['per_kill_max_s']:.2f} s |",
        "",
        "| kill | victim | partitions | failover per partition (s) |",
        "| --- | --- | --- | --- |",
    ]
    for r in result["rounds"]:
        lines.append(f"| {r['kill']} | {r['victim']} | {r['partitions']} | "
                     + ", ".join(f"p{p}: {t:.2f}" for p, t in r["failover_s"].items()) + " |")
    lines += ["", "After each kill the broker is started again and the next kill waits for full ISRs. The failover "
              "time is about `broker.session.timeout.ms` minus the time since the killed broker's last "
              "acknowledged heartbeat: the controller elects a new leader only once etcd has expired the "
              "killed broker's lease; the rest is the election, the watch and the client's Metadata refresh.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="3 kills, report under benchmarks/results/quick/")
    ap.add_argument("--session-timeout-ms", type=int, default=3000)
    ap.add_argument("--heartbeat-interval-ms", type=int, default=500)
    ap.add_argument("--replica-lag-time-max-ms", type=int, default=5000)
    ap.add_argument("--dir", type=Path, default=None, help="parent dir for data (default: system temp)")
    ap.add_argument("--out", type=Path, default=None, help="report directory")
    args = ap.parse_args(argv)
    if args.quick:
        args.kills = min(args.kills, 3)
    out = args.out or (ROOT / "benchmarks" / "results" / ("quick" if args.quick else ""))
    base = Path(tempfile.mkdtemp(prefix="kbroker-failover-", dir=args.dir))
    try:
        result = run(args, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    text = markdown(result)
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cluster_failover.md").write_text(text)
    (out / "cluster_failover.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
