"""A campaign's report: ``summary.json`` (everything), ``summary.txt`` (for people), ``timeline.png``
(throughput and latency over time with the fault windows shaded, as Jepsen's rate and latency
graphs) and the one-line summary the runner prints last.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from .checker import CheckResult
from .history import Op

FAULT_COLORS = {"kill": "#e41a1c", "pause": "#ff7f00", "partition": "#377eb8", "clock": "#984ea3",
                "disk": "#a65628", "membership": "#4daf4a"}
OP_KINDS = ("send", "poll", "txn")


def summary_line(opts: dict[str, Any], result: CheckResult | None, faults: list[dict[str, Any]],
                 problems: list[str], run_dir: Path) -> str:
    ok = result is not None and result.valid and not problems
    st = result.stats if result else {}
    by = Counter(f["kind"] for f in faults)
    parts = [
        f"chaos {'PASS' if ok else 'FAIL'}: seed={opts['seed']} duration={opts['duration']:.0f}s",
        f"ops={st.get('ops', 0)} (send {_count(st, 'send')}, poll {_count(st, 'poll')}, txn {_count(st, 'txn')};"
        f" {st.get('indeterminate', 0)} indeterminate)",
        f"faults={len(faults)} ({', '.join(f'{k} {n}' for k, n in sorted(by.items())) or 'none'})",
        "anomalies=" + (", ".join(f"{k}:{v}" for k, v in sorted(result.anomalies.counts.items())) or "0"
                        if result else "not checked"),
    ]
    if result and result.allowed.counts:
        parts.append("allowed=" + ",".join(f"{k}:{v}" for k, v in sorted(result.allowed.counts.items())))
    if problems:
        parts.append(f"problems={len(problems)}")
    parts.append(f"report={run_dir}/summary.txt")
    return " ".join(parts)


def _count(stats: dict[str, Any], f: str) -> int:
    return sum(n for k, n in stats.get("by_f_type", {}).items() if k.startswith(f + ":"))


def write(run_dir: Path, opts: dict[str, Any], ops: list[Op], result: CheckResult, faults: list[dict[str, Any]],
          problems: list[str], notes: list[str]) -> Path:
    data = {"options": opts, "result": result.as_dict(), "faults": faults, "problems": problems, "notes": notes,
            "latency_ms": latency_table(ops)}
    (run_dir / "summary.json").write_text(json.dumps(data, indent=1, default=str))
    (run_dir / "summary.txt").write_text(text(opts, result, faults, problems, notes, ops))
    png = run_dir / "timeline.png"
    try:
        timeline(ops, faults, png, title=f"kbroker campaign seed {opts['seed']}, {opts['duration']:.0f} s")
    except ImportError:
        notes.append("matplotlib missing: no timeline.png (pip install matplotlib)")
    return png


def latency_table(ops: list[Op]) -> dict[str, dict[str, float]]:
    lat: dict[str, list[float]] = defaultdict(list)
    for op in ops:
        if op.f in OP_KINDS and not op.process.startswith("drain"):
            lat[f"{op.f}:{op.type}"].append((op.time - op.invoke_time) / 1e6)
    out = {}
    for k, vs in sorted(lat.items()):
        vs.sort()
        out[k] = {"n": len(vs), "p50": round(vs[len(vs) // 2], 1), "p99": round(vs[int(len(vs) * 0.99)], 1),
                  "max": round(vs[-1], 1)}
    return out


def text(opts: dict[str, Any], result: CheckResult, faults: list[dict[str, Any]], problems: list[str],
         notes: list[str], ops: list[Op]) -> str:
    st = result.stats
    lines = [f"kbroker fault campaign: seed {opts['seed']}, {opts['duration']:.0f} s, workloads "
             f"{','.join(opts['workloads'])}, faults {','.join(opts['faults']) or 'none'}",
             f"result: {'VALID' if result.valid else 'ANOMALIES FOUND'}" + (" (with problems)" if problems else ""),
             "", f"operations: {st['ops']} ({st['rw_ops']} send/poll/txn)"]
    for k, n in st["by_f_type"].items():
        lines.append(f"  {k:<16} {n}")
    lines += [f"  values sent {st['sent_values']}, read {st['read_values']}, non-empty polls {st['nonempty_polls']},"
              f" transactions committed {st['txn_commits']} / aborted {st['txn_aborts']},"
              f" indeterminate {st['indeterminate']}", "", "latency (ms):"]
    for k, v in latency_table(ops).items():
        lines.append(f"  {k:<16} n={v['n']:<7} p50={v['p50']:<8} p99={v['p99']:<8} max={v['max']}")
    lines += ["", f"faults: {len(faults)}"]
    for f in faults:
        rec = "not recovered" if f.get("recovered_s") is None else f"recovered in {f['recovered_s']} s"
        lines.append(f"  {f['start_s']:8.1f}-{(f['end_s'] or 0):8.1f}s  {f['kind']:<10} {f['variant']:<18} "
                     f"{f['target']}  [{rec}] {'; '.join(f.get('notes', []))}")
    for title, found in (("anomalies", result.anomalies), ("allowed (reported apart)", result.allowed)):
        lines += ["", f"{title}: " + (", ".join(f"{k} {n}" for k, n in sorted(found.counts.items())) or "none")]
        for name in sorted(found.counts):
            for case in found.cases[name][:3]:
                lines.append(f"  {name}: {json.dumps(case, default=str)[:1500]}")
    if problems:
        lines += ["", "problems:"] + [f"  {p[:3000]}" for p in problems]
    if notes:
        lines += ["", "notes:"] + [f"  {n}" for n in notes]
    return "\n".join(lines) + "\n"


def timeline(ops: list[Op], faults: list[dict[str, Any]], path: Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    live = [op for op in ops if op.f in OP_KINDS and not op.process.startswith("drain")]
    if not live:
        return
    end = max(op.time for op in live) / 1e9
    buckets = int(end) + 1
    rate: dict[str, list[int]] = defaultdict(lambda: [0] * buckets)
    for op in live:
        rate[f"{op.f} {op.type}"][int(op.time / 1e9)] += 1
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(14, 8), sharex=True)
    styles = {"ok": "-", "fail": ":", "info": "--"}
    line_colors = {"send": "#1f77b4", "poll": "#2ca02c", "txn": "#9467bd"}
    for name in sorted(rate):
        f, t = name.split()
        ax1.plot(range(buckets), rate[name], label=name, linewidth=0.8, linestyle=styles[t], color=line_colors[f])
    ax1.set_ylabel("operations / s")
    ax1.legend(loc="upper right", fontsize=7, ncol=3)
    # Colour by operation, marker by outcome: ok dots, fail crosses, indeterminate triangles.
    colors = {"send": "#1f77b4", "poll": "#2ca02c", "txn": "#9467bd"}
    markers = {"ok": (".", 2), "fail": ("x", 12), "info": ("^", 14)}
    for f in OP_KINDS:
        for t in ("ok", "fail", "info"):
            pts = [(op.time / 1e9, max((op.time - op.invoke_time) / 1e6, 0.01)) for op in live
                   if op.f == f and op.type == t]
            if pts:
                step = max(1, len(pts) // 20000)  # enough points to see the shape, not millions
                xs, ys = zip(*pts[::step], strict=True)
                marker, size = markers[t]
                ax2.scatter(xs, ys, s=size, marker=marker, label=f"{f} {t}", color=colors[f],
                            alpha=0.4 if t == "ok" else 0.8)
    ax2.set_yscale("log")
    ax2.set_ylabel("latency (ms)")
    ax2.set_xlabel("seconds since start")
    ax2.legend(loc="upper right", fontsize=7, ncol=3, markerscale=4)
    for ax in (ax1, ax2):
        for f in faults:
            if f.get("end_s") is not None:
                ax.axvspan(f["start_s"], f["end_s"], color=FAULT_COLORS.get(f["kind"], "grey"), alpha=0.15, lw=0)
    kinds = sorted({f["kind"] for f in faults})
    if kinds:
        fig.legend(handles=[Patch(color=FAULT_COLORS.get(k, "grey"), alpha=0.3, label=k) for k in kinds],
                   loc="upper left", ncol=len(kinds), fontsize=8, title="fault windows")
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
