"""What one replicated write costs each process: sequential acks=all produces of one small record.

    .venv/bin/python benchmarks/replicated_write_cost.py [--rounds 3] [--seconds 6] [--size 100]

A transaction on a 3-broker cluster is a chain of replicated writes (the coordinator's state
records, the produces, the markers), each waited for by the next step, so the CPU and latency of one
replicated write decide the cluster's commit rate (issue 31). This measures it alone: one
confluent-kafka producer (acks=all, linger.ms=0) sends one ``--size`` B record at a time, waiting for
each, for ``--seconds``; reported are the round trip and each process's user+system CPU per write:

- ``kbroker RF=3``: 3 kbroker processes and etcd, a partition led by broker 1 with replicas 1, 2, 3
  (min.insync.replicas=2): broker 1's CPU is the leader's, brokers 2 and 3 each a follower's;
- ``kbroker RF=1``: the same cluster, a partition whose only replica is broker 1: the leader's cost
  of the same write unreplicated;
- ``null RF=3``: benchmarks/null_replicating_broker.py's three processes (each leader pushes the
  request to its two followers, which receive it into a buffer and answer; nothing is stored): the
  least a 3-process replicated write can cost on this machine.

Rounds alternate between the kbroker cluster and the null one, each started afresh. Prints every
round and writes ``benchmarks/results/replicated_write_cost.md``. Every loop is bounded in time.

``--cprofile DIR`` instead runs the kbroker RF=3 setup once with each broker under cProfile
(``KBROKERTEST_CPROFILE``, broker/serve.py; stats in DIR, outside the repository) and prints, per
broker, Python function calls per write and the functions with the most self time per write.
cProfile's own cost is about 1 µs per call, so its times are not the brokers' (use the CPU figures
of a normal run for those); the call counts are exact, and they are what a leaner path removes.
A coroutine counts one "call" per resumption, and the self time of a long-lived coroutine (the
follower's fetch loop, ``_connect``) takes in what ran while it was suspended: read past those rows.
"""

from __future__ import annotations

import argparse
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

import null_replicating_broker as nrb  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from lib_meter import process_cpu  # noqa: E402
from profile_broker import short  # noqa: E402
from profile_cluster import _wait_isr  # noqa: E402

from tests.helpers.cluster_proc import BrokerCluster  # noqa: E402
from tests.helpers.etcd_proc import EtcdProcess  # noqa: E402

REPORT = HERE / "results" / "replicated_write_cost.md"


WARM_UP_WRITES = 200  # before the timed writes: connections, metadata, the partition's first segment


class _Quiet:
    def log(self, *_a: object) -> None:
        pass


def sequential(bootstrap: str, topic: str, pids: list[int], seconds: float, size: int) -> dict[str, object]:
    """One-at-a-time acks=all produces to partition 0 of ``topic``: µs per write, CPU µs per write per pid."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "enable.idempotence": False,
                  "logger": _Quiet()})
    value = os.urandom(size)
    for _ in range(WARM_UP_WRITES):
        p.produce(topic, value, partition=0)
        if p.flush(30):
            raise RuntimeError("warm-up write not acknowledged")
    before = [process_cpu(x) for x in pids]
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        p.produce(topic, value, partition=0)
        if p.flush(30):
            raise RuntimeError("write not acknowledged in 30 s")
        n += 1
    wall = time.perf_counter() - t0
    cpu = [(process_cpu(x) - b) * 1e6 / n for x, b in zip(pids, before, strict=True)]
    return {"writes": n, "us_per_write": wall * 1e6 / n, "cpu_us": cpu}


def kbroker_round(seconds: float, size: int, cprofile: Path | None = None) -> dict[str, dict[str, object]]:
    root = Path(tempfile.mkdtemp(prefix="kbroker-rwc-"))
    etcd = EtcdProcess(root / "etcd")
    etcd.start()
    cluster = BrokerCluster(etcd, root, 3)
    if cprofile is not None:
        for n, b in cluster.brokers.items():
            b.env["KBROKERTEST_CPROFILE"] = str(cprofile / f"broker{n}.pstats")
    try:
        cluster.start()
        bootstrap = cluster.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _Quiet()})
        futs = admin.create_topics([
            NewTopic("rwc-rf3", 1, -1, replica_assignment=[[1, 2, 3]], config={"min.insync.replicas": "2"}),
            NewTopic("rwc-rf1", 1, -1, replica_assignment=[[1]])])
        for f in futs.values():
            f.result(120)
        _wait_isr(bootstrap, "rwc-rf3")
        pids = [cluster.brokers[i].proc.pid for i in (1, 2, 3)]
        if cprofile is not None:
            return {"kbroker RF=3": sequential(bootstrap, "rwc-rf3", pids, seconds, size)}
        return {"kbroker RF=3": sequential(bootstrap, "rwc-rf3", pids, seconds, size),
                "kbroker RF=1": sequential(bootstrap, "rwc-rf1", pids, seconds, size)}
    finally:
        cluster.stop()
        etcd.stop()
        shutil.rmtree(root, ignore_errors=True)


def null_round(seconds: float, size: int) -> dict[str, dict[str, object]]:
    nodes = nrb.start_cluster(3, 3, value_size=size, partitions=4)
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        # Partition p is led by node p % 3: partition 0 by node 0, whose followers are nodes 1 and 2.
        return {"null RF=3": sequential(bootstrap, "rwc", [n.proc.pid for n in nodes], seconds, size)}
    finally:
        for n in nodes:
            n.stop()


def print_cprofile(path: Path, writes: int, role: str, top: int = 25) -> None:
    """Calls and self time per write of one broker's cProfile stats (``writes`` includes the warm-up
    writes, which are of the same kind)."""
    st = pstats.Stats(str(path))
    rows = []
    for (file, line, func), (_cc, calls, self_s, _cum, _callers) in st.stats.items():  # type: ignore[attr-defined]
        rows.append((self_s, calls, short(f"{func} ({file}:{line})")))  # profile_broker's naming
    calls = sum(r[1] for r in rows)
    print(f"\n## {path.stem} ({role}): {calls / writes:.0f} Python-level calls per write\n")
    print("| self µs per write (under cProfile) | calls per write | function |\n| ---: | ---: | --- |")
    for self_s, n, name in sorted(rows, reverse=True)[:top]:
        print(f"| {self_s * 1e6 / writes:.1f} | {n / writes:.2f} | `{name}` |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--cprofile", type=Path, help="one kbroker RF=3 run under cProfile, stats in this directory")
    args = ap.parse_args()
    if args.cprofile is not None:
        args.cprofile.mkdir(parents=True, exist_ok=True)
        fig = kbroker_round(args.seconds, args.size, args.cprofile.resolve())["kbroker RF=3"]
        print(f"kbroker RF=3 under cProfile: {fig['writes']} writes, {fig['us_per_write']:.0f} µs each")
        for n, role in ((1, "leader"), (2, "follower"), (3, "follower")):
            print_cprofile(args.cprofile / f"broker{n}.pstats", int(fig["writes"]) + WARM_UP_WRITES, role)  # type: ignore[call-overload]
        return 0
    runs: dict[str, list[dict[str, object]]] = {}
    for r in range(args.rounds):
        order = (kbroker_round, null_round) if r % 2 == 0 else (null_round, kbroker_round)
        for fn in order:
            for name, fig in fn(args.seconds, args.size).items():
                runs.setdefault(name, []).append(fig)
                cpu = ", ".join(f"{c:.0f}" for c in fig["cpu_us"])  # type: ignore[union-attr]
                print(f"round {r + 1} {name}: {fig['writes']} writes, {fig['us_per_write']:.0f} µs each; "
                      f"CPU µs per write (leader, follower, follower / broker 1, 2, 3): {cpu}", flush=True)
    lines = ["# One replicated write: round trip and CPU per process", "",
             f"`benchmarks/replicated_write_cost.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"{args.rounds} round(s) of {args.seconds:g} s, one {args.size} B record per acks=all produce, "
             f"medians; load average at the end: {os.getloadavg()[0]:.1f}.", "",
             "| setup | µs per write | CPU µs per write: process 1 (leader) | process 2 | process 3 | per round (µs per write; leader CPU) |",
             "| --- | ---: | ---: | ---: | ---: | --- |"]
    for name, figs in runs.items():
        cpu = [statistics.median(f["cpu_us"][i] for f in figs) for i in range(3)]  # type: ignore[index]
        per = "; ".join(f"{f['us_per_write']:.0f}, {f['cpu_us'][0]:.0f}" for f in figs)  # type: ignore[index]
        lines.append(f"| {name} | {statistics.median(f['us_per_write'] for f in figs):,.0f} | "  # type: ignore[misc]
                     f"{cpu[0]:,.0f} | {cpu[1]:,.0f} | {cpu[2]:,.0f} | {per} |")
    text = "\n".join(lines) + "\n"
    print(text)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
