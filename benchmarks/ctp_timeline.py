"""Where one consume-transform-produce transaction's time goes, on kbroker and on the null broker.

    .venv/bin/python benchmarks/ctp_timeline.py [--brokers kbroker,null] [--records 100000] [--batch 500]
                                                [--skip 20] [--tree PATH]

Runs txn_bench's CTP phase (``bench_ctp``: read_committed group member, one transactional producer,
``--batch`` records per transaction, send_offsets_to_transaction) against a kbroker whose request
log is at DEBUG with microsecond timestamps (KBROKERTEST_LOG_MICROS), then against the null broker
with its request trace (NULL_BROKER_TRACE, null_broker.py) — the same trace point on both: the
broker's own time for a request (kbroker: the handler; null broker: decode, answer and encode) and
the wall-clock time it was answered. The transactional requests (AddOffsetsToTxn, TxnOffsetCommit,
AddPartitionsToTxn, Produce, EndTxn) are cut into transactions at each EndTxn; for the most common
order of requests it prints, per step, the median broker time and the median gap before it (the
client's share: its Python work, librdkafka's timers and the network), and the median transaction.
``--tree`` runs kbroker from another source tree (a paired before/after timeline).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

import null_broker as nb  # noqa: E402
import txn_bench  # noqa: E402

from protocol.api_table import get_spec  # noqa: E402
from tests.helpers.broker_proc import BrokerProcess  # noqa: E402

TXN_APIS = ("AddOffsetsToTxn", "TxnOffsetCommit", "AddPartitionsToTxn", "Produce", "EndTxn")
_LOG = re.compile(r"^(\S+) DEBUG\s+kbroker\.request: (\w+) v\d+ corr=\d+ client=\S+ conn=(\d+) "
                  r"from=\S+ took ([\d.]+) ms")


@dataclass
class Event:
    api: str
    conn: int
    start: float
    end: float


def _phase(bootstrap: str, pid: int | None, records: int, batch: int) -> txn_bench.CtpPhase:
    stamp = int(time.time() * 1000)
    topic, src, dst = f"tl-{stamp}", f"tl-in-{stamp}", f"tl-out-{stamp}"
    txn_bench.create_topics(bootstrap, topic, src, dst)
    txn_bench.warm_up(bootstrap, topic, pid)
    return txn_bench.bench_ctp(bootstrap, src, dst, records, batch, pid)


def run_kbroker(records: int, batch: int, tree: Path | None) -> tuple[list[Event], txn_bench.CtpPhase]:
    with tempfile.TemporaryDirectory(prefix="kbroker-ctp-tl-") as tmp:
        b = BrokerProcess(Path(tmp) / "data", overrides={"kbroker.log.level": "DEBUG"},
                          env={"KBROKERTEST_LOG_MICROS": "1"})
        if tree is not None:  # python -m broker from that tree
            import tests.helpers.broker_proc as bp

            old = bp.REPO_ROOT
            bp.REPO_ROOT = tree
        try:
            b.start(60)
        finally:
            if tree is not None:
                bp.REPO_ROOT = old
        try:
            phase = _phase(b.bootstrap, b.proc.pid if b.proc else None, records, batch)
        finally:
            b.stop()
            b.kill()
        events = []
        for line in b.log_path.read_text(errors="replace").splitlines():
            m = _LOG.match(line)
            if m:
                end = datetime.strptime(m[1], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()
                events.append(Event(m[2], int(m[3]), end - float(m[4]) / 1000, end))
        return events, phase


def run_null(records: int, batch: int) -> tuple[list[Event], txn_bench.CtpPhase]:
    with tempfile.TemporaryDirectory(prefix="null-ctp-tl-") as tmp:
        trace = Path(tmp) / "trace"
        n = nb.NullBrokerProcess(value_size=txn_bench.VALUE_SIZE, script=HERE / "null_txn_broker.py",
                                 env={"NULL_BROKER_TRACE": str(trace)})
        n.start()
        try:
            phase = _phase(n.bootstrap, n.pid, records, batch)
        finally:
            n.stop()
        events = []
        for line in trace.read_text().splitlines():
            end, key, conn, _corr, took = line.split()
            spec = get_spec(int(key))
            events.append(Event(spec.name if spec else key, int(conn), float(end) - float(took) / 1000, float(end)))
        return events, phase


def transactions(events: list[Event]) -> list[list[Event]]:
    """The CTP phase's transactional requests, one list per transaction (cut after each EndTxn)."""
    evs = sorted((e for e in events if e.api in TXN_APIS), key=lambda e: e.start)
    first = next((i for i, e in enumerate(evs) if e.api == "AddOffsetsToTxn"), len(evs))
    # back to the EndTxn before: the fill's and the warm-up's requests come earlier
    while first > 0 and evs[first - 1].api != "EndTxn":
        first -= 1
    out: list[list[Event]] = []
    cur: list[Event] = []
    for e in evs[first:]:
        cur.append(e)
        if e.api == "EndTxn":
            out.append(cur)
            cur = []
    return out


def summarise(name: str, events: list[Event], skip: int) -> dict[str, object]:
    txns = transactions(events)
    # each needs the EndTxn before it (the client's share before its first request)
    pairs = [(txns[i - 1][-1], txns[i]) for i in range(max(1, skip), len(txns))]
    patterns = collections.Counter(tuple(e.api for e in t) for _, t in pairs)
    if not patterns:
        raise SystemExit(f"{name}: no transactions found in the trace")
    pattern, count = patterns.most_common(1)[0]
    rows: list[tuple[str, float, float]] = []
    for i, api in enumerate(pattern):
        gaps, took = [], []
        for prev_end, t in pairs:
            if tuple(e.api for e in t) != pattern:
                continue
            before = prev_end.end if i == 0 else t[i - 1].end
            gaps.append((t[i].start - before) * 1e6)
            took.append((t[i].end - t[i].start) * 1e6)
        rows.append((api, statistics.median(gaps), statistics.median(took)))
    totals = [(t[-1].end - prev.end) * 1e6 for prev, t in pairs]
    return {"name": name, "pattern": pattern, "count": count, "of": len(pairs), "rows": rows,
            "total": statistics.median(totals)}


def show(s: dict[str, object], phase: txn_bench.CtpPhase) -> str:
    lines = [f"{s['name']}: {phase.records / phase.seconds:,.0f} records/s, {phase.transactions} transactions; "
             f"{s['count']} of {s['of']} measured transactions in the order {' → '.join(s['pattern'])} "
             f"(load1 {os.getloadavg()[0]:.2f})",
             "| step | client before (µs) | broker (µs) |", "| --- | ---: | ---: |"]
    client = broker = 0.0
    for api, gap, took in s["rows"]:
        lines.append(f"| {api} | {gap:,.0f} | {took:,.0f} |")
        client += gap
        broker += took
    lines.append(f"| sum of medians | {client:,.0f} | {broker:,.0f} |")
    lines.append(f"median transaction (EndTxn answer to EndTxn answer): {s['total']:,.0f} µs")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", default="kbroker,null")
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--skip", type=int, default=20, help="transactions left out at the start")
    ap.add_argument("--tree", type=Path, help="run kbroker from this source tree")
    args = ap.parse_args()
    for name in args.brokers.split(","):
        if name == "kbroker":
            events, phase = run_kbroker(args.records, args.batch, args.tree)
        elif name == "null":
            events, phase = run_null(args.records, args.batch)
        else:
            raise SystemExit(f"unknown broker {name}")
        print(show(summarise(name, events, args.skip), phase), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
