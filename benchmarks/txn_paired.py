"""Paired before/after rounds of txn_bench.py: two source trees, alternating, medians and ratios.

    .venv/bin/python benchmarks/txn_paired.py OLD_TREE NEW_TREE [--rounds 5] [--transactions 1000]
                                              [--ctp-records 200000]

Each round runs ``benchmarks/txn_bench.py --no-record`` from OLD_TREE, then from NEW_TREE (the
order flips every round, so drift on a shared machine hits both alike); each run starts its own
kbroker from its tree (tests.helpers.broker_proc runs ``python -m broker`` in the tree's root).
Prints every round (with the broker's CPU per commit and per CTP record), the medians, the ratio of medians and the median of the per-round ratios,
with the load average before each run. OLD_TREE is typically a ``git worktree`` of the commit
before a change.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

_COMMITS = re.compile(r"= ([\d,]+) commits/s.*broker CPU ([\d.]+) s")
_CTP = re.compile(r"in ([\d.]+) s = ([\d,]+) records/s, [\d.,]+ txn/s, broker CPU ([\d.]+) s")


def one(tree: Path, args: argparse.Namespace) -> tuple[float, float, float, float]:
    """(commits/s, CTP records/s, broker CPU ms per commit, broker CPU µs per CTP record)."""
    cmd = [sys.executable, str(tree / "benchmarks" / "txn_bench.py"), "--no-record",
           "--transactions", str(args.transactions), "--ctp-records", str(args.ctp_records)]
    out = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"{tree}: txn_bench failed\n{out.stdout}\n{out.stderr[-3000:]}")
    c, t = _COMMITS.search(out.stdout), _CTP.search(out.stdout)
    if c is None or t is None:
        raise SystemExit(f"{tree}: unexpected output\n{out.stdout}")
    return (float(c[1].replace(",", "")), float(t[2].replace(",", "")), float(c[2]) * 1000 / args.transactions,
            float(t[3]) * 1e6 / args.ctp_records)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--transactions", type=int, default=1000)
    ap.add_argument("--ctp-records", type=int, default=200_000)
    args = ap.parse_args()
    res: dict[str, list[tuple[float, float, float, float]]] = {"old": [], "new": []}
    for r in range(args.rounds):
        order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
        for name in order:
            load = os.getloadavg()[0]
            fig = one(getattr(args, name), args)
            res[name].append(fig)
            print(f"round {r + 1} {name}: {fig[0]:,.0f} commits/s ({fig[2]:.2f} ms broker CPU each), "
                  f"CTP {fig[1]:,.0f} records/s ({fig[3]:.1f} µs broker CPU each) (load1 {load:.2f})", flush=True)
    for i, label in ((0, "commits/s"), (1, "CTP records/s"), (2, "broker CPU ms per commit"),
                     (3, "broker CPU µs per CTP record")):
        old = [x[i] for x in res["old"]]
        new = [x[i] for x in res["new"]]
        ratios = [n / o for o, n in zip(old, new, strict=True)]
        fmt = ",.0f" if i < 2 else ".2f"
        print(f"{label}: old median {statistics.median(old):{fmt}}, new median {statistics.median(new):{fmt}}, "
              f"ratio of medians {statistics.median(new) / statistics.median(old):.3f}, "
              f"paired ratio (median) {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
