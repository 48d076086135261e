"""Replicated cluster vs single node (issue 14, acceptance 8): the cost of RF=3, side by side.

    .venv/bin/python benchmarks/cluster_bench.py [--rounds 3] [--quick] [--records N] [--size B]
                                                 [--latency-rate R] [--latency-seconds S] [--out DIR]
                                                 [--report-only benchmarks/results/cluster_bench.json]

Each round starts, one after the other (order alternating by round, so slow drifts of a shared
machine hit both alike):
- **single**: one kbroker in single-node mode (no etcd), topics RF=1;
- **cluster**: a real etcd and 3 kbroker processes on 127.0.0.1 (tests/helpers/cluster_proc.py),
  topics RF=3 with min.insync.replicas=2, created with the full ISR;
and runs against each, on topics whose partitions already replicate (one acks=all record each, then
DeleteRecords past it: the logs start at offset 1; ``_wait_replicating``), with the same client settings (confluent-kafka, lib_workloads.py):
- produce acks=all throughput (``--records`` x ``--size`` B, 4 partitions, linger.ms=5, 1 MiB batches);
- consume throughput of that topic from its start (an assign()-ing consumer);
- end-to-end latency at a fixed rate (acks=all producer, consumer in another process): p50/p99.
  In the cluster a record becomes readable only once the high watermark covers it, so this is the
  replication commit latency as a client sees it.
CPU: user+system seconds of all broker processes over each workload call (topic creation and the
workload's warm-up included). Before each setup starts, a page-cache ballast (lib_page_cache.py)
fills the memory the VM has free, so both setups write their logs into memory in use, as on a
broker host that has run a while (``--cold-memory``: without it; on this VM the first write into
memory new to it costs ~2.5 CPU-ms per MB, paid once per replica). Medians over rounds are printed and written to
``cluster_bench.md`` and ``cluster_bench.json`` in benchmarks/results/ (with --quick in
benchmarks/results/quick/, which git ignores). Every loop is bounded in records and time.
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
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

import confluent_kafka  # noqa: E402
import lib_workloads as wl  # noqa: E402
from confluent_kafka import Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from lib_meter import process_cpu  # noqa: E402
from lib_page_cache import Ballast  # noqa: E402
from lib_report import fmt  # noqa: E402

from benchmarks.produce_consume import git_commit  # noqa: E402
from tests.helpers.broker_proc import BrokerProcess  # noqa: E402
from tests.helpers.cluster_proc import BrokerCluster  # noqa: E402
from tests.helpers.etcd_proc import EtcdProcess  # noqa: E402

SETUPS = ("single", "cluster")
METRICS = (  # (workload, field, label, unit, higher is better)
    ("produce", "records_per_s", "produce acks=all", "records/s", True),
    ("produce", "mb_per_s", "produce acks=all", "MB/s", True),
    ("consume", "records_per_s", "consume (full topic)", "records/s", True),
    ("consume", "mb_per_s", "consume (full topic)", "MB/s", True),
    ("latency", "p50_ms", "e2e latency p50 (acks=all)", "ms", False),
    ("latency", "p99_ms", "e2e latency p99 (acks=all)", "ms", False),
    ("produce", "brokers_cpu_per_mb", "brokers' CPU per MB produced", "CPU-ms/MB", False),
)


class Setup:
    """A started single broker or cluster: bootstrap, broker pids, the topic factory, stop()."""

    def __init__(self, name: str, bootstrap: str, pids: list[int], stop: Callable[[], None],
                 create_topic: Callable[..., None]) -> None:
        self.name, self.bootstrap, self.pids, self.stop, self.create_topic = name, bootstrap, pids, stop, create_topic


def _wait_topic(admin: AdminClient, topic: str, partitions: int, rf: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions and all(
                p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values()):
            return
        time.sleep(0.05)
    raise wl.WorkloadError(f"topic {topic}: no leader and full ISR of {rf} after {timeout} s")


def _wait_replicating(admin: AdminClient, bootstrap: str, topic: str, partitions: int) -> None:
    """Until every partition's followers fetch it: one acks=all record per partition, acknowledged,
    then DeleteRecords past it, so the measured load starts on an empty log (offset 1).

    Why: the first acks=all write to a new RF=3 partition waits until each follower's fetch from
    its leader includes the partition, and a follower adds it only to its next fetch, after the one
    parked on the leader returns: up to replica.fetch.wait.max.ms (500 ms) per leader when nothing
    else moves (measured: 430-1,000 ms for the first write, 1-3 ms after). Kafka's fetcher threads
    add new partitions the same way. A short produce run (300,000 records, ~1 s at RF=3) measured
    that start-up and not replication: the C client kept 1.0 of the 2 cores busy against 1.7 in a
    run on partitions already replicating."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for q in range(partitions):
        p.produce(topic, b"", partition=q)
    if p.flush(60):
        raise wl.WorkloadError(f"topic {topic}: a warm-up record was not acknowledged in 60 s")
    for f in admin.delete_records([TopicPartition(topic, q, 1) for q in range(partitions)],
                                  request_timeout=60, operation_timeout=60).values():
        f.result(90)


def topic_factory(rf: int, config: dict[str, str]) -> Callable[..., None]:
    def create_topic(bootstrap: str, topic: str, partitions: int = wl.PARTITIONS) -> None:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, partitions, rf, config=config)],
                            operation_timeout=60, request_timeout=60)[topic].result(90)
        _wait_topic(admin, topic, partitions, rf)
        _wait_replicating(admin, bootstrap, topic, partitions)
    return create_topic


def start_single(root: Path) -> Setup:
    b = BrokerProcess(root / "single" / "data", overrides={"num.partitions": str(wl.PARTITIONS)})
    b.start(60)

    def stop() -> None:
        try:
            b.stop()
        finally:
            b.kill()
    assert b.proc is not None
    return Setup("single", b.bootstrap, [b.proc.pid], stop, topic_factory(1, {}))


def start_cluster(root: Path) -> Setup:
    etcd = EtcdProcess(root / "cluster" / "etcd")
    etcd.start()
    c = BrokerCluster(etcd, root / "cluster", 3, **{"num.partitions": str(wl.PARTITIONS)})
    try:
        c.start()
    except Exception:
        c.stop()
        etcd.kill()
        raise

    def stop() -> None:
        try:
            c.stop()
        finally:
            try:
                etcd.stop()
            finally:
                etcd.kill()
    pids = [b.proc.pid for b in c.brokers.values() if b.proc is not None]
    return Setup("cluster", c.bootstrap, pids, stop, topic_factory(3, {"min.insync.replicas": "2"}))


def run_setup(setup: Setup, args: argparse.Namespace) -> dict[str, Any]:
    # lib_workloads creates its topics with RF=1 through its module-level create_topic, looked up at
    # call time: for this setup it creates them with the setup's replication factor instead.
    wl.create_topic = setup.create_topic
    out: dict[str, Any] = {}

    def measured(name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
        cpu0 = sum(process_cpu(p) or 0.0 for p in setup.pids)
        try:
            fig = fn()
        except Exception as e:  # one failed workload is reported, the others still run
            traceback.print_exc()
            out[name] = {"error": f"{type(e).__name__}: {e}"}
            return None
        fig["brokers_cpu"] = sum(process_cpu(p) or 0.0 for p in setup.pids) - cpu0
        out[name] = fig
        return fig

    topic = wl.unique("produce")
    prod = measured("produce", lambda: wl.produce(setup.bootstrap, None, records=args.records, size=args.size,
                                                  acks="all", topic=topic))
    if prod is not None:
        prod["brokers_cpu_per_mb"] = prod["brokers_cpu"] * 1e3 / (args.records * args.size / wl.MB)
        measured("consume", lambda: wl.consume(setup.bootstrap, None, topic=topic, expected=args.records + 100,
                                               size=args.size))
    measured("latency", lambda: wl.latency(setup.bootstrap, None, rate=args.latency_rate,
                                           seconds=args.latency_seconds, size=args.size))
    return out


def medians(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for workload, field, label, unit, higher in METRICS:
        row: dict[str, Any] = {"label": label, "unit": unit, "higher": higher}
        for s in SETUPS:
            xs = [r[s][workload][field] for r in results["rounds"]
                  if isinstance(r.get(s, {}).get(workload), dict) and r[s][workload].get(field) is not None]
            row[s] = statistics.median(xs) if xs else None
            row[f"{s}_all"] = xs
        row["ratio"] = row["cluster"] / row["single"] if row["single"] and row["cluster"] is not None else None
        # Per-round ratio: the two setups ran back to back, so a slow drift in the machine's load
        # cancels out of it better than out of the ratio of medians.
        pairs = [r["cluster"][workload][field] / r["single"][workload][field] for r in results["rounds"]
                 if all(isinstance(r.get(s, {}).get(workload), dict) and r[s][workload].get(field) for s in SETUPS)]
        row["paired"] = statistics.median(pairs) if pairs else None
        rows.append(row)
    return rows


def text_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'metric':<32} {'unit':<10} {'single':>12} {'RF=3 x3':>12} {'cluster/single':>15} {'paired':>7}",
             "-" * 92]
    for r in rows:
        ratio = "–" if r["ratio"] is None else f"{r['ratio']:.2f}"
        paired = "–" if r["paired"] is None else f"{r['paired']:.2f}"
        lines.append(f"{r['label']:<32} {r['unit']:<10} {fmt(r['single'], r['unit']):>12} "
                     f"{fmt(r['cluster'], r['unit']):>12} {ratio:>15} {paired:>7}")
    return "\n".join(lines)


def markdown(results: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    m = results["meta"]
    errors = [f"- round {i + 1}, {s}, {w}: {fig['error']}" for i, r in enumerate(results["rounds"])
              for s in SETUPS for w, fig in r.get(s, {}).items() if isinstance(fig, dict) and "error" in fig]
    table = ["| metric | unit | single node (RF=1) | 3 brokers, RF=3 | cluster / single | paired ratio "
             "| per round (single; cluster) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = "–" if r["ratio"] is None else f"{r['ratio']:.2f}"
        paired = "–" if r["paired"] is None else f"{r['paired']:.2f}"
        per = "; ".join(", ".join(fmt(x, r["unit"]) for x in r[f"{s}_all"]) or "–" for s in SETUPS)
        table.append(f"| {r['label']} | {r['unit']} | {fmt(r['single'], r['unit'])} | "
                     f"{fmt(r['cluster'], r['unit'])} | {ratio} | {paired} | {per} |")
    return "\n".join([
        "# cluster_bench: 3 brokers with RF=3 against one broker",
        "",
        f"`benchmarks/cluster_bench.py`, {m['date']} UTC, commit {m['commit']}, {m['host']} "
        f"({m['cpus']} CPUs), Python {m['python']}, confluent-kafka {m['client']}; {m['rounds']} round(s), "
        "medians (paired ratio: median of the per-round cluster/single ratios). "
        f"Produce: {m['records']:,} records x {m['size']} B, acks=all, 4 partitions, linger.ms=5. "
        f"Consume: that topic from its start. Latency: {m['latency_rate']} records/s for {m['latency_seconds']} s, "
        "acks=all, consumer in another process (producer send -> consumer receive).",
        "",
        "Single node: one kbroker, no etcd, topics RF=1. Cluster: etcd + 3 kbroker processes on the same "
        "host, topics RF=3, min.insync.replicas=2. All brokers, the clients and etcd share the machine's "
        "cores, so the cluster's three brokers compete with each other and with the client for CPU: "
        "the ratio is the cost of replication on one host, not what three machines would do.",
        "",
        *table,
        "",
        ("Memory: a page-cache ballast (benchmarks/lib_page_cache.py) filled what the VM had free before each "
         "setup started (MemFree after it, MB: " + "; ".join(
             f"round {i + 1}: " + ", ".join(f"{s} {r[s]['ballast']['free_after_mb']}" for s in SETUPS
                                            if (r.get(s) or {}).get("ballast"))
             for i, r in enumerate(results["rounds"])) + "), so the logs were written into memory in use."
         if m.get("warm_memory") else
         "Memory: cold (--cold-memory): the logs were written into whatever memory the VM had free; on this "
         "VM the first write into memory new to it costs ~2.5 CPU-ms per MB (replication_floor.py)."),
        "",
        "1-minute load average before each run (" + "; ".join(
            f"round {i + 1}: " + ", ".join(f"{s} {r[s]['load_avg_1m']:.1f}" for s in SETUPS if s in r)
            for i, r in enumerate(results["rounds"])) + ") — the machine's 2 cores are shared: the spread "
        "between rounds is mostly other processes' load.",
        "",
        *(["Failed workloads:", "", *errors, ""] if errors else []),
        f"Notes: {m['notes']}" if m.get("notes") else "",
    ]) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=1_000_000,
                    help="records in the produce phase (200,000 took under a second at RF=3: its rounds spread 2x)")
    ap.add_argument("--size", type=int, default=1024, help="record value bytes")
    ap.add_argument("--latency-rate", type=int, default=2_000)
    ap.add_argument("--latency-seconds", type=float, default=8.0)
    ap.add_argument("--quick", action="store_true", help="small sizes, 1 round: a smoke test of the harness")
    ap.add_argument("--out", type=Path, default=None,
                    help="report directory (default benchmarks/results; with --quick benchmarks/results/quick)")
    ap.add_argument("--notes", default="", help="free text added to the report")
    ap.add_argument("--cold-memory", action="store_true",
                    help="no page-cache ballast: the brokers write into whatever memory the VM has free")
    ap.add_argument("--report-only", type=Path, metavar="JSON",
                    help="rewrite the report from a saved cluster_bench.json, without measuring")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.records, args.latency_rate, args.latency_seconds = 1, 20_000, 500, 2.0
    if args.out is None:
        args.out = HERE / "results" / "quick" if args.quick else HERE / "results"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report_only:
        results = json.loads(args.report_only.read_text())
        rows = medians(results)
        print(text_table(rows))
        (args.out / "cluster_bench.md").write_text(markdown(results, rows))
        return 0
    if shutil.which("etcd") is None:
        print("etcd not on PATH: apt-get install etcd-server (or `make tools` as root)", file=sys.stderr)
        return 2
    results: dict[str, Any] = {"meta": {
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "commit": git_commit(), "host": platform.node(),
        "cpus": os.cpu_count(), "python": platform.python_version(),
        "client": confluent_kafka.__version__, "rounds": args.rounds, "records": args.records, "size": args.size,
        "latency_rate": args.latency_rate, "latency_seconds": args.latency_seconds, "notes": args.notes,
    }, "rounds": []}
    results["meta"]["warm_memory"] = not args.cold_memory
    starters = {"single": start_single, "cluster": start_cluster}
    with tempfile.TemporaryDirectory(prefix="cluster-bench-ballast-") as ballast_dir, Ballast(ballast_dir) as ballast:
        for i in range(args.rounds):
            order = SETUPS if i % 2 == 0 else SETUPS[::-1]
            rnd: dict[str, Any] = {}
            for name in order:
                with tempfile.TemporaryDirectory(prefix=f"cluster-bench-{name}-") as tmp:
                    print(f"round {i + 1}/{args.rounds}: {name}", flush=True)
                    warm = None if args.cold_memory else ballast.top_up()
                    load = os.getloadavg()[0]  # other processes on a shared machine skew every figure
                    setup = starters[name](Path(tmp))
                    try:
                        rnd[name] = run_setup(setup, args)
                        rnd[name]["load_avg_1m"] = load
                        rnd[name]["ballast"] = warm
                    finally:
                        setup.stop()
            results["rounds"].append(rnd)
    rows = medians(results)
    print(text_table(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cluster_bench.json").write_text(json.dumps(results, indent=1))
    (args.out / "cluster_bench.md").write_text(markdown(results, rows))
    print(f"report: {args.out / 'cluster_bench.md'}")
    failed = any("error" in fig for r in results["rounds"] for s in r.values() for fig in s.values()
                 if isinstance(fig, dict))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
