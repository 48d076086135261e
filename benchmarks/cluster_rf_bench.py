"""RF=3 against RF=1 on the same 3-broker cluster with librdkafka's C client (issue 31's first target).

    .venv/bin/python benchmarks/cluster_rf_bench.py [--rounds 3] [--records 300000] [--out benchmarks/results]

Starts etcd and 3 kbroker processes (cluster_bench.start_cluster), then in alternating rounds (the
order flips every round, so load drift hits both alike) produces ``--records`` x 1 KiB with
``rdkafka_performance`` (acks=all, 4 partitions; ``make bench`` builds it) into a fresh topic with
RF=1 and into one with RF=3 (min.insync.replicas=2), and reads each back. Prints the medians and the
paired ratio (RF=3 / RF=1) and writes ``cluster_rf_bench.md`` / ``.json``. Every load is bounded in
records and time (lib_cclient's timeouts). Before each load a page-cache ballast (lib_page_cache.py)
fills the memory the VM has free, so the logs are written into memory in use (``--cold-memory``:
not; on this VM the first write into memory new to it costs ~2.5 CPU-ms per MB, and RF=3 writes
each byte three times).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

import lib_cclient  # noqa: E402
from cluster_bench import start_cluster, topic_factory  # noqa: E402
from lib_meter import process_cpu  # noqa: E402
from lib_page_cache import Ballast  # noqa: E402

FIGURES = ("c_produce_mb_s", "c_consume_mb_s", "produce_broker_cpu_ms_per_mb", "produce_cores_busy")
UNITS = {"c_produce_mb_s": "MB/s", "c_consume_mb_s": "MB/s", "produce_broker_cpu_ms_per_mb": "CPU-ms per MB",
         "produce_cores_busy": "cores"}


def one_round(bootstrap: str, pids: list[int], rf: int, records: int) -> dict[str, float]:
    """One produce and one consume of ``records`` x 1 KiB into a fresh topic with replication factor
    ``rf``; with the produce's CPU: the three brokers' CPU-ms per MB, and how many of the machine's
    cores the brokers and the tool kept busy (below 2 on this machine: something other than CPU
    limits the run, e.g. the replication round trips an acks=all write waits for)."""
    create = topic_factory(rf, {"min.insync.replicas": "2"} if rf > 1 else {})
    start: list[float] = []

    def create_then_start_meter(bootstrap: str, topic: str, partitions: int) -> None:
        create(bootstrap, topic, partitions)  # the topic ready (cluster_bench.topic_factory): not metered
        start.extend((sum(process_cpu(p) or 0.0 for p in pids), time.perf_counter()))

    lib_cclient.create_topic = create_then_start_meter
    prod = lib_cclient.produce(bootstrap, None, records=records)
    wall = time.perf_counter() - start[1]
    brokers = sum(process_cpu(p) or 0.0 for p in pids) - start[0]
    cons = lib_cclient.consume(bootstrap, None, prod["topic"], records=records)
    mb = records * 1024 / 1e6
    return {"c_produce_mb_s": prod["mb_per_s"], "c_consume_mb_s": cons["mb_per_s"],
            "produce_broker_cpu_ms_per_mb": brokers * 1000 / mb,
            "produce_cores_busy": (brokers + prod["usage"]["client_cpu"]) / wall}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--cold-memory", action="store_true", help="no page-cache ballast before each load")
    args = ap.parse_args()
    if not lib_cclient.available():
        print("rdkafka_performance is not built: run `make bench` once (benchmarks/build_rdkafka_perf.sh)")
        return 2
    rounds: list[dict[int, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="kbroker-rf-") as tmp, Ballast(tmp) as ballast:
        setup = start_cluster(Path(tmp))
        try:
            for i in range(args.rounds):
                order = (1, 3) if i % 2 == 0 else (3, 1)
                r: dict[int, dict[str, float]] = {}
                for rf in order:
                    if not args.cold_memory:
                        ballast.top_up()
                    r[rf] = one_round(setup.bootstrap, setup.pids, rf, args.records)
                    print(f"round {i + 1}: RF={rf} {json.dumps(r[rf])}", flush=True)
                rounds.append(r)
        finally:
            setup.stop()
    rows = []
    for fig in FIGURES:
        one = statistics.median(r[1][fig] for r in rounds)
        three = statistics.median(r[3][fig] for r in rounds)
        paired = statistics.median(r[3][fig] / r[1][fig] for r in rounds)
        rows.append((fig, one, three, three / one, paired))
        print(f"{fig:16s} RF=1 {one:8.1f}  RF=3 {three:8.1f}  ratio {three / one:.2f}  paired {paired:.2f}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cluster_rf_bench.json").write_text(json.dumps({"records": args.records, "rounds": [
        {str(k): v for k, v in r.items()} for r in rounds]}, indent=1))
    lines = [
        "# RF=3 against RF=1 on one 3-broker cluster (C client)", "",
        f"`benchmarks/cluster_rf_bench.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{len(rounds)} alternating rounds, {args.records:,} x 1 KiB, acks=all, 4 partitions, librdkafka "
        f"{lib_cclient.library_version() or '?'} (rdkafka_performance). Memory: "
        + ("cold (`--cold-memory`)." if args.cold_memory else
           "a page-cache ballast (lib_page_cache.py) filled what the VM had free before each load."), "",
        "| figure | unit | RF=1 | RF=3 | ratio of medians | paired ratio |", "|---|---|---|---|---|---|",
        *(f"| {f} | {UNITS[f]} | {a:.2f} | {b:.2f} | {c:.2f} | {d:.2f} |" for f, a, b, c, d in rows), "",
        "`produce_broker_cpu_ms_per_mb`: the three brokers' CPU (user + system) during the produce, per MB "
        "produced. `produce_cores_busy`: the brokers' and rdkafka_performance's CPU over the produce's wall "
        "time; the machine has 2 cores, so a figure well below 2 means the run waited on something other "
        "than CPU.", ""]
    (args.out / "cluster_rf_bench.md").write_text("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
