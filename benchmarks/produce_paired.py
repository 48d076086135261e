"""Produce path, paired: two kbroker trees (before/after a change), alternating rounds.

    .venv/bin/python benchmarks/produce_paired.py --before /tmp/kb-before [--rounds 5]
        [--records 200000] [--workloads 1024:none,100:none,1024:lz4]

Both brokers are started once ("before" runs ``python -m broker serve`` from the --before tree, a
``git worktree`` of the baseline commit; "after" from this tree; Kafka's default settings, record
validation on). Every round runs each workload (``size:codec``) on both brokers with
``lib_workloads.produce`` (confluent-kafka, acks=all, linger.ms=5, batch.size=1 MiB, 4 partitions,
as bench.py's produce), in an order that flips every round so load drift on a shared machine hits
both alike; each run's topic is deleted afterwards. Printed per round and as medians: MB/s, broker
CPU µs per record, the ratio of medians and the median of the per-round ratios, with load averages.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from confluent_kafka.admin import AdminClient  # noqa: E402
from consume_paired import TreeBroker  # noqa: E402
from lib_workloads import PARTITIONS, produce  # noqa: E402


def one(broker: Any, pid: int | None, size: int, codec: str, records: int) -> dict[str, float]:
    res = produce(broker.bootstrap, pid, records=records, size=size, compression=codec)
    u = res["usage"]
    cpu = u.get("broker_cpu")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept alive until the futures are done
    for f in admin.delete_topics([res["topic"]]).values():
        f.result(60)
    return {"mb_per_s": res["mb_per_s"], "records_per_s": res["records_per_s"],
            "broker_us_per_record": (cpu or 0) / records * 1e6}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True, help="baseline source tree (git worktree)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--workloads", default="1024:none,100:none,1024:lz4")
    args = ap.parse_args()
    workloads = [(int(s), c) for s, c in (w.split(":") for w in args.workloads.split(","))]
    tmp = Path(tempfile.mkdtemp(prefix="produce-paired-"))
    brokers: dict[str, tuple[Any, int | None]] = {}
    res: dict[tuple[int, str], dict[str, list[dict[str, float]]]] = {w: {"before": [], "after": []}
                                                                     for w in workloads}
    try:
        for name, tree in (("before", args.before), ("after", ROOT)):
            b = TreeBroker(tree, tmp / name / "data", overrides={"num.partitions": str(PARTITIONS)})
            b.start(60)
            brokers[name] = (b, b.proc.pid if b.proc else None)
        print(f"load average at start: {os.getloadavg()}", flush=True)
        for r in range(args.rounds):
            order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
            for w in workloads:
                for name in order:
                    load = os.getloadavg()[0]
                    fig = one(*brokers[name], w[0], w[1], args.records)
                    fig["load"] = load
                    res[w][name].append(fig)
                    print(f"round {r + 1} {w[0]:>5} B {w[1]:5} {name:6} {fig['mb_per_s']:7.1f} MB/s "
                          f"{fig['records_per_s']:9,.0f} rec/s  broker {fig['broker_us_per_record']:5.2f} us/rec "
                          f"load {load:.2f}", flush=True)
    finally:
        for b, _ in brokers.values():
            try:
                b.stop()
            except Exception as e:  # noqa: BLE001 - report, keep stopping the other
                print(f"stopping {b}: {e}", file=sys.stderr)
        subprocess.run(["rm", "-rf", str(tmp)], check=False)
    print(f"load average at end: {os.getloadavg()}")
    for w in workloads:
        print(f"\n{w[0]} B x {args.records}, {w[1]}, medians over {args.rounds} rounds:")
        for key, label in (("mb_per_s", "MB/s"), ("broker_us_per_record", "broker us/record")):
            old = [x[key] for x in res[w]["before"]]
            new = [x[key] for x in res[w]["after"]]
            ratios = [n / o for o, n in zip(old, new, strict=True) if o]
            print(f"  {label:17} before {statistics.median(old):8.2f}  after {statistics.median(new):8.2f}  "
                  f"ratio of medians {statistics.median(new) / statistics.median(old):.3f}  "
                  f"paired {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
