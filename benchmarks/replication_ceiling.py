"""The ceiling of issue 31's RF=3 produce targets: the same clients against null brokers that replicate.

    .venv/bin/python benchmarks/replication_ceiling.py [--rounds 3] [--records 1000000]
        [--c-records 300000] [--out benchmarks/results]

Issue 31 asks RF=3 acks=all produce to reach 0.6 of one node (Python client, as cluster_bench.py
measures it) and 0.6 of RF=1 on the same cluster (C client, as cluster_rf_bench.py measures it).
This measures what those ratios can be at most on this machine, with brokers that do nothing but
move the bytes (benchmarks/null_replicating_broker.py): in each round, alternating the order, the
same workloads as those two benchmarks run against

- ``single``: one null broker (null_broker.py: answers, stores nothing);
- ``rf1``: three of them posing as one cluster (partition p led by node p % 3), RF=1;
- ``rf3``: the same three with RF=3: each leader forwards every produced byte to its two
  followers and answers acks=all once both have all of it; the followers only receive.

Each setup is started fresh for each workload. The figures: MB/s of acks=all produce (Python
client: lib_workloads.produce, as cluster_bench; C client: rdkafka_performance, as
cluster_rf_bench), the brokers' CPU per MB produced, medians and paired ratios (median of the
per-round ratios). With the latest cluster_bench.json / cluster_rf_bench.json present, kbroker's
own ratios are printed beside them. No disk is written, so there is no page-cache ballast. Every load
is bounded in records and time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

import lib_cclient  # noqa: E402
import lib_workloads as wl  # noqa: E402
import null_replicating_broker as nr  # noqa: E402
import txn_bench  # noqa: E402
from lib_meter import process_cpu  # noqa: E402
from null_broker import NullBrokerProcess  # noqa: E402

SETUPS = ("single", "rf1", "rf3")


def start(setup: str) -> list[NullBrokerProcess]:
    if setup == "single":
        p = NullBrokerProcess(1024)
        p.start()
        return [p]
    return nr.start_cluster(3, 3 if setup == "rf3" else 1)


def measured(setup: str, run: Callable[[str], dict[str, Any]], mb: float, *, consume: bool = False
             ) -> dict[str, float]:
    """Start ``setup``, run one produce load on it (``run(bootstrap)``: the workload's figures),
    with ``consume`` read the topic back (lib_workloads.consume, as cluster_bench), stop it; MB/s,
    the brokers' CPU per MB produced and the machine's busy cores during the produce (of 2 here: at
    2 the load is bound by the machine's CPU, not by waiting)."""
    procs = start(setup)
    try:
        pids = [p.pid for p in procs if p.pid is not None]
        bootstrap = ",".join(p.bootstrap for p in procs)
        cpu0 = sum(process_cpu(p) or 0.0 for p in pids)
        fig = run(bootstrap)
        cpu = sum(process_cpu(p) or 0.0 for p in pids) - cpu0
        usage = fig["usage"]
        out = {"mb_s": fig["mb_per_s"], "cpu_ms_per_mb": cpu * 1e3 / mb,
               "machine_cores": usage["machine_cpu"] / usage["wall"]}
        if consume:
            out["consume_mb_s"] = wl.consume(bootstrap, None, topic=fig["topic"], expected=fig["records_total"],
                                             size=1024)["mb_per_s"]
    finally:
        for p in procs:
            p.stop()
    return out


def python_produce(records: int) -> Callable[[str], dict[str, Any]]:
    return lambda bootstrap: wl.produce(bootstrap, None, records=records, size=1024, acks="all")


def c_produce(records: int) -> Callable[[str], dict[str, Any]]:
    return lambda bootstrap: lib_cclient.produce(bootstrap, None, records=records)


def measured_txn(setup: str, args: argparse.Namespace) -> dict[str, float]:
    """cluster_txn_bench's two phases (txn_bench.py's, unchanged) against fresh null brokers with
    groups and transactions: one (null_txn_broker.py) or three replicating ones (``rf3``)."""
    if setup == "single":
        procs = [NullBrokerProcess(100, script=HERE / "null_txn_broker.py")]
        procs[0].start()
    else:
        procs = nr.start_cluster(3, 3, value_size=100, transactions=True)
    try:
        pids = [p.pid for p in procs if p.pid is not None]
        bootstrap = ",".join(p.bootstrap for p in procs)
        topic = wl.unique("ceiling-txn")
        src, dst = f"{topic}-in", f"{topic}-out"
        txn_bench.create_topics(bootstrap, topic, src, dst)
        txn_bench.warm_up(bootstrap, topic, None)
        cpu0 = sum(process_cpu(p) or 0.0 for p in pids)
        commits = txn_bench.bench_commits(bootstrap, topic, args.transactions, None)
        cpu = sum(process_cpu(p) or 0.0 for p in pids) - cpu0
        ctp = txn_bench.bench_ctp(bootstrap, src, dst, args.ctp_records, args.ctp_batch, None)
    finally:
        for p in procs:
            p.stop()
    return {"commits_per_s": commits.rate, "cpu_ms_per_commit": cpu * 1e3 / args.transactions,
            "ctp_records_per_s": ctp.records / ctp.seconds}


def kbroker_ratios(reports: Path) -> dict[str, Any]:
    """kbroker's own ratios from the latest cluster_bench / cluster_rf_bench reports, when present."""
    found: dict[str, Any] = {}
    try:
        cb = json.loads((reports / "cluster_bench.json").read_text())
        pairs = [(r["single"]["produce"], r["cluster"]["produce"]) for r in cb["rounds"]]
        found["python_rf3_over_single"] = statistics.median(c["mb_per_s"] / s["mb_per_s"] for s, c in pairs)
        found["cpu_rf3_over_single"] = statistics.median(c["brokers_cpu_per_mb"] / s["brokers_cpu_per_mb"]
                                                         for s, c in pairs)
        found["cpu_per_mb"] = (statistics.median(s["brokers_cpu_per_mb"] for s, _ in pairs),
                               statistics.median(c["brokers_cpu_per_mb"] for _, c in pairs))
        found["cluster_bench"] = f"{cb['meta']['date']}, {cb['meta']['commit']}"
    except (OSError, KeyError, ValueError, ZeroDivisionError):
        pass
    try:
        tx = json.loads((reports / "cluster_txn_bench.json").read_text())
        found["commits_rf3_over_single"] = statistics.median(
            r["cluster"]["commits"]["commits_per_s"] / r["single"]["commits"]["commits_per_s"] for r in tx["rounds"])
        found["ctp_rf3_over_single"] = statistics.median(
            r["cluster"]["ctp"]["records_per_s"] / r["single"]["ctp"]["records_per_s"] for r in tx["rounds"])
    except (OSError, KeyError, TypeError, ValueError, ZeroDivisionError):
        pass
    try:
        rf = json.loads((reports / "cluster_rf_bench.json").read_text())
        found["c_rf3_over_rf1"] = statistics.median(r["3"]["c_produce_mb_s"] / r["1"]["c_produce_mb_s"]
                                                    for r in rf["rounds"])
    except (OSError, KeyError, ValueError, ZeroDivisionError):
        pass
    return found


def _ratio(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=1_000_000, help="Python-client records (cluster_bench's count)")
    ap.add_argument("--c-records", type=int, default=300_000, help="C-client records (cluster_rf_bench's count)")
    ap.add_argument("--transactions", type=int, default=500, help="commits phase (cluster_txn_bench's count)")
    ap.add_argument("--ctp-records", type=int, default=50_000, help="CTP input records (cluster_txn_bench's count)")
    ap.add_argument("--ctp-batch", type=int, default=500)
    ap.add_argument("--no-txn", action="store_true", help="skip the transactional phases")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--reports", type=Path, default=ROOT / "benchmarks" / "results",
                    help="where kbroker's cluster_bench.json and cluster_rf_bench.json are read from")
    args = ap.parse_args()
    c_client = lib_cclient.available()
    if not c_client:
        print("rdkafka_performance is not built (`make bench` builds it): the C-client rows are skipped")
    load_before = os.getloadavg()[0]
    rounds: list[dict[str, dict[str, dict[str, float]]]] = []
    for i in range(args.rounds):
        order = SETUPS if i % 2 == 0 else tuple(reversed(SETUPS))
        r: dict[str, dict[str, dict[str, float]]] = {"python": {}, "c": {}, "txn": {}}
        for setup in order:
            if setup != "rf1":  # cluster_bench's pair: one node against RF=3
                r["python"][setup] = measured(setup, python_produce(args.records), args.records * 1024 / wl.MB,
                                              consume=True)
                print(f"round {i + 1}: python {setup} {json.dumps(r['python'][setup])}", flush=True)
            if c_client and setup != "single":  # cluster_rf_bench's pair: RF=1 against RF=3, one cluster
                r["c"][setup] = measured(setup, c_produce(args.c_records), args.c_records * 1024 / wl.MB)
                print(f"round {i + 1}: c {setup} {json.dumps(r['c'][setup])}", flush=True)
            if not args.no_txn and setup != "rf1":  # cluster_txn_bench's pair
                r["txn"][setup] = measured_txn(setup, args)
                print(f"round {i + 1}: txn {setup} {json.dumps(r['txn'][setup])}", flush=True)
        rounds.append(r)

    def med(client: str, setup: str, fig: str) -> float:
        return statistics.median(r[client][setup][fig] for r in rounds)

    def paired(client: str, a: str, b: str, fig: str) -> float:
        return statistics.median(r[client][b][fig] / r[client][a][fig] for r in rounds)

    rows = [("Python client, RF=3 / one node (cluster_bench)", "python", "single", "rf3")]
    if c_client:
        rows.append(("C client, RF=3 / RF=1 on one cluster (cluster_rf_bench)", "c", "rf1", "rf3"))
    kb = kbroker_ratios(args.reports)
    kb_key = {"python": "python_rf3_over_single", "c": "c_rf3_over_rf1"}
    table = []
    for label, client, a, b in rows:
        per_round = "; ".join(f"{r[client][a]['mb_s']:,.0f} / {r[client][b]['mb_s']:,.0f}" for r in rounds)
        kbr = kb.get(kb_key[client])
        table.append((label, med(client, a, "mb_s"), med(client, b, "mb_s"), paired(client, a, b, "mb_s"),
                      med(client, a, "cpu_ms_per_mb"), med(client, b, "cpu_ms_per_mb"),
                      paired(client, a, b, "cpu_ms_per_mb"), kbr, per_round,
                      med(client, a, "machine_cores"), med(client, b, "machine_cores")))
    consume = None
    if rounds and all("consume_mb_s" in r["python"].get(k, {}) for r in rounds for k in ("single", "rf3")):
        consume = (med("python", "single", "consume_mb_s"), med("python", "rf3", "consume_mb_s"),
                   paired("python", "single", "rf3", "consume_mb_s"),
                   ", ".join(f"{r['python']['rf3']['consume_mb_s'] / r['python']['single']['consume_mb_s']:.2f}"
                             for r in rounds))
        print(f"Python consume, three nodes / one: {consume[0]:,.0f} -> {consume[1]:,.0f} MB/s, "
              f"paired {consume[2]:.2f} (per round {consume[3]})")
    for t in table:
        print(f"{t[0]}: {t[1]:,.0f} -> {t[2]:,.0f} MB/s, paired {t[3]:.2f} (kbroker "
              f"{_ratio(t[7])}); CPU per MB {t[4]:.2f} -> {t[5]:.2f} ({t[6]:.1f}x)")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "replication_ceiling.json").write_text(json.dumps({
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "records": args.records,
        "c_records": args.c_records, "load_avg_1m_before": load_before, "rounds": rounds, "kbroker": kb}, indent=1))
    lines = [
        "# replication_ceiling: RF=3 produce against null brokers that replicate", "",
        f"`benchmarks/replication_ceiling.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{os.cpu_count()} CPUs, {len(rounds)} alternating rounds; acks=all, 4 partitions, 1 KiB values; "
        f"Python client {args.records:,} records (lib_workloads.produce), C client {args.c_records:,} "
        f"(rdkafka_performance). 1-minute load average before: {load_before:.1f}.", "",
        "Null brokers (null_broker.py, null_replicating_broker.py) store nothing; at RF=3 each leader "
        "forwards every produced byte to its two followers, which only receive it, and answers acks=all "
        "once both have all of it. So the ratios below are the most any 3-process RF=3 broker can reach "
        "against one node (or RF=1) on this machine with these clients.", "",
        "| ratio (issue 31 target ≥ 0.6) | null: base MB/s | null: RF=3 MB/s | null: paired ratio | "
        "null brokers' CPU per MB: base / RF=3 | machine's busy cores: base / RF=3 | "
        "kbroker's ratio (latest report) | per round (base / RF=3) |",
        "|---|---:|---:|---:|---|---|---:|---|",
        *(f"| {t[0]} | {t[1]:,.0f} | {t[2]:,.0f} | **{t[3]:.2f}** | {t[4]:.2f} / {t[5]:.2f} ms ({t[6]:.1f}x) | "
          f"{t[9]:.2f} / {t[10]:.2f} | {_ratio(t[7])} | {t[8]} |" for t in table), ""]
    if consume is not None:
        lines += [f"Consume (Python client, lib_workloads.consume, cluster_bench's reader of the produced "
                  f"topic; partitions read from their leaders): one null broker {consume[0]:,.0f} MB/s, "
                  f"three {consume[1]:,.0f}; paired ratio **{consume[2]:.2f}** (per round {consume[3]}); "
                  f"issue 31's target for kbroker's cluster / single consume: ≥ 0.8 in every round.", ""]
    if not args.no_txn:
        txn_rows = [(label, med("txn", "single", fig), med("txn", "rf3", fig), paired("txn", "single", "rf3", fig),
                     kb.get(key), "; ".join(f"{r['txn']['single'][fig]:,.0f} / {r['txn']['rf3'][fig]:,.0f}"
                                            for r in rounds))
                    for label, fig, key in (
                        ("commits/s, RF=3 / one node (≥ 0.5)", "commits_per_s", "commits_rf3_over_single"),
                        ("consume-transform-produce records/s, RF=3 / one node (≥ 0.5)", "ctp_records_per_s",
                         "ctp_rf3_over_single"))]
        for t in txn_rows:
            print(f"{t[0]}: {t[1]:,.0f} -> {t[2]:,.0f}, paired {t[3]:.2f} (kbroker {_ratio(t[4])})")
        lines += [
            f"Transactions (cluster_txn_bench's phases, txn_bench.py unchanged: {args.transactions} commits of 10 "
            f"records x 100 B over 4 partitions; consume-transform-produce of {args.ctp_records:,} records, "
            f"<= {args.ctp_batch} per transaction) against null brokers with groups and transactions: one "
            "(null_txn_broker.py) or three replicating ones whose coordinator writes, markers and "
            "CompleteCommit are replicated before they are answered (ReplicatingNullTxnBroker):", "",
            "| ratio (issue 31 target) | null: one node | null: RF=3 | null: paired ratio | kbroker's ratio "
            "(latest cluster_txn_bench) | per round (one / RF=3) |",
            "|---|---:|---:|---:|---:|---|",
            *(f"| {t[0]} | {t[1]:,.0f} | {t[2]:,.0f} | **{t[3]:.2f}** | {_ratio(t[4])} | {t[5]} |" for t in txn_rows),
            "", f"Null brokers' CPU per commit: one node {med('txn', 'single', 'cpu_ms_per_commit'):.2f} ms, "
            f"RF=3 {med('txn', 'rf3', 'cpu_ms_per_commit'):.2f} ms.", ""]
    if "cpu_per_mb" in kb:
        s, c = kb["cpu_per_mb"]
        lines += [f"kbroker (cluster_bench, {kb['cluster_bench']}): brokers' CPU per MB {s:.1f} (one node) / "
                  f"{c:.1f} (RF=3), {kb['cpu_rf3_over_single']:.1f}x paired.", ""]
    (args.out / "replication_ceiling.md").write_text("\n".join(lines))
    print(f"wrote {args.out / 'replication_ceiling.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
