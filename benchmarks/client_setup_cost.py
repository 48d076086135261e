"""What a client's set-up costs the broker: broker CPU per connection and per short-lived client.

    .venv/bin/python benchmarks/client_setup_cost.py [--rounds 3] [--lives 150] [OLD_TREE NEW_TREE]

Short-lived clients are common: a PySpark task opens a consumer per input range and a producer per
output task in every micro-batch, and each librdkafka client opens a connection per broker it talks
to (bootstrap, partition leaders, coordinators), each starting with ApiVersions. Measured, each on
a fresh single broker with its log dir on disk, as the broker process's user+system CPU over:

- ``raw connection``: connect, one ApiVersions v3 request, close (a plain socket);
- ``consumer life``: a confluent-kafka consumer (read_committed, a group.id, as spark_jobs' range
  readers) created, assigned one partition at offset 0, polled until 100 records, closed;
- ``transactional producer life``: created, init_transactions, one transaction of 10 records on one
  partition committed, closed (as a sink task does).

With two trees (``OLD_TREE NEW_TREE``, e.g. a ``git worktree`` of an earlier commit with the compiled
``storage/_recwalk*.so`` copied in) the rounds alternate between them and the report adds the median
of the per-round ratios NEW / OLD. Prints every figure and writes
``benchmarks/results/client_setup_cost.md``. Every loop is bounded by its count.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

from lib_meter import process_cpu
from lib_paired import alternate, commit_of, paired, print_result, run_child

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
REPORT = HERE / "results" / "client_setup_cost.md"
TOPIC = "setup-cost"


def _api_versions_frame() -> bytes:
    # ApiVersions v3 (flexible): header v2 with client id "bench", then client software name/version.
    body = struct.pack(">hhi", 18, 3, 1) + b"\x00\x05bench" + b"\x00" + b"\x06bench\x021\x00"
    return struct.pack(">i", len(body)) + body


def _raw_connection(bootstrap: str) -> None:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(_api_versions_frame())
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        if len(s.recv(size, socket.MSG_WAITALL)) != size:
            raise RuntimeError("short ApiVersions answer")


def _consumer_life(bootstrap: str) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "setup-cost", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "fetch.queue.backoff.ms": 10, "logger": _QUIET})
    try:
        c.assign([TopicPartition(TOPIC, 0, 0)])
        got, deadline = 0, time.monotonic() + 30
        while got < 100:
            if time.monotonic() > deadline:
                raise RuntimeError("consumer read nothing for 30 s")
            got += len(c.consume(100, 1))
    finally:
        c.close()


def _producer_life(bootstrap: str, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"setup-cost-{n}", "logger": _QUIET})
    p.init_transactions(30)
    p.begin_transaction()
    for _ in range(10):
        p.produce(TOPIC, b"v" * 100, partition=0)
    p.commit_transaction(30)
    p.flush(10)


class _Quiet:
    def log(self, *_a: object) -> None:
        pass


_QUIET = _Quiet()


def one(tree: Path, lives: int) -> dict[str, float]:
    """Child mode: a fresh broker from ``tree``; broker CPU in µs per connection / client life."""
    sys.path[:0] = [str(tree)]
    os.chdir(tree)
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.helpers.broker_proc import BrokerProcess

    root = Path(tempfile.mkdtemp(prefix="kbroker-setup-"))
    broker = BrokerProcess(root / "data")
    try:
        broker.start(timeout=60)
        bs = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        p = Producer({"bootstrap.servers": bs, "logger": _QUIET})
        for _ in range(1000):
            p.produce(TOPIC, b"v" * 100, partition=0)
        if p.flush(30):
            raise RuntimeError("fill not delivered")
        pid = broker.proc.pid
        out: dict[str, float] = {}
        for name, count, fn in (("raw connection", 20 * lives, lambda i: _raw_connection(bs)),
                                ("consumer life", lives, lambda i: _consumer_life(bs)),
                                ("transactional producer life", lives // 2, lambda i: _producer_life(bs, i))):
            fn(-1)  # warm-up: first-use work (the group and transaction coordinators' topics)
            before = process_cpu(pid)
            for i in range(count):
                fn(i)
            time.sleep(0.5)  # closes finish on the broker
            out[name] = (process_cpu(pid) - before) * 1e6 / count
        return out
    finally:
        try:
            broker.stop()
        except Exception:  # noqa: BLE001 - a broker that will not stop is killed below
            pass
        broker.kill()
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees", nargs="*", type=Path, help="OLD_TREE NEW_TREE (default: this tree alone)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lives", type=int, default=150, help="client lives per kind (raw connections: 20x)")
    ap.add_argument("--one", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        print_result(one(args.one.resolve(), args.lives))
        return 0
    if len(args.trees) not in (0, 2):
        ap.error("give no tree, or OLD_TREE NEW_TREE")
    trees = [t.resolve() for t in args.trees] or [ROOT]

    def show(r: int, label: str, fig: dict[str, float]) -> None:
        print(f"round {r}{' ' + label if label else ''}: " + ", ".join(f"{k} {v:.0f} µs" for k, v in fig.items()),
              flush=True)

    res = alternate(trees, args.rounds, lambda tree: run_child(__file__, tree, ["--lives", str(args.lives)], 1800),
                    show)
    kinds = list(res[trees[0]][0])
    lines = ["# Client set-up: broker CPU per connection and per short-lived client", "",
             f"`benchmarks/client_setup_cost.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"{args.rounds} round(s), {args.lives} lives per kind, medians; load average at the end: "
             f"{os.getloadavg()[0]:.1f}.", ""]
    if len(trees) == 1:
        lines += ["| what | broker CPU, µs each | per round |", "| --- | ---: | --- |"]
        for k in kinds:
            vals = [f[k] for f in res[trees[0]]]
            lines.append(f"| {k} | {statistics.median(vals):,.0f} | {', '.join(f'{v:,.0f}' for v in vals)} |")
        lines.insert(3, f"Tree: {commit_of(trees[0])}.")
    else:
        old, new = trees
        lines.insert(3, f"Old tree {commit_of(old)}, new tree {commit_of(new)}, rounds alternating.")
        lines += ["| what | old, µs each | new, µs each | paired new / old |", "| --- | ---: | ---: | ---: |"]
        for k in kinds:
            a, b, ratio = paired(res[old], res[new], k)
            lines.append(f"| {k} | {a:,.0f} | {b:,.0f} | {ratio:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
