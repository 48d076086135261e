"""Command-line options of a campaign (``python -m tests.campaign``, ``make chaos``)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from .nemeses import KINDS

WORKLOADS = ("queue", "txn")


@dataclass
class Options:
    duration: float = 60.0
    seed: int = 1
    workloads: tuple[str, ...] = WORKLOADS
    faults: tuple[str, ...] = KINDS
    queue_workers: int = 8
    kafka_python_workers: int = 2  # of the queue workers
    txn_workers: int = 4
    queue_topics: int = 4  # 2 partitions each: a key is a partition
    txn_topics: int = 3
    abort_p: float = 0.2
    rate: float = 0.0  # per worker, ops/s at most (0: unbounded)
    fault_gap: tuple[float, float] = (5.0, 15.0)  # seconds between one fault's recovery and the next
    rounds: int = 0  # rounds through every fault kind (0: as many as the duration allows)
    hold_scale: float = 1.0
    disk_mb: int = 256
    netns: bool = True
    faketime: bool = True
    out: Path = Path("build/chaos")
    group_protocol: str = "classic"
    broker_env: dict[int, dict[str, str]] = field(default_factory=dict)
    drain_s: float = 180.0
    recover_s: float = 180.0

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else str(v) if isinstance(v, Path) else v)
                for k, v in self.__dict__.items()}


def _pair(text: str) -> tuple[float, float]:
    lo, _, hi = text.partition(":")
    return float(lo), float(hi or lo)


def _list(text: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    if text in ("", "none"):
        return ()
    if text == "all":
        return allowed
    items = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in items if x not in allowed]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown {bad}; choose from {', '.join(allowed)}")
    return items


def parse(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(prog="python -m tests.campaign",
                                description="A fault campaign against a 3-broker kbroker cluster on a 3-member etcd: "
                                            "Jepsen-style workloads, random faults, a recorded history and its check.")
    d = Options()
    p.add_argument("--duration", type=float, default=d.duration, help="seconds of load and faults (default 60)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--workloads", default="all", type=lambda s: _list(s, WORKLOADS), help="queue,txn (default all)")
    p.add_argument("--faults", default="all", type=lambda s: _list(s, KINDS),
                   help=f"{','.join(KINDS)} | all | none (default all)")
    p.add_argument("--queue-workers", type=int, default=d.queue_workers)
    p.add_argument("--kafka-python-workers", type=int, default=d.kafka_python_workers,
                   help="how many of the queue workers use kafka-python instead of confluent-kafka")
    p.add_argument("--txn-workers", type=int, default=d.txn_workers)
    p.add_argument("--abort-p", type=float, default=d.abort_p, help="share of transactions aborted on purpose")
    p.add_argument("--rate", type=float, default=d.rate, help="operations per second per worker at most (0: unbounded)")
    p.add_argument("--fault-gap", type=_pair, default=d.fault_gap, metavar="LO:HI",
                   help="seconds between a fault's recovery and the next fault (default 5:15)")
    p.add_argument("--rounds", type=int, default=d.rounds,
                   help="rounds through every fault kind, each kind once per round in a shuffled order (0: no limit)")
    p.add_argument("--hold-scale", type=float, default=d.hold_scale,
                   help="multiply every fault's hold time (e.g. 0.5 for a short campaign)")
    p.add_argument("--disk-mb", type=int, default=d.disk_mb, help="size of each broker's tmpfs log dir (0: no tmpfs)")
    p.add_argument("--no-netns", dest="netns", action="store_false", help="everything on 127.0.0.1 (no partitions)")
    p.add_argument("--no-faketime", dest="faketime", action="store_false")
    p.add_argument("--group-protocol", choices=["classic", "consumer"], default=d.group_protocol)
    p.add_argument("--out", type=Path, default=d.out, help="where run directories go (default build/chaos)")
    p.add_argument("--broker-env", action="append", default=[], metavar="NODE:KEY=VALUE",
                   help="extra environment for one broker (test switches), e.g. 1:KBROKERTEST_DROP_ACKED_BATCH=q0:50")
    a = p.parse_args(argv)
    env: dict[int, dict[str, str]] = {}
    for item in a.broker_env:
        node, _, kv = item.partition(":")
        key, _, value = kv.partition("=")
        env.setdefault(int(node), {})[key] = value
    return Options(duration=a.duration, seed=a.seed, workloads=a.workloads, faults=a.faults,
                   queue_workers=a.queue_workers, kafka_python_workers=a.kafka_python_workers,
                   txn_workers=a.txn_workers, abort_p=a.abort_p, rate=a.rate, fault_gap=a.fault_gap,
                   rounds=a.rounds, hold_scale=a.hold_scale,
                   disk_mb=a.disk_mb, netns=a.netns, faketime=a.faketime, out=a.out, group_protocol=a.group_protocol,
                   broker_env=env)
