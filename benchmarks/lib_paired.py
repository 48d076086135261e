"""Paired before/after runs of two source trees, alternating: the shared part of the ``*_paired``-style
benchmarks that measure each tree in a child process of their own (cluster_txn_paired.py,
client_setup_cost.py).

A script calls :func:`alternate` with a ``run(tree)`` that usually is :func:`run_child`: the script
itself again, with ``--one TREE`` and its other options, printing one ``RESULT {json}`` line
(:func:`print_result`). Rounds alternate which tree goes first, so drift on a shared machine hits
both alike; :func:`paired` gives the medians and the median of the per-round ratios NEW / OLD.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

Figures = dict[str, float]


def print_result(fig: Figures) -> None:
    """Child side: hand the figures to the parent."""
    print("RESULT " + json.dumps(fig), flush=True)


def run_child(script: str, tree: Path, args: list[str], timeout_s: float) -> Figures:
    """Run ``script --one TREE *args`` and return the figures it printed (SystemExit if it failed)."""
    out = subprocess.run([sys.executable, script, "--one", str(tree), *args], capture_output=True, text=True,
                         timeout=timeout_s)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"{tree}: run failed\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def alternate(trees: list[Path], rounds: int, run: Callable[[Path], Figures],
              show: Callable[[int, str, Figures], None]) -> dict[Path, list[Figures]]:
    """``rounds`` runs of each tree (one or two), the order flipping every round; ``show(round, label,
    figures)`` after each run (label "old" / "new", or "" with one tree)."""
    res: dict[Path, list[Figures]] = {t: [] for t in trees}
    for r in range(rounds):
        for tree in trees if r % 2 == 0 else trees[::-1]:
            fig = run(tree)
            res[tree].append(fig)
            show(r + 1, "" if len(trees) == 1 else ("old" if tree == trees[0] else "new"), fig)
    return res


def paired(old: list[Figures], new: list[Figures], key: str) -> tuple[float, float, float]:
    """(old median, new median, median of the per-round ratios new / old) of ``key``."""
    return (statistics.median(f[key] for f in old), statistics.median(f[key] for f in new),
            statistics.median(y[key] / x[key] for x, y in zip(old, new, strict=True)))


def commit_of(tree: Path) -> str:
    r = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "?"
