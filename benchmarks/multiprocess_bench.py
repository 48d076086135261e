"""One kbroker process against one per core on the same host (issue 31, item 4): does a second
process buy throughput on this machine?

    .venv/bin/python benchmarks/multiprocess_bench.py [--rounds 3] [--processes 2] [--records 300000]
        [--out benchmarks/results]

Alternating rounds (the order flips every round, so load drift hits both alike) of:
- **one**: a single kbroker (no etcd);
- **per-core**: etcd and ``--processes`` kbroker processes in cluster mode, as ``kbroker cluster up
  --brokers auto`` runs them;
each with its log dirs on tmpfs (/dev/shm), so the disk is not the limit. The topic has 8 partitions
with RF=1 (spread over the processes: each leads its share). Workloads: librdkafka's
``rdkafka_performance`` (the C client, when built: ``make bench`` builds it) producing then consuming
``--records`` x 1 KiB, and confluent-kafka (Python) doing the same (lib_workloads). Medians and the
paired ratio (per-core / one) are printed and written to ``multiprocess_bench.md`` / ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

import lib_cclient  # noqa: E402
import lib_workloads as wl  # noqa: E402
from cluster_bench import start_single, topic_factory  # noqa: E402

from tests.helpers.cluster_proc import BrokerCluster  # noqa: E402
from tests.helpers.etcd_proc import EtcdProcess  # noqa: E402

PARTITIONS = 8
TMPFS = Path("/dev/shm")


def _per_core(root: Path, n: int) -> tuple[str, list[int], Any]:
    etcd = EtcdProcess(root / "etcd")
    etcd.start()
    c = BrokerCluster(etcd, root, n, **{"num.partitions": str(PARTITIONS), "default.replication.factor": "1",
                                         "broker.session.timeout.ms": "9000", "broker.heartbeat.interval.ms": "2000",
                                         "offsets.topic.replication.factor": "1",
                                         "transaction.state.log.replication.factor": "1",
                                         "transaction.state.log.min.isr": "1"})
    c.start()

    def stop() -> None:
        try:
            c.stop()
        finally:
            etcd.stop()
    return c.bootstrap, [b.proc.pid for b in c.brokers.values() if b.proc is not None], stop


def run(kind: str, n: int, records: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kbroker-mp-", dir=TMPFS if TMPFS.is_dir() else None) as tmp:
        if kind == "one":
            single = start_single(Path(tmp))
            bootstrap, stop = single.bootstrap, single.stop
        else:
            bootstrap, _, stop = _per_core(Path(tmp), n)
        try:
            wl.PARTITIONS = PARTITIONS  # lib_workloads' consumer assigns that many
            wl.create_topic = lambda bs, topic, partitions=PARTITIONS: topic_factory(1, {})(bs, topic, PARTITIONS)
            lib_cclient.create_topic = wl.create_topic
            out: dict[str, Any] = {}
            if lib_cclient.available():
                c = lib_cclient.produce_consume(bootstrap, None, records=records, size=1024, partitions=PARTITIONS)
                out["c_produce_mb_s"] = c["c_produce"]["mb_per_s"]
                out["c_consume_mb_s"] = c["c_consume"]["mb_per_s"]
            p = wl.produce(bootstrap, None, records=records, size=1024, acks="all")
            out["py_produce_mb_s"] = p["mb_per_s"]
            cons = wl.consume(bootstrap, None, topic=p["topic"], expected=p["records_total"], size=1024)
            out["py_consume_mb_s"] = cons["mb_per_s"]
            out["load_avg"] = os.getloadavg()[0]
            return out
        finally:
            stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--processes", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    rounds: list[dict[str, dict[str, Any]]] = []
    for r in range(args.rounds):
        order = ("one", "per-core") if r % 2 == 0 else ("per-core", "one")
        res = {kind: run(kind, args.processes, args.records) for kind in order}
        rounds.append(res)
        print(f"round {r + 1}: " + json.dumps(res), flush=True)
    keys = [k for k in rounds[0]["one"] if k != "load_avg"]
    lines = [f"# multiprocess_bench: 1 kbroker process against {args.processes} on this host",
             "", f"`benchmarks/multiprocess_bench.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"{os.cpu_count()} CPUs, {args.rounds} alternating rounds, {args.records:,} x 1 KiB, "
             f"{PARTITIONS} partitions RF=1, log dirs on tmpfs. Load averages: "
             + ", ".join(f"{r['one']['load_avg']:.1f}/{r['per-core']['load_avg']:.1f}" for r in rounds) + ".", "",
             "| figure (MB/s) | one process | per core | ratio of medians | paired ratio |", "|---|---|---|---|---|"]
    for k in keys:
        one = statistics.median(r["one"][k] for r in rounds)
        many = statistics.median(r["per-core"][k] for r in rounds)
        paired = statistics.median(r["per-core"][k] / r["one"][k] for r in rounds)
        lines.append(f"| {k} | {one:.1f} | {many:.1f} | {many / one:.2f} | {paired:.2f} |")
    report = "\n".join(lines) + "\n"
    print(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "multiprocess_bench.md").write_text(report)
    (args.out / "multiprocess_bench.json").write_text(json.dumps(rounds, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
