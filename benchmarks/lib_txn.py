"""Transactional workloads for bench.py: benchmarks/txn_bench.py's phases, with CPU accounting added.

txn_bench.py (its own entry point, kbroker only) owns the measurement: ``bench_commits`` (N
transactions of 10 records over 4 partitions) and ``bench_ctp`` (consume-transform-produce with
send_offsets_to_transaction, committed offsets verified). Here they are called against any bootstrap
address and their figures are put in the shape lib_report expects. If txn_bench cannot be imported,
lib_workloads' own implementations (time-bounded, 1 KiB values) are used instead.
"""

from __future__ import annotations

from typing import Any

import lib_workloads as wl
from lib_meter import Meter

try:
    from benchmarks import txn_bench
except ImportError:  # pragma: no cover - depends on the checkout
    txn_bench = None


class TxnBenchFailed(RuntimeError):
    """txn_bench reported a failure (it exits via SystemExit); carry it as an ordinary error."""


def source() -> str:
    return "benchmarks/txn_bench.py" if txn_bench is not None else "lib_workloads (txn_bench.py missing)"


def value_size(default: int) -> int:
    return getattr(txn_bench, "VALUE_SIZE", default) if txn_bench is not None else default


def transactions(bootstrap: str, pid: int | None, *, count: int, seconds: float, size: int) -> dict[str, Any]:
    if txn_bench is None:
        return wl.transactions(bootstrap, pid, seconds=seconds, size=size)
    topic = wl.unique("txnbench")
    wl.create_topic(bootstrap, topic, txn_bench.PARTITIONS)
    try:
        with Meter(pid) as m:  # includes txn_bench's 5 warm-up transactions: <1% of the phase
            phase = txn_bench.bench_commits(bootstrap, topic, count, pid)
    except SystemExit as e:
        raise TxnBenchFailed(str(e)) from None
    usage = m.usage
    assert usage is not None
    u = usage.to_dict()
    u["wall"] = phase.seconds
    scale = phase.seconds / usage.wall  # CPU figures to the measured window's share
    for k in ("client_cpu", "client_main_cpu", "machine_cpu", "other_cpu"):
        u[k] = u[k] * scale
    u["broker_cpu"] = phase.broker_cpu
    lat = sorted(phase.latencies_ms)
    return {"commits": phase.transactions, "records": phase.transactions * txn_bench.RECORDS_PER_TXN,
            "commits_per_s": phase.rate, "records_per_s": phase.rate * txn_bench.RECORDS_PER_TXN,
            "commit_p50_ms": phase.percentile(0.5), "commit_p99_ms": phase.percentile(0.99),
            "commit_max_ms": lat[-1] if lat else None, "usage": u}


def consume_transform_produce(bootstrap: str, pid: int | None, *, records: int, batch: int,
                              size: int) -> dict[str, Any]:
    if txn_bench is None:
        return wl.consume_transform_produce(bootstrap, pid, records=records, size=size, max_batch=batch)
    src, dst = wl.unique("ctp-in"), wl.unique("ctp-out")
    for t in (src, dst):
        wl.create_topic(bootstrap, t, txn_bench.PARTITIONS)
    try:
        phase = txn_bench.bench_ctp(bootstrap, src, dst, records, batch, pid)
    except SystemExit as e:
        raise TxnBenchFailed(str(e)) from None
    # bench_ctp times only the processing window (fill and group join excluded) and reports the
    # broker's CPU for it; the client's CPU is not separable from the fill, so it stays unknown.
    u = {"wall": phase.seconds, "client_cpu": None, "client_main_cpu": None, "broker_cpu": phase.broker_cpu,
         "machine_cpu": None, "other_cpu": None}
    sz = value_size(size)
    return {"records": phase.records, "commits": phase.transactions,
            "records_per_s": phase.records / phase.seconds, "mb_per_s": phase.records * sz / phase.seconds / wl.MB,
            "commits_per_s": phase.transactions / phase.seconds, "usage": u}
