"""`make bench`: kbroker vs Tansu, side by side, same clients, same settings, and the null-broker ceiling.

    .venv/bin/python benchmarks/bench.py [--rounds 5] [--quick] [--only produce,consume,latency,txn,ctp,cclient]
                                         [--brokers kbroker,tansu,null] [--out benchmarks/results]

Each round starts a fresh kbroker (subprocess, data in a temp dir), a fresh Tansu (memory://
storage) and a fresh null broker (null_txn_broker.py: null_broker.py's answers with pre-built
responses, storing nothing, plus groups and transactions kept in memory; the ceiling of what the
client and the machine can do), then runs every workload against each broker back to back,
alternating the order from round to round, so slow drifts on a shared machine hit all alike. The
null broker runs every workload but latency (produce, consume, txn, ctp, cclient). Reported
figures are medians over rounds. Before each workload a page-cache ballast (lib_page_cache.py) fills
the memory the VM has free, so the logs are written into memory in use (``--cold-memory`` and ``--quick``: not).
Prints a table and writes README.md, latest.json and PNG charts to
the output directory (with --quick: benchmarks/results/quick/, gitignored, so a smoke run never
overwrites the committed report). The confluent-kafka workloads are in lib_workloads.py, the C client
(librdkafka's rdkafka_performance, built by `make bench`) in lib_cclient.py, CPU accounting in
lib_meter.py, the report in lib_report.py.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
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
import lib_cclient  # noqa: E402
import lib_report  # noqa: E402
import lib_txn  # noqa: E402
import lib_workloads as wl  # noqa: E402
from lib_page_cache import Ballast  # noqa: E402
from null_broker import NullBrokerProcess  # noqa: E402
from tansu import TansuProcess  # noqa: E402

from tests.helpers.broker_proc import BrokerProcess  # noqa: E402

WORKLOADS = ("produce", "consume", "latency", "txn", "ctp", "cclient")
# The null broker keeps no records, so an end-to-end latency means nothing on it; the rest it serves
# (null_txn_broker.py adds the group and transaction APIs that txn and ctp need).
NULL_WORKLOADS = ("produce", "consume", "txn", "ctp", "cclient")
NULL_SCRIPT = HERE / "null_txn_broker.py"


class Broker:
    """A started broker under test: its name, bootstrap address, pid and stop()."""

    def __init__(self, name: str, bootstrap: str, pid: int | None, stop: Callable[[], None],
                 log: Callable[[], str]) -> None:
        self.name, self.bootstrap, self.pid, self.stop, self.log = name, bootstrap, pid, stop, log


def start_kbroker(data_root: Path) -> Broker:
    data = Path(tempfile.mkdtemp(prefix="kbroker-bench-", dir=data_root)) / "data"
    # Kafka's defaults otherwise (BrokerProcess only zeroes group.initial.rebalance.delay.ms, which
    # falls outside every measured phase).
    b = BrokerProcess(data, overrides={"num.partitions": str(wl.PARTITIONS)})
    b.start(60)

    def stop() -> None:
        try:
            b.stop()
        finally:
            b.kill()
            subprocess.run(["rm", "-rf", str(data.parent)], check=False)

    return Broker("kbroker", b.bootstrap, b.proc.pid if b.proc else None, stop, b.log_tail)


def start_tansu() -> Broker:
    t = TansuProcess()
    t.start()

    def log() -> str:
        try:
            return "\n".join(t.log_path.read_text(errors="replace").splitlines()[-40:])
        except OSError:
            return ""

    return Broker("tansu", t.bootstrap, t.pid, t.stop, log)


def start_null(size: int) -> Broker:
    n = NullBrokerProcess(value_size=size, script=NULL_SCRIPT)
    n.start()
    return Broker("null", n.bootstrap, n.pid, n.stop, n.log_tail)


# The produce family: key -> lib_workloads.produce options. The compressed variants measure what the
# broker's record validation (decompress and walk every record) costs.
PRODUCE_VARIANTS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("produce_acks1", {"acks": "1"}),
    ("produce_acksall", {"acks": "all"}),
    ("produce_idempotent", {"acks": "all", "idempotent": True}),
    ("produce_lz4", {"acks": "all", "compression": "lz4"}),
    ("produce_zstd", {"acks": "all", "compression": "zstd"}),
)


def run_workloads(broker: Broker, which: str, args: argparse.Namespace, state: dict[str, Any],
                  ballast: Ballast | None = None) -> dict[str, Any]:
    """Run one workload family against one broker; returns {workload_key: figures}. ``ballast``:
    topped up before each workload."""
    bs, pid, size = broker.bootstrap, broker.pid, args.size
    if ballast is not None:
        ballast.top_up()
    if which == "produce":
        out = {}
        for i, (key, kw) in enumerate(PRODUCE_VARIANTS):
            if ballast is not None and i:
                ballast.top_up()
            try:
                out[key] = wl.produce(bs, pid, records=args.records, size=size, **kw)
            except Exception as e:  # one variant (e.g. a codec a broker lacks) must not lose the others
                if key == "produce_acksall":
                    raise
                traceback.print_exc()
                out[key] = {"error": f"{type(e).__name__}: {e}"}
        state["full_topic"] = (out["produce_acksall"]["topic"], out["produce_acksall"]["records_total"])
        return out
    if which == "consume":
        if "full_topic" not in state:  # --only consume: fill a topic first
            r = wl.produce(bs, pid, records=args.records, size=size, acks="all")
            state["full_topic"] = (r["topic"], r["records_total"])
        topic, n = state["full_topic"]
        return {"consume": wl.consume(bs, pid, topic=topic, expected=n, size=size)}
    if which == "latency":
        return {"latency": wl.latency(bs, pid, rate=args.latency_rate, seconds=args.latency_seconds, size=size,
                                      linger_ms=args.latency_linger_ms)}
    if which == "txn":
        return {"txn": lib_txn.transactions(bs, pid, count=args.txn_count, seconds=args.txn_seconds, size=size)}
    if which == "ctp":
        return {"ctp": lib_txn.consume_transform_produce(bs, pid, records=args.ctp_records, batch=args.ctp_batch,
                                                         size=size)}
    if which == "cclient":
        return lib_cclient.produce_consume(bs, pid, records=args.c_records, size=size)
    raise ValueError(which)


def brief(key: str, fig: dict[str, Any]) -> str:
    if "error" in fig:
        return f"{key}: FAILED {fig['error']}"
    u = fig.get("usage", {})
    wall = u.get("wall") or 1

    def share(k: str) -> str:
        return "?" if u.get(k) is None else f"{u[k] / wall:.2f}"

    cpu = (f" [client {share('client_cpu')} main {share('client_main_cpu')} broker {share('broker_cpu')} "
           f"other {share('other_cpu')} cores]")
    if key == "latency":
        return (f"{key}: p50 {fig['p50_ms']:.2f} ms p99 {fig['p99_ms']:.2f} ms p99.9 {fig['p999_ms']:.2f} ms"
                f"{cpu}")
    if key == "txn":
        lat = f" (commit p50 {fig['commit_p50_ms']:.1f} ms p99 {fig['commit_p99_ms']:.1f} ms)" \
            if fig.get("commit_p50_ms") is not None else ""
        return f"{key}: {fig['commits_per_s']:.0f} commits/s{lat}{cpu}"
    parts = [f"{fig['records_per_s']:,.0f} rec/s"]
    if "mb_per_s" in fig:
        parts.append(f"{fig['mb_per_s']:.1f} MB/s")
    return f"{key}: {' '.join(parts)}{cpu}"


def git(*cmd: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *cmd], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except OSError:
        return ""


def meta(args: argparse.Namespace, brokers: list[str]) -> dict[str, Any]:
    tansu_version = "-"
    if "tansu" in brokers:
        tansu_version = TansuProcess().version()
    data_root = args.data_dir or Path(tempfile.gettempdir())
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": git("rev-parse", "--short", "HEAD") or "-",
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "host": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        "cpus": os.cpu_count() or 1,
        "python": platform.python_version(),
        "confluent_kafka": confluent_kafka.__version__,
        "librdkafka": confluent_kafka.libversion()[0],
        "rdkafka_performance": lib_cclient.library_version() if lib_cclient.available() else None,
        "tansu_version": tansu_version,
        "kbroker_data": str(data_root),
        "rounds": args.rounds,
        "brokers": brokers,
        "settings": {"size": args.size, "produce_records": args.records, "latency_rate": args.latency_rate,
                     "latency_seconds": args.latency_seconds, "latency_linger_ms": args.latency_linger_ms,
                     "txn_seconds": args.txn_seconds, "txn_count": args.txn_count, "ctp_records": args.ctp_records,
                     "ctp_batch": args.ctp_batch, "c_records": args.c_records, "txn_source": lib_txn.source(),
                     "txn_value_size": lib_txn.value_size(args.size)},
        "notes": args.notes,
        "nice": -args.nice if args.nice else 0,
        "warm_memory": not (args.cold_memory or args.quick),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default=",".join(WORKLOADS), help=f"comma-separated subset of {WORKLOADS}")
    ap.add_argument("--brokers", default="kbroker,tansu,null",
                    help="comma-separated subset of kbroker,tansu,null (null = the ceiling, null_txn_broker.py)")
    ap.add_argument("--size", type=int, default=1024, help="record value bytes")
    ap.add_argument("--records", type=int, default=300_000, help="records per produce variant")
    ap.add_argument("--latency-rate", type=int, default=5_000)
    ap.add_argument("--latency-seconds", type=float, default=8.0)
    ap.add_argument("--latency-linger-ms", type=float, default=5.0)
    ap.add_argument("--txn-count", type=int, default=1000, help="transactions per run (txn_bench)")
    ap.add_argument("--txn-seconds", type=float, default=5.0, help="duration (fallback without txn_bench)")
    ap.add_argument("--ctp-records", type=int, default=200_000)
    ap.add_argument("--ctp-batch", type=int, default=500, help="most records per CTP transaction")
    ap.add_argument("--c-records", type=int, default=300_000,
                    help="records per rdkafka_performance produce / consume run (cclient)")
    ap.add_argument("--quick", action="store_true", help="small sizes, 1 round: a smoke test of the harness")
    ap.add_argument("--data-dir", type=Path, help="parent dir for kbroker's data (default: the temp dir)")
    ap.add_argument("--out", type=Path, default=None,
                    help="report directory (default benchmarks/results; with --quick benchmarks/results/quick)")
    ap.add_argument("--nice", type=int, default=0, metavar="N",
                    help="run the benchmark and both brokers at nice -N (needs root): on a shared machine "
                         "other processes then take less CPU from the measurement")
    ap.add_argument("--notes", default="", help="free text appended to the report")
    ap.add_argument("--cold-memory", action="store_true",
                    help="no page-cache ballast: kbroker writes its log into whatever memory the VM has free")
    ap.add_argument("--report-only", type=Path, metavar="JSON",
                    help="rewrite the report and charts from a saved latest.json, without measuring")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.records, args.latency_seconds = 1, 30_000, 2.0
        args.txn_seconds, args.txn_count, args.ctp_records = 1.5, 200, 10_000
        args.c_records = 100_000
    if args.out is None:
        # A smoke run must never replace the committed report (benchmarks/results/README.md).
        args.out = HERE / "results" / "quick" if args.quick else HERE / "results"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report_only:
        import json

        results = json.loads(args.report_only.read_text())
        if args.notes:
            results["meta"]["notes"] = args.notes
        print(lib_report.write(results, args.out))
        return 0
    which = [w for w in args.only.split(",") if w]
    unknown = set(which) - set(WORKLOADS)
    if unknown:
        raise SystemExit(f"unknown workloads {sorted(unknown)}; choose from {WORKLOADS}")
    brokers = [b for b in args.brokers.split(",") if b]
    if set(brokers) - {"kbroker", "tansu", "null"}:
        raise SystemExit(f"unknown brokers {sorted(set(brokers) - {'kbroker', 'tansu', 'null'})}")
    if "cclient" in which and not lib_cclient.available():
        print(f"note: {lib_cclient.BINARY} is not built (make bench builds it: benchmarks/build_rdkafka_perf.sh); "
              "skipping the C-client workload", file=sys.stderr)
        which.remove("cclient")
    if args.nice:
        try:
            os.nice(-args.nice)  # inherited by the broker subprocesses started below
        except OSError as e:
            print(f"note: cannot raise priority ({e}); running at normal priority", file=sys.stderr)
            args.nice = 0
    results: dict[str, Any] = {"meta": meta(args, brokers), "rounds": []}
    t_start = time.monotonic()
    data_root = args.data_dir or Path(tempfile.gettempdir())
    data_root.mkdir(parents=True, exist_ok=True)
    ballast_dir = tempfile.TemporaryDirectory(prefix="kbroker-bench-ballast-", dir=data_root)
    ballast = Ballast(ballast_dir.name)
    try:
        run_rounds(args, which, brokers, data_root, results, None if args.cold_memory or args.quick else ballast)
    finally:
        ballast.close()
        ballast_dir.cleanup()
    results["meta"]["elapsed_s"] = time.monotonic() - t_start
    table = lib_report.write(results, args.out)
    print()
    print(table)
    print(f"\nreport: {args.out / 'README.md'} ({time.monotonic() - t_start:.0f} s)")
    return 0


def run_rounds(args: argparse.Namespace, which: list[str], brokers: list[str], data_root: Path,
               results: dict[str, Any], ballast: Ballast | None) -> None:
    for rnd in range(args.rounds):
        order = brokers if rnd % 2 == 0 else brokers[::-1]
        print(f"== round {rnd + 1}/{args.rounds} (order: {', '.join(order)})", flush=True)
        started: dict[str, Broker] = {}
        figures: dict[str, dict[str, Any]] = {b: {} for b in brokers}
        state: dict[str, dict[str, Any]] = {b: {} for b in brokers}
        try:
            for name in order:
                started[name] = (start_kbroker(data_root) if name == "kbroker" else start_tansu() if name == "tansu"
                                 else start_null(args.size))
            for w in which:
                for name in order:
                    if name == "null" and w not in NULL_WORKLOADS:
                        continue
                    try:
                        figs = run_workloads(started[name], w, args, state[name], ballast)
                    except Exception as e:  # record and go on: one failure must not lose the run
                        traceback.print_exc()
                        print(started[name].log(), file=sys.stderr)
                        keys = {"produce": tuple(k for k, _ in PRODUCE_VARIANTS),
                                "cclient": ("c_produce", "c_consume")}.get(w, (w,))
                        figs = {k: {"error": f"{type(e).__name__}: {e}"} for k in keys}
                    figures[name].update(figs)
                    for key, fig in figs.items():
                        print(f"   {name:<8} {brief(key, fig)}", flush=True)
        finally:
            for b in started.values():
                b.stop()
        results["rounds"].append(figures)


if __name__ == "__main__":
    sys.exit(main())
