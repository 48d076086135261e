"""The ceiling of compressed produce with record validation on: kbroker, the null broker, and the
null broker validating every batch as kbroker does (issue 32's "≥ 0.9 of the null broker with the
same codec" rows).

    .venv/bin/python benchmarks/validation_ceiling.py [--rounds 5] [--records 300000] [--size 1024]
        [--codecs lz4,zstd] [--cold-memory] [--out benchmarks/results]

Record validation stays on in kbroker (Kafka's LogValidator decompresses every compressed batch
too), so the plain null broker, which reads only the batch headers, is not a ceiling any validating
broker can reach: on this 2-core machine the client compresses on the same cores the broker
decompresses on. ``null_broker.py --validate`` is that ceiling: it stores nothing and runs kbroker's
own checks (header, CRC, every record, one streaming decompression pass) on its event loop before it
counts a batch. Each round starts the three brokers (kbroker from this tree with Kafka's defaults,
data in a temp dir) and runs bench.py's compressed produce (lib_workloads.produce: confluent-kafka,
acks=all, linger.ms=5, batch.size 1 MiB, 4 partitions, JSON-like values) for each codec against
each, in an order that rotates by round; a page-cache ballast is topped up before every run, as in
bench.py (``--cold-memory``: none). Prints per-round figures and the medians, and writes
``validation_ceiling.md`` / ``.json`` under ``--out``: MB/s, the brokers' cores, the ratios of
medians and the medians of the per-round ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

import lib_workloads as wl  # noqa: E402
from bench import Broker, start_kbroker  # noqa: E402
from lib_page_cache import Ballast  # noqa: E402
from null_broker import NullBrokerProcess  # noqa: E402

from benchmarks.produce_consume import git_commit  # noqa: E402

BROKERS = ("kbroker", "null", "null+validate")


def start(name: str, size: int, data_root: Path) -> Broker:
    if name == "kbroker":
        return start_kbroker(data_root)
    n = NullBrokerProcess(value_size=size, args=["--validate"] if name == "null+validate" else [])
    n.start()
    return Broker(name, n.bootstrap, n.pid, n.stop, n.log_tail)


def run(args: argparse.Namespace, ballast: Ballast | None) -> list[dict[str, dict[str, dict[str, float]]]]:
    rounds: list[dict[str, dict[str, dict[str, float]]]] = []
    data_root = Path(tempfile.gettempdir())
    for r in range(args.rounds):
        order = BROKERS[r % 3:] + BROKERS[: r % 3]
        print(f"== round {r + 1}/{args.rounds} (order: {', '.join(order)})", flush=True)
        started: dict[str, Broker] = {}
        figs: dict[str, dict[str, dict[str, float]]] = {c: {} for c in args.codecs}
        try:
            for name in order:
                started[name] = start(name, args.size, data_root)
            for codec in args.codecs:
                for name in order:
                    if ballast is not None:
                        ballast.top_up()
                    res = wl.produce(started[name].bootstrap, started[name].pid, records=args.records,
                                     size=args.size, acks="all", compression=codec)
                    u = res["usage"]
                    f = {"mb_per_s": res["mb_per_s"], "broker_cores": (u.get("broker_cpu") or 0) / u["wall"],
                         "client_cores": (u.get("client_cpu") or 0) / u["wall"]}
                    figs[codec][name] = f
                    print(f"   {codec:<5} {name:<14} {f['mb_per_s']:8.1f} MB/s  broker {f['broker_cores']:.2f} "
                          f"client {f['client_cores']:.2f} cores", flush=True)
        finally:
            for b in started.values():
                b.stop()
        rounds.append(figs)
    return rounds


def summary(rounds: list[dict[str, dict[str, dict[str, float]]]], codecs: list[str]) -> list[dict[str, Any]]:
    rows = []
    for codec in codecs:
        mb = {b: [r[codec][b]["mb_per_s"] for r in rounds] for b in BROKERS}
        cores = {b: statistics.median(r[codec][b]["broker_cores"] for r in rounds) for b in BROKERS}
        med = {b: statistics.median(v) for b, v in mb.items()}

        def paired(a: str, b: str, codec: str = codec) -> list[float]:
            return [r[codec][a]["mb_per_s"] / r[codec][b]["mb_per_s"] for r in rounds]

        rows.append({
            "codec": codec, "mb_per_s": med, "broker_cores": cores,
            "kbroker/null": med["kbroker"] / med["null"], "validate/null": med["null+validate"] / med["null"],
            "kbroker/validate": med["kbroker"] / med["null+validate"],
            "per_round": {"kbroker/null": paired("kbroker", "null"), "validate/null": paired("null+validate", "null"),
                          "kbroker/validate": paired("kbroker", "null+validate")},
        })
    return rows


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    out = [
        "# validation_ceiling: compressed produce against the null broker with and without validation",
        "",
        f"`benchmarks/validation_ceiling.py`, {meta['date']}, commit {meta['commit']}, {meta['machine']}; "
        f"{meta['rounds']} rounds of {meta['records']:,} × {meta['size']} B per codec and broker, acks=all, "
        f"{'no ballast' if meta['cold_memory'] else 'page-cache ballast'}; medians. *null+validate*: "
        "`null_broker.py --validate`, kbroker's own record validation and nothing stored.",
        "",
        "| codec | kbroker MB/s | null MB/s | null+validate MB/s | kbroker / null | null+validate / null "
        "| kbroker / null+validate | broker cores k / null / null+validate |",
        "|---|---:|---:|---:|---|---|---|---|",
    ]
    for r in rows:
        m, c, pr = r["mb_per_s"], r["broker_cores"], r["per_round"]

        def cell(key: str, r: dict[str, Any] = r, pr: dict[str, list[float]] = pr) -> str:
            return f"{r[key]:.2f} (per round {', '.join(f'{x:.2f}' for x in pr[key])})"

        out.append(f"| {r['codec']} | {m['kbroker']:.1f} | {m['null']:.1f} | {m['null+validate']:.1f} "
                   f"| {cell('kbroker/null')} | {cell('validate/null')} | {cell('kbroker/validate')} "
                   f"| {c['kbroker']:.2f} / {c['null']:.2f} / {c['null+validate']:.2f} |")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--codecs", default="lz4,zstd")
    ap.add_argument("--cold-memory", action="store_true", help="no page-cache ballast")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    args = ap.parse_args()
    args.codecs = args.codecs.split(",")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="validation-ceiling-ballast-") as d:
        ballast = None if args.cold_memory else Ballast(d)
        try:
            rounds = run(args, ballast)
        finally:
            if ballast is not None:
                ballast.close()
    rows = summary(rounds, args.codecs)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": git_commit(),
            "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python {platform.python_version()}",
            "rounds": args.rounds, "records": args.records, "size": args.size, "cold_memory": args.cold_memory}
    text = markdown(rows, meta)
    print()
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "validation_ceiling.md").write_text(text)
    (args.out / "validation_ceiling.json").write_text(json.dumps({"meta": meta, "rounds": rounds, "summary": rows},
                                                                 indent=1))
    print(f"report: {args.out / 'validation_ceiling.md'} ({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
