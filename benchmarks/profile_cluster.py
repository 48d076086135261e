"""Profile a 3-broker RF=3 cluster under an acks=all produce load: CPU per MB of the leader and of
each follower, and where each spends it (py-spy, as benchmarks/profile_broker.py does for one broker).

    .venv/bin/python benchmarks/profile_cluster.py [--workload produce|txn] [--records N] [--size B]
        [--partitions P] [--no-profile] [--strace] [--idle-partitions N] [--raw-dir /tmp/kbroker-profiles]

Starts etcd and 3 kbroker processes on 127.0.0.1 (tests/helpers/cluster_proc.py) and one RF=3 topic
whose every partition is led by broker 1 (explicit assignment), so broker 1 is the leader and brokers
2 and 3 are its followers for all the load. ``--idle-partitions`` first creates that many other RF=3
partitions (spread over the brokers) and leaves them idle. Each broker's user+system CPU over the
produce phase is divided by the MB produced; with profiling on, each broker's hottest functions are
printed (py-spy adds a little CPU to each broker alike). ``--strace`` also counts each broker's
system calls over the phase (``strace -c -f``; it slows the brokers several-fold, so read its
counts, not the rates). Every loop is bounded in records and time.
Before the load a page-cache ballast (lib_page_cache.py) fills the memory the VM has free, so the logs
are written into memory in use (``--cold-memory``: not; on this VM that adds ~2.5 CPU-ms per MB
each broker writes into memory new to it).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

import lib_workloads as wl  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from lib_meter import process_cpu, thread_cpu  # noqa: E402
from lib_page_cache import Ballast  # noqa: E402
from profile_broker import Spy, load_folded, render, summarise  # noqa: E402

from tests.helpers.cluster_proc import BrokerCluster  # noqa: E402
from tests.helpers.etcd_proc import EtcdProcess  # noqa: E402


def _create(bootstrap: str, topic: str, partitions: int, assignment: list[list[int]] | None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    nt = (NewTopic(topic, len(assignment), -1, replica_assignment=assignment, config={"min.insync.replicas": "2"}) if assignment else
          NewTopic(topic, num_partitions=partitions, replication_factor=3))
    admin.create_topics([nt])[topic].result(120)


def _wait_isr(bootstrap: str, topic: str, deadline_s: float = 120) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        md = admin.list_topics(topic, timeout=10).topics[topic]
        if md.partitions and all(len(p.isrs) == 3 for p in md.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{topic}: ISRs not full")


def _split(pid: int, before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
           per: float) -> str:
    """CPU-ms per unit of the event loop's thread and of the other threads, by thread name (the
    loop's thread is the one whose tid is the pid; threads that ended in between are not counted)."""
    loop = (after.get(pid, ("", 0.0))[1] - before.get(pid, ("", 0.0))[1]) * 1000 / per
    others: dict[str, float] = {}
    for tid, (name, cpu) in after.items():
        if tid != pid:
            others[name] = others.get(name, 0.0) + (cpu - before.get(tid, (name, 0.0))[1]) * 1000 / per
    rest = ", ".join(f"{name} {v:.2f}" for name, v in sorted(others.items(), key=lambda kv: -kv[1]) if v >= 0.005)
    return f"event loop {loop:.2f}; other threads: {rest or '0'}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=("produce", "txn"), default="produce",
                    help="txn: transactional commits (10 records over 4 partitions spread over the brokers)")
    ap.add_argument("--seconds", type=float, default=15.0, help="txn: how long")
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--idle-partitions", type=int, default=0)
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    ap.add_argument("--native", action="store_true", help="py-spy --native: C frames too")
    ap.add_argument("--top", type=int, default=18)
    ap.add_argument("--strace", action="store_true", help="also count each broker's syscalls (strace -c -f)")
    ap.add_argument("--raw-dir", default="/tmp/kbroker-profiles")
    ap.add_argument("--cold-memory", action="store_true", help="no page-cache ballast before the load")
    args = ap.parse_args()
    raw_dir = Path(args.raw_dir)
    raw_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with tempfile.TemporaryDirectory(prefix="kbroker-cprof-") as tmp, Ballast(tmp) as ballast:
        etcd = EtcdProcess(Path(tmp) / "etcd")
        etcd.start()
        # Kafka's session timings rather than the tests' short ones: a loaded machine must not fence brokers.
        cluster = BrokerCluster(etcd, Path(tmp), 3, **{"broker.session.timeout.ms": "9000",
                                                         "broker.heartbeat.interval.ms": "2000"})
        try:
            cluster.start()
            bs = cluster.bootstrap
            if args.idle_partitions:
                t0 = time.monotonic()
                _create(bs, "idle", args.idle_partitions, None)
                _wait_isr(bs, "idle", 600)
                print(f"created {args.idle_partitions} idle RF=3 partitions in {time.monotonic() - t0:.1f} s")
            topic = wl.unique("prof")
            # produce: every partition led by broker 1; txn: leaders spread, as a client sees a cluster
            _create(bs, topic, args.partitions, [[1, 2, 3]] * args.partitions if args.workload == "produce"
                    else [[1 + (i + k) % 3 for k in range(3)] for i in range(args.partitions)])
            _wait_isr(bs, topic)
            wl.create_topic = lambda *_a, **_k: None  # made above, with its assignment
            pids = {n: b.proc.pid for n, b in cluster.brokers.items() if b.proc is not None}
            if not args.cold_memory:
                print(f"page-cache ballast: {ballast.top_up()}")
            spies = {} if args.no_profile else {
                n: Spy(pid, raw_dir / f"cluster-{stamp}-broker{n}.folded", args.rate, args.native, args.strace)
                for n, pid in pids.items()}
            for s in spies.values():
                s.start()
            cpu0 = {n: process_cpu(pid) or 0.0 for n, pid in pids.items()}
            thr0 = {n: thread_cpu(pid) for n, pid in pids.items()}
            if args.workload == "produce":
                fig = wl.produce(bs, None, records=args.records, size=args.size, acks="all", topic=topic)
            else:
                wl.unique = lambda _prefix, _u=wl.unique, _t=topic: _t if _prefix == "txn" else _u(_prefix)
                fig = wl.transactions(bs, None, seconds=args.seconds, size=100)
            cpu1 = {n: process_cpu(pid) or 0.0 for n, pid in pids.items()}
            thr1 = {n: thread_cpu(pid) for n, pid in pids.items()}
            straced = {n: s.stop() for n, s in spies.items()}
        finally:
            cluster.stop()
            etcd.stop()
    if args.workload == "txn":
        print(f"transactions, RF=3, {args.partitions} partitions with leaders spread: {fig['commits_per_s']:.1f} "
              f"commits/s")
        for n in sorted(pids):
            print(f"  broker {n}: {(cpu1[n] - cpu0[n]) * 1000 / fig['commits']:.2f} CPU-ms per commit")
    else:
        mb = args.records * args.size / 1e6
        print(f"produce acks=all RF=3, {args.partitions} partitions led by broker 1: {fig['mb_per_s']:.1f} MB/s "
              f"({fig['records_per_s']:.0f} records/s)")
        for n in sorted(pids):
            role = "leader" if n == 1 else "follower"
            print(f"  broker {n} ({role}): {(cpu1[n] - cpu0[n]) * 1000 / mb:.2f} CPU-ms per MB"
                  f" ({_split(pids[n], thr0[n], thr1[n], mb)})")
    for n, s in sorted(spies.items()):
        role = "" if args.workload == "txn" else f" ({'leader' if n == 1 else 'follower'})"
        print(render(summarise(load_folded(s.raw), args.top), f"broker {n}{role}"))
        if straced.get(n):
            print(f"\nbroker {n}: syscalls during the phase (strace -c -f)\n\n```\n{straced[n].strip()}\n```\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
