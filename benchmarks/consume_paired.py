"""Consume path, paired: two kbroker trees (before/after a change), Tansu and the null broker.

    .venv/bin/python benchmarks/consume_paired.py --before /tmp/kb-before [--rounds 5] [--records 300000]
                                                  [--brokers before,after,tansu,null]

Each broker is started once and filled with the same topic (4 partitions, N x 1 KiB, acks=all, as
bench.py's produce). Every round then reads the whole topic from offset 0 with an assign()-ing
confluent-kafka consumer on every broker, for both fetch-size settings (librdkafka's defaults, and
fetch.max.bytes 50 MB / max.partition.fetch.bytes 10 MB as in issue 20), in an order that rotates
every round, so drifts in machine load hit all brokers alike. Printed per round and as medians:
MB/s, broker CPU µs per consumed record, ratios after/before, after/Tansu, after/null (the null
broker's ceiling). "before" runs ``python -m broker serve`` from the --before tree (a ``git worktree``
of the baseline commit), "after" from this tree; both with Kafka's default settings.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from confluent_kafka import Consumer, KafkaError, TopicPartition  # noqa: E402
from lib_meter import Meter  # noqa: E402
from lib_workloads import MB, PARTITIONS, produce  # noqa: E402
from null_broker import NullBrokerProcess  # noqa: E402
from tansu import TansuProcess  # noqa: E402

from tests.helpers.broker_proc import BrokerProcess  # noqa: E402

FETCH_SETTINGS = {
    "default": {},
    "large": {"fetch.max.bytes": 50 * 1024 * 1024, "max.partition.fetch.bytes": 10 * 1024 * 1024},
}


class TreeBroker(BrokerProcess):
    """A kbroker started from another source tree (the baseline worktree)."""

    def __init__(self, tree: Path, data_dir: Path, **kw: Any) -> None:
        super().__init__(data_dir, **kw)
        self.tree = tree

    def start(self, timeout: float = 60) -> None:
        # BrokerProcess runs `python -m broker` with cwd = this repository; -m resolves the package
        # from the cwd, so the same command in another tree runs that tree's broker.
        import tests.helpers.broker_proc as bp

        saved = bp.REPO_ROOT
        bp.REPO_ROOT = self.tree
        try:
            super().start(timeout)
        finally:
            bp.REPO_ROOT = saved


def consume(bootstrap: str, pid: int | None, topic: str, expected: int, size: int, extra: dict) -> dict:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"paired-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "enable.partition.eof": False, **extra})
    got = 0
    try:
        c.list_topics(topic, timeout=10)
        with Meter(pid) as m:
            c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
            deadline = time.monotonic() + 300
            while got < expected and time.monotonic() < deadline:
                for msg in c.consume(min(10_000, expected - got), 1.0):
                    err = msg.error()
                    if err is None:
                        got += 1
                    elif err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"consume error: {err}")
    finally:
        c.close()
    if got < expected:
        raise RuntimeError(f"consumed {got} of {expected}")
    u = m.usage
    assert u is not None
    return {"mb_per_s": got * size / u.wall / MB,
            "broker_us_per_record": None if u.broker_cpu is None else u.broker_cpu / got * 1e6,
            "broker_cores": u.share(u.broker_cpu), "client_cores": u.share(u.client_cpu)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, help="baseline source tree (git worktree)")
    ap.add_argument("--brokers", default="before,after,tansu,null")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--settings", default="default,large")
    ap.add_argument("--json", type=Path, help="write every round's figures here")
    args = ap.parse_args()
    names = args.brokers.split(",")
    settings = args.settings.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="consume-paired-"))
    started: dict[str, Any] = {}
    topics: dict[str, str] = {}
    results: dict[str, dict[str, list[dict]]] = {s: {n: [] for n in names} for s in settings}
    try:
        for name in names:
            if name in ("before", "after"):
                tree = args.before if name == "before" else ROOT
                if tree is None:
                    raise SystemExit("--before is required for the 'before' broker")
                b = TreeBroker(tree, tmp / name / "data", overrides={"num.partitions": str(PARTITIONS)})
                b.start(60)
                started[name] = (b, b.proc.pid if b.proc else None)
            elif name == "tansu":
                t = TansuProcess()
                t.start()
                started[name] = (t, t.pid)
            else:
                nb = NullBrokerProcess(args.size)
                nb.start()
                started[name] = (nb, nb.pid)
            broker, pid = started[name]
            topics[name] = produce(broker.bootstrap, pid, records=args.records, size=args.size)["topic"]
        expected = args.records + 100  # produce() sends 100 warm-up records first
        print(f"load average at start: {os.getloadavg()}", flush=True)
        for r in range(args.rounds):
            order = names[r % len(names):] + names[: r % len(names)]
            for s in settings:
                for name in order:
                    broker, pid = started[name]
                    res = consume(broker.bootstrap, pid, topics[name], expected, args.size, FETCH_SETTINGS[s])
                    res["load"] = os.getloadavg()[0]
                    results[s][name].append(res)
                    print(f"round {r + 1} {s:7} {name:6} {res['mb_per_s']:7.1f} MB/s  broker "
                          f"{res['broker_us_per_record'] or 0:5.2f} us/rec  load {res['load']:.2f}", flush=True)
    finally:
        for broker, _ in started.values():
            try:
                broker.stop()
            except Exception as e:  # noqa: BLE001 - report, keep stopping the others
                print(f"stopping {broker}: {e}", file=sys.stderr)
        subprocess.run(["rm", "-rf", str(tmp)], check=False)
    print(f"load average at end: {os.getloadavg()}")
    for s in settings:
        print(f"\n{s} fetch settings, medians over {args.rounds} rounds:")
        med = {n: statistics.median(x["mb_per_s"] for x in results[s][n]) for n in names}
        cpu = {n: statistics.median(x["broker_us_per_record"] or 0 for x in results[s][n]) for n in names}
        for n in names:
            print(f"  {n:6} {med[n]:7.1f} MB/s  broker {cpu[n]:5.2f} us/record")

        def paired(a: str, b: str, s: str = s) -> float:
            return statistics.median(x["mb_per_s"] / y["mb_per_s"] for x, y in zip(results[s][a], results[s][b],
                                                                                   strict=True))
        for a, b in (("after", "before"), ("after", "tansu"), ("before", "tansu"), ("after", "null"),
                     ("before", "null")):
            if a in names and b in names:
                print(f"  {a}/{b}: medians {med[a] / med[b]:.2f}, paired {paired(a, b):.2f}")
        if "after" in names and "before" in names and cpu["before"]:
            print(f"  broker CPU per record after/before: {cpu['after'] / cpu['before']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
