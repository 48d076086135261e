"""Transactions on 3 brokers with RF=3 against one broker (issue 15, acceptance 6), side by side.

    .venv/bin/python benchmarks/cluster_txn_bench.py [--rounds 3] [--transactions N]
                                                     [--ctp-records N] [--ctp-batch N] [--quick] [--out DIR]

Each round starts, one after the other (order alternating by round, so a slow drift of the shared
machine hits both alike), the two setups of benchmarks/cluster_bench.py:
- **single**: one kbroker in single-node mode, topics RF=1;
- **cluster**: a real etcd and 3 kbroker processes on 127.0.0.1, topics RF=3 with
  min.insync.replicas=2; ``__transaction_state`` / ``__consumer_offsets`` with their default RF 3
  (so every coordinator write waits for the ISR, and markers cross brokers);
and runs benchmarks/txn_bench.py's phases against each, unchanged:
- warm-up (internal topics created, one transaction, one offset lookup; not measured);
- **commits/s**: one transactional producer, N transactions of 10 records x 100 B over 4 partitions,
  begin -> produce -> commit_transaction;
- **consume-transform-produce records/s**: a 4-partition input read by a group member, each poll
  (<= batch records) one transaction writing to a 4-partition output with send_offsets_to_transaction,
  from the first polled records until every input offset is committed (verified).
CPU = user+system seconds of all broker processes over each phase. Medians over rounds are printed
and written to ``cluster_txn_bench.md`` / ``.json`` under benchmarks/results/ (``--quick``:
benchmarks/results/quick/, which git ignores). A phase that fails is reported and the others run.
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
from cluster_bench import Setup, start_cluster, start_single  # noqa: E402
from lib_meter import process_cpu  # noqa: E402
from lib_report import fmt  # noqa: E402

from benchmarks import txn_bench  # noqa: E402
from benchmarks.produce_consume import git_commit  # noqa: E402

SETUPS = ("single", "cluster")
METRICS = (  # (phase, field, label, unit, higher is better)
    ("commits", "commits_per_s", "transactional commits (10 records)", "commits/s", True),
    ("commits", "p50_ms", "commit latency p50", "ms", False),
    ("commits", "p99_ms", "commit latency p99", "ms", False),
    ("commits", "cpu_ms_per_commit", "brokers' CPU per commit", "CPU-ms", False),
    ("ctp", "records_per_s", "consume-transform-produce", "records/s", True),
    ("ctp", "txn_per_s", "consume-transform-produce", "txn/s", True),
    ("ctp", "cpu_ms_per_krecord", "brokers' CPU per 1,000 CTP records (input included)", "CPU-ms", False),
)


def brokers_cpu(setup: Setup) -> float:
    return sum(process_cpu(p) or 0.0 for p in setup.pids)


def run_setup(setup: Setup, args: argparse.Namespace) -> dict[str, Any]:
    stamp = int(time.time() * 1000)
    topic, src, dst = f"txnbench-{stamp}", f"txnbench-in-{stamp}", f"txnbench-out-{stamp}"
    for name in (topic, src, dst):
        setup.create_topic(setup.bootstrap, name, txn_bench.PARTITIONS)
    out: dict[str, Any] = {}

    def measured(name: str, fn: Callable[[], dict[str, Any]]) -> None:
        cpu0 = brokers_cpu(setup)
        try:
            fig = fn()
        except (Exception, SystemExit) as e:  # txn_bench reports a failed check with SystemExit
            traceback.print_exc()
            out[name] = {"error": f"{type(e).__name__}: {e}"}
            return
        fig["brokers_cpu"] = brokers_cpu(setup) - cpu0  # the phase's warm-up included: a few %
        out[name] = fig

    try:
        txn_bench.warm_up(setup.bootstrap, topic, None)
    except Exception as e:  # noqa: BLE001 - reported; the phases say what works
        out["warm_up_error"] = f"{type(e).__name__}: {e}"

    def commits() -> dict[str, Any]:
        ph = txn_bench.bench_commits(setup.bootstrap, topic, args.transactions, None)
        print(f"  {setup.name}: {ph.describe()}", flush=True)
        return {"transactions": ph.transactions, "seconds": ph.seconds, "commits_per_s": ph.rate,
                "p50_ms": ph.percentile(0.5), "p99_ms": ph.percentile(0.99)}

    def ctp() -> dict[str, Any]:
        ph = txn_bench.bench_ctp(setup.bootstrap, src, dst, args.ctp_records, args.ctp_batch, None)
        print(f"  {setup.name}: {ph.describe(args.ctp_batch)}", flush=True)
        return {"records": ph.records, "transactions": ph.transactions, "seconds": ph.seconds,
                "records_per_s": ph.records / ph.seconds, "txn_per_s": ph.transactions / ph.seconds}

    measured("commits", commits)
    if "error" not in out["commits"]:
        out["commits"]["cpu_ms_per_commit"] = out["commits"]["brokers_cpu"] * 1e3 / args.transactions
    measured("ctp", ctp)
    if "error" not in out["ctp"]:
        # CPU-ms per 1,000 records; the phase's CPU includes producing its input (not timed).
        out["ctp"]["cpu_ms_per_krecord"] = out["ctp"]["brokers_cpu"] * 1e6 / args.ctp_records
    return out


def medians(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for phase, field, label, unit, higher in METRICS:
        row: dict[str, Any] = {"label": label, "unit": unit, "higher": higher}
        for s in SETUPS:
            xs = [r[s][phase][field] for r in results["rounds"]
                  if isinstance(r.get(s, {}).get(phase), dict) and r[s][phase].get(field) is not None]
            row[s] = statistics.median(xs) if xs else None
            row[f"{s}_all"] = xs
        row["ratio"] = row["cluster"] / row["single"] if row["single"] and row["cluster"] is not None else None
        rows.append(row)
    return rows


def text_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'metric':<38} {'unit':<10} {'single':>10} {'RF=3 x3':>10} {'cluster/single':>15}", "-" * 87]
    for r in rows:
        ratio = "–" if r["ratio"] is None else f"{r['ratio']:.2f}"
        lines.append(f"{r['label']:<38} {r['unit']:<10} {fmt(r['single'], r['unit']):>10} "
                     f"{fmt(r['cluster'], r['unit']):>10} {ratio:>15}")
    return "\n".join(lines)


def markdown(results: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    m = results["meta"]
    errors = [f"- round {i + 1}, {s}, {w}: {fig['error']}" for i, r in enumerate(results["rounds"])
              for s in SETUPS for w, fig in r.get(s, {}).items() if isinstance(fig, dict) and "error" in fig]
    table = ["| metric | unit | single node (RF=1) | 3 brokers, RF=3 | cluster / single | per round (single; cluster) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        ratio = "–" if r["ratio"] is None else f"{r['ratio']:.2f}"
        per = "; ".join(", ".join(fmt(x, r["unit"]) for x in r[f"{s}_all"]) or "–" for s in SETUPS)
        table.append(f"| {r['label']} | {r['unit']} | {fmt(r['single'], r['unit'])} | "
                     f"{fmt(r['cluster'], r['unit'])} | {ratio} | {per} |")
    return "\n".join([
        "# cluster_txn_bench: transactions on 3 brokers with RF=3 against one broker",
        "",
        f"`benchmarks/cluster_txn_bench.py`, {m['date']} UTC, commit {m['commit']}, {m['host']} "
        f"({m['cpus']} CPUs), Python {m['python']}, confluent-kafka {m['client']}; {m['rounds']} round(s), medians. "
        f"Commits: {m['transactions']:,} transactions of 10 records x 100 B over 4 partitions, one producer. "
        f"CTP: {m['ctp_records']:,} input records, <= {m['ctp_batch']} per transaction, 4 partitions in and out "
        "(benchmarks/txn_bench.py's phases, unchanged).",
        "",
        "Single node: one kbroker, no etcd, RF=1. Cluster: etcd + 3 kbroker processes on the same host, "
        "topics RF=3 with min.insync.replicas=2, __transaction_state and __consumer_offsets RF=3 "
        "(min ISR 2): every coordinator write waits for a follower fetch, and markers go to partition "
        "leaders on other brokers. Brokers, client and etcd share the machine's cores.",
        "",
        *table,
        "",
        "1-minute load average before each run (" + "; ".join(
            f"round {i + 1}: " + ", ".join(f"{s} {r[s]['load_avg_1m']:.1f}" for s in SETUPS if s in r)
            for i, r in enumerate(results["rounds"])) + ").",
        "",
        *(["Failed phases:", "", *errors, ""] if errors else []),
        f"Notes: {m['notes']}" if m.get("notes") else "",
    ]) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--transactions", type=int, default=500, help="transactions in the commits phase")
    ap.add_argument("--ctp-records", type=int, default=50_000, help="input records of the CTP phase")
    ap.add_argument("--ctp-batch", type=int, default=500, help="most records per CTP transaction")
    ap.add_argument("--quick", action="store_true", help="small sizes, 1 round: a smoke test of the harness")
    ap.add_argument("--out", type=Path, default=None,
                    help="report directory (default benchmarks/results; with --quick benchmarks/results/quick)")
    ap.add_argument("--notes", default="", help="free text added to the report")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.transactions, args.ctp_records = 1, 100, 5_000
    if args.out is None:
        args.out = HERE / "results" / "quick" if args.quick else HERE / "results"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if shutil.which("etcd") is None:
        print("etcd not on PATH: apt-get install etcd-server (or `make tools` as root)", file=sys.stderr)
        return 2
    results: dict[str, Any] = {"meta": {
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "commit": git_commit(), "host": platform.node(),
        "cpus": os.cpu_count(), "python": platform.python_version(), "client": confluent_kafka.__version__,
        "rounds": args.rounds, "transactions": args.transactions, "ctp_records": args.ctp_records,
        "ctp_batch": args.ctp_batch, "notes": args.notes,
    }, "rounds": []}
    starters = {"single": start_single, "cluster": start_cluster}
    for i in range(args.rounds):
        order = SETUPS if i % 2 == 0 else SETUPS[::-1]
        rnd: dict[str, Any] = {}
        for name in order:
            with tempfile.TemporaryDirectory(prefix=f"cluster-txn-bench-{name}-") as tmp:
                print(f"round {i + 1}/{args.rounds}: {name}", flush=True)
                load = os.getloadavg()[0]
                setup = starters[name](Path(tmp))
                try:
                    rnd[name] = run_setup(setup, args)
                finally:
                    setup.stop()
                rnd[name]["load_avg_1m"] = load
        results["rounds"].append(rnd)
    rows = medians(results)
    print(text_table(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cluster_txn_bench.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "cluster_txn_bench.md").write_text(markdown(results, rows))
    print(f"report: {args.out / 'cluster_txn_bench.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
