"""How long a new RF=3 topic's first acks=all write per partition takes, on fresh 3-broker clusters.

    .venv/bin/python benchmarks/new_topic_first_write.py [--clusters 5] [--topics 4] [--partitions 4]

For each of ``--clusters`` fresh clusters (a real etcd and 3 kbroker processes on 127.0.0.1, default
settings: replica.fetch.wait.max.ms 500, replica.fetch.backoff.ms 1000), ``--topics`` topics are
created one after the other; once every partition of a topic has a leader in Metadata, one record is
produced with acks=all to each partition in turn and the time to its acknowledgement is taken. The
first topic of a cluster is the one whose followers start new fetchers, and a new fetcher's first
fetch can reach its leader before the leader has applied the topic's metadata (see
docs/cluster-design.md, "A follower ahead of its leader"); later topics go to fetchers already
parked on their leaders ("A leadership taken up"). Prints every figure and writes
benchmarks/results/new_topic_first_write.md (``--out``). Every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from lib_workloads import wait_leaders  # noqa: E402

from tests.helpers.cluster_proc import BrokerCluster  # noqa: E402
from tests.helpers.etcd_proc import EtcdProcess  # noqa: E402


def one_cluster(topics: int, partitions: int) -> list[list[float]]:
    """Per topic, the first write's milliseconds per partition."""
    with tempfile.TemporaryDirectory(prefix="kbroker-ntfw-") as tmp:
        etcd = EtcdProcess(Path(tmp) / "etcd")
        etcd.start()
        cluster = BrokerCluster(etcd, Path(tmp), 3)
        try:
            cluster.start()
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0,
                          "message.timeout.ms": 30_000})
            out = []
            for n in range(topics):
                topic = f"first-write-{n}"
                admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(60)
                wait_leaders(admin, topic, partitions, 60)
                row = []
                for q in range(partitions):
                    t0 = time.perf_counter()
                    p.produce(topic, b"x", partition=q)
                    if p.flush(60):
                        raise RuntimeError(f"{topic}-{q}: first write not acknowledged in 60 s")
                    row.append((time.perf_counter() - t0) * 1000)
                out.append(row)
            del p, admin
            return out
        finally:
            try:
                cluster.stop()
            finally:
                etcd.stop()
                etcd.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clusters", type=int, default=5)
    ap.add_argument("--topics", type=int, default=4)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "new_topic_first_write.md")
    args = ap.parse_args()
    runs = []
    for c in range(args.clusters):
        rows = one_cluster(args.topics, args.partitions)
        runs.append(rows)
        for n, row in enumerate(rows):
            print(f"cluster {c + 1} topic {n + 1}: " + ", ".join(f"{ms:.1f}" for ms in row) + " ms", flush=True)
    first = [max(rows[0]) for rows in runs]
    later = [max(r) for rows in runs for r in rows[1:]]
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    lines = [
        "# new_topic_first_write: a new RF=3 topic's first acks=all write per partition",
        "",
        f"`benchmarks/new_topic_first_write.py`, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit {commit}, "
        f"{platform.machine()}, Python {platform.python_version()}; {args.clusters} fresh 3-broker clusters, "
        f"{args.topics} topics of {args.partitions} partitions each, default replica.fetch settings.",
        "",
        "| | slowest partition of the topic, ms: median | max |",
        "| --- | ---: | ---: |",
        f"| a fresh cluster's first topic | {statistics.median(first):.1f} | {max(first):.1f} |",
    ]
    if later:
        lines.append(f"| later topics | {statistics.median(later):.1f} | {max(later):.1f} |")
    lines += ["", "| cluster | topic | ms per partition |", "| --- | --- | --- |"]
    for c, rows in enumerate(runs):
        for n, row in enumerate(rows):
            lines.append(f"| {c + 1} | {n + 1} | " + ", ".join(f"{ms:.1f}" for ms in row) + " |")
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
