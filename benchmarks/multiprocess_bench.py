"""One kbroker process against one per core on the same host (issue 31, item 4): does a second
process buy throughput on this machine, and how much could it buy at most?

    .venv/bin/python benchmarks/multiprocess_bench.py [--rounds 3] [--processes 2] [--records 300000]
        [--no-ceiling] [--out benchmarks/results]

Alternating rounds (the order flips every round, so load drift hits both alike) of:
- **one**: a single kbroker (no etcd);
- **per-core**: etcd and ``--processes`` kbroker processes in cluster mode, as ``kbroker cluster up
  --brokers auto`` runs them;
each with its log dirs on tmpfs (/dev/shm), so the disk is not the limit. The topic has 8 partitions
with RF=1 (spread over the processes: each leads its share). Workloads: librdkafka's
``rdkafka_performance`` (the C client, when built: ``make bench`` builds it) producing then consuming
``--records`` x 1 KiB, and confluent-kafka (Python) doing the same (lib_workloads). Medians and the
paired ratio (per-core / one) are printed and written to ``multiprocess_bench.md`` / ``.json``.

The ceiling (measured unless ``--no-ceiling``): the same two setups and workloads with null brokers
(``null_broker.py``, which store nothing and answer each request at the least cost a Python server
can), one against ``--processes`` of them posing as a cluster (partition p led by node p % N). Their
per-core / one ratio is the most a second process can give on this machine with these clients
(the clients' own CPU included); the report sets kbroker's ratio against it. The four setups run in
every round, in an order that flips every round.

Machine load: each run records the 1-minute load average at its end and "other CPU", the cores used
during the run by processes that are not this script or its children (/proc/stat's busy time minus
this process's and its reaped children's CPU): the interference from anything else on the host.
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
import null_broker  # noqa: E402
from cluster_bench import start_single, topic_factory  # noqa: E402
from lib_meter import machine_busy  # noqa: E402

from tests.helpers.cluster_proc import BrokerCluster  # noqa: E402
from tests.helpers.etcd_proc import EtcdProcess  # noqa: E402

PARTITIONS = 8
TMPFS = Path("/dev/shm")
QUIET = 0.1  # other processes' cores below which a run counts as quiet
KBROKER = ("one", "per-core")
NULL = ("null-one", "null-per-core")  # the ceiling


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


def _null(n: int) -> tuple[str, Any]:
    procs = null_broker.start_cluster(n, value_size=1024, partitions=PARTITIONS)

    def stop() -> None:
        for p in procs:
            p.stop()
    return ",".join(p.bootstrap for p in procs), stop


def _cores(result: dict[str, Any]) -> dict[str, float]:
    """A workload's CPU: the client's and the whole machine's, over ``wall``; ``active``: the seconds of
    the measured phase within it (rdkafka_performance's own clock runs from its first record, while
    its CPU is metered from process start to exit; the Python workloads' are the same span)."""
    u = result["usage"]
    active = result["tool_ms"] / 1e3 if "tool_ms" in result else u["wall"]
    return {"client_cpu": u["client_cpu"], "machine_cpu": u["machine_cpu"], "wall": u["wall"], "active": active}


def _split(run: dict[str, Any], key: str) -> tuple[float, float]:
    """Cores used by the client and by the brokers during a workload's measured phase: the brokers' are
    the machine's minus the client's minus other processes' (the run's other_cores over the metered wall)."""
    c = run["cpu"][key]
    brokers = c["machine_cpu"] - c["client_cpu"] - run["other_cores"] * c["wall"]
    return c["client_cpu"] / c["active"], max(0.0, brokers) / c["active"]


def _own_cpu() -> float:
    """CPU seconds of this process and its reaped children (the brokers, etcd and the C tool once stopped)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def run(kind: str, n: int, records: int) -> dict[str, Any]:
    busy0, own0, wall0 = machine_busy(), _own_cpu(), time.monotonic()
    out = _run(kind, n, records)  # every process it started is stopped and reaped on return
    wall = time.monotonic() - wall0
    out["load_avg"] = os.getloadavg()[0]
    out["other_cores"] = max(0.0, (machine_busy() - busy0) - (_own_cpu() - own0)) / wall
    return out


def _run(kind: str, n: int, records: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kbroker-mp-", dir=TMPFS if TMPFS.is_dir() else None) as tmp:
        if kind == "one":
            single = start_single(Path(tmp))
            bootstrap, stop = single.bootstrap, single.stop
        elif kind == "per-core":
            bootstrap, _, stop = _per_core(Path(tmp), n)
        else:
            bootstrap, stop = _null(1 if kind == "null-one" else n)
        try:
            wl.PARTITIONS = PARTITIONS  # lib_workloads' consumer assigns that many
            wl.create_topic = lambda bs, topic, partitions=PARTITIONS: topic_factory(1, {})(bs, topic, PARTITIONS)
            lib_cclient.create_topic = wl.create_topic
            out: dict[str, Any] = {}
            cpu: dict[str, dict[str, float]] = {}  # workload -> CPU seconds and the seconds they were spent in
            if lib_cclient.available():
                c = lib_cclient.produce_consume(bootstrap, None, records=records, size=1024, partitions=PARTITIONS)
                out["c_produce_mb_s"] = c["c_produce"]["mb_per_s"]
                out["c_consume_mb_s"] = c["c_consume"]["mb_per_s"]
                cpu["c_produce_mb_s"], cpu["c_consume_mb_s"] = _cores(c["c_produce"]), _cores(c["c_consume"])
            p = wl.produce(bootstrap, None, records=records, size=1024, acks="all")
            out["py_produce_mb_s"] = p["mb_per_s"]
            cons = wl.consume(bootstrap, None, topic=p["topic"], expected=p["records_total"], size=1024)
            out["py_consume_mb_s"] = cons["mb_per_s"]
            cpu["py_produce_mb_s"], cpu["py_consume_mb_s"] = _cores(p), _cores(cons)
            out["cpu"] = cpu
            return out
        finally:
            stop()


def _median(rounds: list[dict[str, dict[str, Any]]], kind: str, key: str) -> float:
    return statistics.median(r[kind][key] for r in rounds)


def _paired(rounds: list[dict[str, dict[str, Any]]], one: str, many: str, key: str) -> float:
    return statistics.median(r[many][key] / r[one][key] for r in rounds)


def _quiet(rounds: list[dict[str, dict[str, Any]]], pair: tuple[str, str], key: str) -> list[float]:
    """Paired ratios of the rounds in which neither run of the pair shared the machine with other work."""
    one, many = pair
    return [r[many][key] / r[one][key] for r in rounds
            if r[one]["other_cores"] < QUIET and r[many]["other_cores"] < QUIET]


def report(rounds: list[dict[str, dict[str, Any]]], n: int, records: int) -> str:
    ceiling = NULL[0] in rounds[0]
    keys = [k for k in rounds[0]["one"] if k not in ("load_avg", "other_cores", "cpu")]
    kinds = [*KBROKER, *(NULL if ceiling else ())]
    loads = "; ".join(f"round {i + 1}: " + ", ".join(
        f"{k} {r[k]['load_avg']:.1f}/{r[k]['other_cores']:.2f}" for k in kinds) for i, r in enumerate(rounds))
    lines = [f"# multiprocess_bench: 1 kbroker process against {n} on this host"
             + (", and its ceiling (null brokers)" if ceiling else ""),
             "", f"`benchmarks/multiprocess_bench.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"{os.cpu_count()} CPUs, {len(rounds)} alternating rounds, {records:,} x 1 KiB, "
             f"{PARTITIONS} partitions RF=1, kbroker log dirs on tmpfs. "
             "Load (1-minute load average at the end of each run / other CPU, i.e. cores used during the run by "
             f"processes not of this benchmark): {loads}.", ""]
    if not ceiling:
        lines += ["| figure (MB/s) | one process | per core | ratio of medians | paired ratio |", "|---|---|---|---|---|"]
        for k in keys:
            one, many = _median(rounds, "one", k), _median(rounds, "per-core", k)
            lines.append(f"| {k} | {one:.1f} | {many:.1f} | {many / one:.2f} | {_paired(rounds, 'one', 'per-core', k):.2f} |")
        return "\n".join(lines) + "\n"
    lines += [f"The ceiling: the same setups with null brokers (`null_broker.py`: store nothing; {n} of them pose "
              f"as a cluster, partition p led by node p % {n}). Its {n}/1 ratio is the most a second process can "
              "give here with these clients; \"of ceiling\" = kbroker's paired ratio / the null brokers' paired ratio.",
              "", f"| figure (MB/s, medians) | kbroker 1 | kbroker {n} | kbroker {n}/1 | null 1 | null {n} "
              f"| null {n}/1 (ceiling) | of ceiling |", "|---|---|---|---|---|---|---|---|"]
    for k in keys:
        kr, nr = _paired(rounds, "one", "per-core", k), _paired(rounds, *NULL, k)
        lines.append(f"| {k} | {_median(rounds, 'one', k):.1f} | {_median(rounds, 'per-core', k):.1f} | {kr:.2f} "
                     f"| {_median(rounds, NULL[0], k):.1f} | {_median(rounds, NULL[1], k):.1f} | {nr:.2f} "
                     f"| {kr / nr:.2f} |")
    lines += ["", f"{n}/1 columns: median over rounds of the ratio within a round (paired). Per round, {n}/1 "
              "kbroker / null:"]
    for k in keys:
        lines.append(f"- {k}: " + ", ".join(
            f"{r['per-core'][k] / r['one'][k]:.2f} / {r[NULL[1]][k] / r[NULL[0]][k]:.2f}" for r in rounds))
    lines += ["", f"Quiet pairs only (both runs of the pair with other CPU < {QUIET} cores): paired {n}/1 medians "
              "(pairs counted):", "", "| figure | kbroker | null (ceiling) | of ceiling |", "|---|---|---|---|"]
    for k in keys:
        kq, nq = _quiet(rounds, KBROKER, k), _quiet(rounds, NULL, k)
        if kq and nq:
            km, nm = statistics.median(kq), statistics.median(nq)
            lines.append(f"| {k} | {km:.2f} ({len(kq)}) | {nm:.2f} ({len(nq)}) | {km / nm:.2f} |")
        else:
            lines.append(f"| {k} | {len(kq)} quiet pairs | {len(nq)} quiet pairs | - |")
    lines += ["", f"Where the machine's {os.cpu_count()} cores went (medians over rounds, cores during the measured "
              "phase): client / brokers (machine busy − client − other CPU). The C tool's CPU is metered from its "
              "start to its exit and divided by its measured phase, so its figures run a little high:", "",
              f"| workload | kbroker 1 | kbroker {n} | null 1 | null {n} |", "|---|---|---|---|---|"]
    for k in keys:
        cells = [f"{statistics.median(_split(r[kind], k)[0] for r in rounds):.2f} / "
                 f"{statistics.median(_split(r[kind], k)[1] for r in rounds):.2f}" for kind in kinds]
        lines.append(f"| {k.removesuffix('_mb_s')} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--processes", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--no-ceiling", action="store_true", help="skip the null-broker rounds (the ceiling)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    kinds = (*KBROKER, *(() if args.no_ceiling else NULL))
    rounds: list[dict[str, dict[str, Any]]] = []
    for r in range(args.rounds):
        order = kinds if r % 2 == 0 else kinds[::-1]
        res = {kind: run(kind, args.processes, args.records) for kind in order}
        rounds.append(res)
        print(f"round {r + 1}: " + json.dumps(res), flush=True)
    text = report(rounds, args.processes, args.records)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "multiprocess_bench.md").write_text(text)
    (args.out / "multiprocess_bench.json").write_text(json.dumps(rounds, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
