"""Profile a kbroker subprocess under one benchmark load with py-spy, and summarise where time goes.

    .venv/bin/python benchmarks/profile_broker.py produce|consume|latency|txn|ctp
        [--records N] [--rate HZ] [--native] [--strace] [--raw-dir /tmp/kbroker-profiles]

Starts kbroker (tests.helpers.broker_proc), attaches ``py-spy record --format raw`` to it for exactly
the measured phase of the workload (lib_workloads; ctp: txn_bench.py's CTP phase, its input filled
first), then prints the hottest functions by self and by
inclusive time as a percentage of on-CPU samples, plus a per-source-file breakdown. The raw folded
stacks (and a speedscope JSON converted from them, loadable in https://www.speedscope.app) stay under
--raw-dir, outside the repository. ``--strace`` also counts the broker's syscalls during the phase
(``strace -c -f``), to relate syscalls to requests.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

import lib_workloads as wl  # noqa: E402

from tests.helpers.broker_proc import BrokerProcess  # noqa: E402

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")


def load_folded(path: Path) -> list[tuple[list[str], int]]:
    """py-spy raw output: one 'frame;frame;...;leaf count' line per distinct stack (root first)."""
    stacks = []
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    return stacks


def short(frame: str) -> str:
    m = _FRAME.match(frame)
    if not m:
        return frame
    f = m["file"]
    for marker in ("site-packages/", "/lib/python3.11/", str(ROOT) + "/"):
        if marker in f:
            f = f.split(marker, 1)[1]
    return f"{m['func']} ({f}{':' + m['line'] if m['line'] else ''})"


def frame_file(frame: str) -> str:
    m = _FRAME.match(frame)
    return short(frame).rsplit("(", 1)[-1].split(":")[0].rstrip(")") if m else frame


def is_idle(stack: list[str]) -> bool:
    """Samples parked in the event loop's poll or an executor's queue wait are not broker work."""
    leaf = stack[-1]
    return any(k in leaf for k in ("_worker (concurrent/futures/thread.py", "wait (threading.py",
                                   "select (selectors.py"))


def summarise(stacks: list[tuple[list[str], int]], top: int = 25) -> dict[str, Any]:
    stacks = [(s, n) for s, n in stacks if not is_idle(s)]
    total = sum(n for _, n in stacks) or 1
    self_t: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    files: collections.Counter[str] = collections.Counter()
    for stack, n in stacks:
        frames = [short(f) for f in stack]
        self_t[frames[-1]] += n
        files[frame_file(stack[-1])] += n
        for f in set(frames):
            incl[f] += n
    return {
        "samples": total,
        "self": [(f, n / total * 100) for f, n in self_t.most_common(top)],
        "inclusive": [(f, n / total * 100) for f, n in incl.most_common(top + 15)],
        "files": [(f, n / total * 100) for f, n in files.most_common(top)],
    }


def to_speedscope(stacks: list[tuple[list[str], int]], name: str) -> dict[str, Any]:
    frames: dict[str, int] = {}
    samples, weights = [], []
    for stack, n in stacks:
        samples.append([frames.setdefault(short(f), len(frames)) for f in stack])
        weights.append(n)
    return {
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "shared": {"frames": [{"name": f} for f in frames]},
        "profiles": [{"type": "sampled", "name": name, "unit": "none", "startValue": 0,
                      "endValue": sum(weights), "samples": samples, "weights": weights}],
    }


def render(summary: dict[str, Any], title: str, extra: str = "") -> str:
    out = [f"## {title}", "", f"{summary['samples']} on-CPU samples (idle loop/executor waits excluded).", ""]
    if extra:
        out += [extra, ""]
    out += ["Top self time:", "", "| % self | function |", "|---:|---|"]
    out += [f"| {p:.1f} | `{f}` |" for f, p in summary["self"]]
    out += ["", "Top inclusive time:", "", "| % incl. | function |", "|---:|---|"]
    out += [f"| {p:.1f} | `{f}` |" for f, p in summary["inclusive"]]
    out += ["", "Self time by file:", "", "| % | file |", "|---:|---|"]
    out += [f"| {p:.1f} | `{f}` |" for f, p in summary["files"]]
    return "\n".join(out) + "\n"


class Spy:
    """py-spy (and optionally strace) attached to a pid between start() and stop()."""

    def __init__(self, pid: int, raw: Path, rate: int, native: bool, strace: bool) -> None:
        self.pid, self.raw, self.rate, self.native, self.want_strace = pid, raw, rate, native, strace
        self.strace_out = raw.with_suffix(".strace")

    def start(self) -> None:
        cmd = [str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(self.pid), "--format", "raw",
               "--output", str(self.raw), "--rate", str(self.rate), "--function"]
        if self.want_strace:
            # strace holds ptrace on the broker, so py-spy cannot pause it: sample without pausing
            # (less exact attribution, no native frames).
            cmd.append("--nonblocking")
        elif self.native:
            cmd.append("--native")
        self.spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.strace = None
        if self.want_strace:
            self.strace = subprocess.Popen(["strace", "-c", "-f", "-p", str(self.pid), "-o", str(self.strace_out)],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # both attach asynchronously

    def stop(self) -> str:
        for p in (self.spy, self.strace):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGINT)
        self.spy.wait(60)
        if not self.raw.exists():
            err = self.spy.stderr.read().decode(errors="replace") if self.spy.stderr else ""
            raise RuntimeError(f"py-spy wrote no profile: {err.strip()[-500:]}")
        if self.strace is not None:
            self.strace.wait(60)
        return self.strace_out.read_text() if self.strace is not None and self.strace_out.exists() else ""


def run(args: argparse.Namespace) -> str:
    raw_dir = Path(args.raw_dir)
    raw_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    raw = raw_dir / f"kbroker-{args.workload}-{stamp}.folded"
    with tempfile.TemporaryDirectory(prefix="kbroker-prof-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", overrides={"num.partitions": str(wl.PARTITIONS)})
        broker.start(60)
        assert broker.proc is not None
        pid = broker.proc.pid
        try:
            bs = broker.bootstrap
            topic = None
            if args.workload == "consume":  # fill first, unprofiled
                r = wl.produce(bs, pid, records=args.records, size=args.size, acks="all")
                topic, expected = r["topic"], r["records_total"]
            elif args.workload == "ctp":  # txn_bench's CTP phase (bench.py's): its input first, unprofiled
                from benchmarks import txn_bench

                topic, dst = wl.unique("ctp-in"), wl.unique("ctp-out")
                txn_bench.create_topics(bs, topic, dst, topic + "-warm")
                txn_bench.warm_up(bs, topic + "-warm", pid)
                txn_bench.fill_ctp_input(bs, topic, args.records)
            spy = Spy(pid, raw, args.rate, args.native, args.strace)
            spy.start()
            try:
                if args.workload == "produce":
                    fig = wl.produce(bs, pid, records=args.records, size=args.size, acks=args.acks,
                                     idempotent=args.idempotent, compression=args.compression)
                elif args.workload == "consume":
                    fig = wl.consume(bs, pid, topic=topic, expected=expected, size=args.size)
                elif args.workload == "latency":
                    fig = wl.latency(bs, pid, rate=args.latency_rate, seconds=args.seconds, size=args.size)
                elif args.workload == "txn":
                    fig = wl.transactions(bs, pid, seconds=args.seconds, size=args.size)
                else:
                    phase = txn_bench.bench_ctp(bs, topic, dst, args.records, args.ctp_batch, pid, fill=False)
                    fig = {"records_per_s": phase.records / phase.seconds, "transactions": phase.transactions,
                           "usage": {"broker_cpu": phase.broker_cpu, "wall": phase.seconds}}
            finally:
                strace_text = spy.stop()
        finally:
            broker.stop()
            broker.kill()
    u = fig.get("usage", {})
    figures = {k: v for k, v in fig.items() if k not in ("usage", "topic")}
    extra = (f"Workload figures under the profiler: `{json.dumps(figures, default=str)}`; broker CPU "
             f"{(u.get('broker_cpu') or 0):.2f} s over {u.get('wall', 0):.2f} s wall. Raw stacks: `{raw}`.")
    stacks = load_folded(raw)
    (raw.with_suffix(".speedscope.json")).write_text(json.dumps(to_speedscope(stacks, raw.stem)))
    text = render(summarise(stacks, args.top), f"kbroker profile: {args.workload}", extra)
    if strace_text:
        text += "\nSyscalls during the phase (`strace -c -f`):\n\n```\n" + strace_text.strip() + "\n```\n"
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", choices=("produce", "consume", "latency", "txn", "ctp"))
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--acks", default="all")
    ap.add_argument("--idempotent", action="store_true")
    ap.add_argument("--compression", default="none", help="produce: the producer's compression.type")
    ap.add_argument("--ctp-batch", type=int, default=500, help="most records per CTP transaction (txn_bench)")
    ap.add_argument("--seconds", type=float, default=5.0, help="latency/txn duration")
    ap.add_argument("--latency-rate", type=int, default=5000)
    ap.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--native", action="store_true", help="py-spy --native (C/Cython frames too)")
    ap.add_argument("--strace", action="store_true", help="also count syscalls with strace -c -f")
    ap.add_argument("--raw-dir", default=os.path.join(tempfile.gettempdir(), "kbroker-profiles"))
    ap.add_argument("--out", type=Path, help="also write the summary (Markdown) here")
    args = ap.parse_args()
    text = run(args)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
