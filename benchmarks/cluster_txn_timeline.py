"""Where one transaction's time goes in a 3-broker cluster: the brokers' own request timings, lined up.

    .venv/bin/python benchmarks/cluster_txn_timeline.py [--transactions 300] [--partitions 4]

Starts etcd and 3 kbroker processes (RF=3, min.insync.replicas=2 topics, internal topics RF=3) with
request logging at DEBUG and microsecond timestamps (KBROKERTEST_LOG_MICROS), runs a transactional
confluent-kafka producer (10 x 100 B records over ``--partitions`` partitions per transaction, as
cluster_txn_bench's commits phase), then reads every broker's request log. For each client request
of a transaction (AddPartitionsToTxn, Produce, EndTxn) it reports how long the broker took, and the
gaps in between (the client's share, including librdkafka's 1 ms registration timer); and, inside
those requests, the inter-broker requests they caused (KIP-890 verification, WriteTxnMarkers) and the
follower fetches that carried their writes. Medians over the transactions after a warm-up.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.helpers.cluster_proc import BrokerCluster  # noqa: E402
from tests.helpers.etcd_proc import EtcdProcess  # noqa: E402

_LINE = re.compile(r"^(\S+) DEBUG\s+kbroker\.request: (\w+) v(\d+) corr=(\d+) client=(\S+) conn=(\d+) "
                   r"from=\S+ took ([\d.]+) ms error=(\S+)")


def _ts(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def parse(log: Path, broker: int) -> list[dict]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        m = _LINE.match(line)
        if m:
            end = _ts(m[1])
            took = float(m[7]) / 1000
            out.append({"broker": broker, "api": m[2], "client": m[5], "conn": int(m[6]), "start": end - took,
                        "end": end, "took": took, "error": m[8]})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transactions", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--show", type=int, default=0, help="also print every request of this many transactions")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kbroker-tl-") as tmp:
        etcd = EtcdProcess(Path(tmp) / "etcd")
        etcd.start()
        cluster = BrokerCluster(etcd, Path(tmp), 3, **{
            "broker.session.timeout.ms": "9000", "broker.heartbeat.interval.ms": "2000",
            "kbroker.log.level": "DEBUG", "offsets.topic.replication.factor": "3",
            "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2"})
        for b in cluster.brokers.values():
            b.env["KBROKERTEST_LOG_MICROS"] = "1"
        try:
            cluster.start()
            bs = cluster.bootstrap
            admin = AdminClient({"bootstrap.servers": bs})
            admin.create_topics([NewTopic("tl", args.partitions, 3, config={"min.insync.replicas": "2"})])["tl"].result(60)
            p = Producer({"bootstrap.servers": bs, "transactional.id": "timeline", "linger.ms": 0,
                          "client.id": "txn-client"})
            p.init_transactions(60)
            value = b"x" * 100
            for _ in range(args.transactions):
                p.begin_transaction()
                for r in range(10):
                    p.produce("tl", value, partition=r % args.partitions)
                p.commit_transaction(60)
            p.flush(30)
            time.sleep(1)
        finally:
            cluster.stop()
            etcd.stop()
        reqs = []
        for n, b in cluster.brokers.items():
            reqs += parse(b.log_path, n)
    reqs.sort(key=lambda r: r["start"])
    client = [r for r in reqs if r["client"] == "txn-client"]
    # One transaction: AddPartitionsToTxn, Produce(s), EndTxn, in this order (librdkafka's).
    txns: list[dict] = []
    cur: dict | None = None
    for r in client:
        if r["api"] == "AddPartitionsToTxn":
            cur = {"add": r, "produce": [], "end": None}
            txns.append(cur)
        elif cur is not None and r["api"] == "Produce":
            cur["produce"].append(r)
        elif cur is not None and r["api"] == "EndTxn":
            cur["end"] = r
    txns = [t for t in txns if t["end"] is not None and t["produce"]][args.warmup:]
    seg: dict[str, list[float]] = {k: [] for k in (
        "broker: AddPartitionsToTxn", "client: -> Produce", "broker: Produce (first start -> last end)",
        "client: -> EndTxn", "broker: EndTxn", "client: EndTxn answer -> next AddPartitionsToTxn", "total")}
    inner: dict[str, list[float]] = {"verification (inter-broker AddPartitionsToTxn) during Produce": [],
                                      "WriteTxnMarkers after EndTxn": [], "markers: EndTxn end -> last marker end": []}
    for i, t in enumerate(txns):
        pstart = min(r["start"] for r in t["produce"])
        pend = max(r["end"] for r in t["produce"])
        seg["broker: AddPartitionsToTxn"].append(t["add"]["took"])
        seg["client: -> Produce"].append(pstart - t["add"]["end"])
        seg["broker: Produce (first start -> last end)"].append(pend - pstart)
        seg["client: -> EndTxn"].append(t["end"]["start"] - pend)
        seg["broker: EndTxn"].append(t["end"]["took"])
        if i + 1 < len(txns):
            seg["client: EndTxn answer -> next AddPartitionsToTxn"].append(txns[i + 1]["add"]["start"] - t["end"]["end"])
            seg["total"].append(txns[i + 1]["add"]["start"] - t["add"]["start"])
        ver = [r for r in reqs if r["api"] == "AddPartitionsToTxn" and r["client"].startswith("broker-")
               and pstart <= r["start"] <= pend]
        if ver:
            inner["verification (inter-broker AddPartitionsToTxn) during Produce"].append(max(r["took"] for r in ver))
        nxt = txns[i + 1]["add"]["start"] if i + 1 < len(txns) else t["end"]["end"] + 0.05
        mk = [r for r in reqs if r["api"] == "WriteTxnMarkers" and t["end"]["start"] <= r["start"] <= nxt]
        if mk:
            inner["WriteTxnMarkers after EndTxn"].append(max(r["took"] for r in mk))
            inner["markers: EndTxn end -> last marker end"].append(max(r["end"] for r in mk) - t["end"]["end"])
    for t, nxt in list(zip(txns, txns[1:], strict=False))[len(txns) // 2:len(txns) // 2 + args.show]:
        t0 = t["add"]["start"]
        print("--- one transaction (t=0 at its AddPartitionsToTxn) ---")
        for r in reqs:
            if t0 <= r["start"] < nxt["add"]["start"]:
                print(f"{(r['start'] - t0) * 1e6:8.0f} -> {(r['end'] - t0) * 1e6:8.0f} us  broker {r['broker']}  "
                      f"{r['api']:<20} {r['client']:<22} err={r['error']}")
    print(f"{len(txns)} transactions after {args.warmup} warm-up ones; medians in microseconds:\n")
    print("| segment | µs |\n| --- | ---: |")
    for k, v in seg.items():
        if v:
            print(f"| {k} | {statistics.median(v) * 1e6:.0f} |")
    print("\nInside them (when present):\n\n| inner | µs | in how many |\n| --- | ---: | ---: |")
    for k, v in inner.items():
        if v:
            print(f"| {k} | {statistics.median(v) * 1e6:.0f} | {len(v)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
