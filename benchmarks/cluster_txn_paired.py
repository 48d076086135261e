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
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one(tree: Path, seconds: float) -> dict[str, float]:
    """Child mode: one cluster from ``tree``, one measured phase."""
    sys.path[:0] = [str(tree / "benchmarks"), str(tree)]
    os.chdir(tree)
    import lib_workloads as wl
    from profile_cluster import _create, _wait_isr

    from tests.helpers.cluster_proc import cluster_broker
    from tests.helpers.etcd_proc import EtcdProcess

    root = Path(tempfile.mkdtemp(prefix="kbroker-ctp-"))
    etcd = EtcdProcess(root / "etcd")
    etcd.start()
    brokers = {i: cluster_broker(etcd, root, i) for i in (1, 2, 3)}
    try:
        for b in brokers.values():
            b.start(timeout=60)
        bootstrap = ",".join(b.bootstrap for b in brokers.values())
        topic = "paired-txn"
        _create(bootstrap, topic, 4, [[1 + (i + k) % 3 for k in range(3)] for i in range(4)])
        _wait_isr(bootstrap, topic)
        # The workload creates a topic of its own per call: use the RF=3 one made above instead.
        wl.create_topic = lambda *_a, **_k: None
        wl.unique = lambda prefix, _u=wl.unique: topic if prefix == "txn" else _u(prefix)
        wl.transactions(bootstrap, None, seconds=2, size=100)
        before = sum(_cpu_s(b.proc.pid) for b in brokers.values())
        fig = wl.transactions(bootstrap, None, seconds=seconds, size=100)
        after = sum(_cpu_s(b.proc.pid) for b in brokers.values())
        return {"commits_per_s": fig["commits_per_s"], "cpu_ms_per_commit": (after - before) * 1000 / fig["commits"]}
    finally:
        for b in brokers.values():
            try:
                b.stop()
            except Exception:  # noqa: BLE001 - a broker that will not stop is killed below
                pass
            b.kill()
        etcd.stop()
        shutil.rmtree(root, ignore_errors=True)


def run_one(tree: Path, seconds: float) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--one", str(tree), "--seconds", str(seconds)],
                         capture_output=True, text=True, timeout=600)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"{tree}: run failed\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return json.loads(lines[-1][7:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees", nargs="*", type=Path, help="OLD_TREE NEW_TREE")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--one", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        print("RESULT " + json.dumps(one(args.one.resolve(), args.seconds)), flush=True)
        return 0
    if len(args.trees) != 2:
        ap.error("give OLD_TREE and NEW_TREE")
    old, new = (t.resolve() for t in args.trees)
    res: dict[Path, list[dict[str, float]]] = {old: [], new: []}
    for r in range(args.rounds):
        for tree in (old, new) if r % 2 == 0 else (new, old):
            fig = run_one(tree, args.seconds)
            res[tree].append(fig)
            print(f"round {r + 1} {'old' if tree == old else 'new'}: {fig['commits_per_s']:.1f} commits/s, "
                  f"{fig['cpu_ms_per_commit']:.2f} ms brokers' CPU per commit", flush=True)
    for key, label in (("commits_per_s", "commits/s"), ("cpu_ms_per_commit", "brokers' CPU ms per commit")):
        a = statistics.median(f[key] for f in res[old])
        b = statistics.median(f[key] for f in res[new])
        paired = statistics.median(y[key] / x[key] for x, y in zip(res[old], res[new], strict=True))
        print(f"{label}: old median {a:.2f}, new median {b:.2f}, paired ratio (median) {paired:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
