"""Paired before/after rounds of transactional commits on a 3-broker RF=3 cluster: two source trees, alternating.

    .venv/bin/python benchmarks/cluster_txn_paired.py OLD_TREE NEW_TREE [--rounds 8] [--seconds 8]

Each run starts etcd and 3 kbroker processes from one tree (that tree's tests.helpers.cluster_proc,
so its own broker code), creates a 4-partition RF=3 topic (min.insync.replicas=2) whose partitions
are led by the three brokers in turn, runs lib_workloads.transactions (one transactional producer,
10 records per commit, as txn_bench's commit phase) for a 2 s warm-up and then ``--seconds``
measured, and reports commits/s and the brokers' CPU per commit. Rounds alternate which tree goes
first, so drift on a shared machine hits both alike; printed are every run, the medians and the
median of the per-round ratios (NEW / OLD). Single rounds of the cluster swing by ±20 % on a 2-core
machine; the paired ratio over 6-8 rounds is the figure (docs/benchmarks.md). OLD_TREE is
typically a ``git worktree`` of the commit before a change, with the compiled
``storage/_recwalk*.so`` copied in.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from lib_paired import alternate, paired, print_result, run_child


def one(tree: Path, seconds: float) -> dict[str, float]:
    """Child mode: one cluster from ``tree``, one measured phase."""
    sys.path[:0] = [str(tree / "benchmarks"), str(tree)]
    os.chdir(tree)
    import lib_workloads as wl
    from lib_meter import process_cpu
    from profile_cluster import _create, _wait_isr

    from tests.helpers.cluster_proc import BrokerCluster
    from tests.helpers.etcd_proc import EtcdProcess

    root = Path(tempfile.mkdtemp(prefix="kbroker-ctp-"))
    etcd = EtcdProcess(root / "etcd")
    etcd.start()
    cluster = BrokerCluster(etcd, root, 3)
    try:
        cluster.start()
        bootstrap = cluster.bootstrap
        topic = "paired-txn"
        _create(bootstrap, topic, 4, [[1 + (i + k) % 3 for k in range(3)] for i in range(4)])
        _wait_isr(bootstrap, topic)
        # The workload creates a topic of its own per call: use the RF=3 one made above instead.
        wl.create_topic = lambda *_a, **_k: None
        wl.unique = lambda prefix, _u=wl.unique: topic if prefix == "txn" else _u(prefix)
        wl.transactions(bootstrap, None, seconds=2, size=100)
        pids = [b.proc.pid for b in cluster.brokers.values()]
        before = sum(process_cpu(pid) for pid in pids)
        fig = wl.transactions(bootstrap, None, seconds=seconds, size=100)
        after = sum(process_cpu(pid) for pid in pids)
        return {"commits_per_s": fig["commits_per_s"], "cpu_ms_per_commit": (after - before) * 1000 / fig["commits"]}
    finally:
        cluster.stop()
        etcd.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees", nargs="*", type=Path, help="OLD_TREE NEW_TREE")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--one", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        print_result(one(args.one.resolve(), args.seconds))
        return 0
    if len(args.trees) != 2:
        ap.error("give OLD_TREE and NEW_TREE")
    old, new = (t.resolve() for t in args.trees)

    def show(r: int, label: str, fig: dict[str, float]) -> None:
        print(f"round {r} {label}: {fig['commits_per_s']:.1f} commits/s, "
              f"{fig['cpu_ms_per_commit']:.2f} ms brokers' CPU per commit", flush=True)

    res = alternate([old, new], args.rounds, lambda tree: run_child(__file__, tree, ["--seconds", str(args.seconds)], 600),
                    show)
    for key, label in (("commits_per_s", "commits/s"), ("cpu_ms_per_commit", "brokers' CPU ms per commit")):
        a, b, ratio = paired(res[old], res[new], key)
        print(f"{label}: old median {a:.2f}, new median {b:.2f}, paired ratio (median) {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
