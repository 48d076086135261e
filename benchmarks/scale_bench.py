"""How a broker's costs grow with the partitions it holds (issue 31, item 5): one broker, and three
brokers with RF=3, at 1k, 3k and 10k partitions.

    .venv/bin/python benchmarks/scale_bench.py [--sizes 1000,3000,10000] [--cluster] [--single]
        [--topic-partitions 10] [--out benchmarks/results]

For each size, on a fresh broker (or cluster: etcd + 3 kbroker processes, RF=3, min.insync=2):
- creation: ``size / topic-partitions`` topics of ``topic-partitions`` partitions, 50 topics per
  CreateTopics request (confluent-kafka AdminClient), wall time in all;
- Metadata for every topic as a client sees it (protocol client, median of 5);
- idle CPU over 10 s with every partition idle (per broker), RSS and open files (per broker, and
  per partition held);
- produce (confluent-kafka, acks=all, 1 KiB, 100k records) spread over 1,000 partitions, and over
  4 partitions, in the same process;
- single broker: a clean stop (SIGTERM to exit), a restart to serving (ApiVersions answered and
  Metadata listing every partition), kill -9 and the restart after it;
- cluster: kill -9 of the broker leading the most partitions and the time until every one of them
  has another leader (Metadata polled), and etcd keys per partition.
Every figure at every size goes to ``scale_bench.md`` / ``.json`` and a chart ``scale.png``; every
loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka.protocol.metadata import MetadataRequest  # noqa: E402
from lib_meter import process_cpu  # noqa: E402

from protocol.client import ProtocolClient  # noqa: E402
from tests.helpers.broker_proc import BrokerProcess  # noqa: E402
from tests.helpers.cluster_proc import BrokerCluster  # noqa: E402
from tests.helpers.etcd_proc import EtcdProcess  # noqa: E402

CLUSTER_SETTINGS = {"broker.session.timeout.ms": "9000", "broker.heartbeat.interval.ms": "2000",
                    "kbroker.max.partitions": "100000"}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def create(bootstrap: str, total: int, per_topic: int, rf: int) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"s{i:05d}" for i in range(total // per_topic)]
    t0 = time.perf_counter()
    for i in range(0, len(names), 50):
        futures = admin.create_topics([NewTopic(n, per_topic, rf) for n in names[i:i + 50]], request_timeout=600)
        for f in futures.values():
            f.result(600)
    return time.perf_counter() - t0


async def _metadata(host: str, port: int) -> tuple[float, int]:
    async with ProtocolClient(host, port) as c:
        times = []
        parts = 0
        for _ in range(5):
            t0 = time.perf_counter()
            resp = await c.request(MetadataRequest(version=12, topics=None, allow_auto_topic_creation=False,
                                                   include_topic_authorized_operations=False), 12)
            times.append(time.perf_counter() - t0)
            parts = sum(len(t.partitions) for t in resp.topics)
        return statistics.median(times), parts


def metadata_ms(bootstrap: str) -> tuple[float, int]:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    t, parts = asyncio.run(_metadata(host, int(port)))
    return t * 1000, parts


def idle_cpu(pids: list[int], seconds: float = 10.0) -> list[float]:
    a = [process_cpu(p) or 0.0 for p in pids]
    time.sleep(seconds)
    return [((process_cpu(p) or 0.0) - x) / seconds * 100 for p, x in zip(pids, a, strict=True)]


def produce(bootstrap: str, topic: str, partitions: int, records: int = 100_000) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1 << 20,
                  "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2 << 20})
    value = os.urandom(1024)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # every partition has a leader
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions and all(
                q.leader >= 0 for q in md.partitions.values()):
            break
        time.sleep(0.2)
    for i in range(100):
        p.produce(topic, value, partition=i % partitions)
    p.flush(60)
    t0 = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
    left = p.flush(300)
    dt = time.perf_counter() - t0
    if left:
        raise RuntimeError(f"{left} records not delivered")
    return records * 1024 / dt / 1e6


def wait_serving(b: BrokerProcess, expected: int, deadline_s: float = 600) -> float:
    t0 = time.perf_counter()
    b.start(timeout=deadline_s)
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        _, parts = metadata_ms(b.bootstrap)
        if parts >= expected:
            break
        time.sleep(0.1)
    return time.perf_counter() - t0


def single(size: int, per_topic: int, tmp: Path) -> dict[str, Any]:
    b = BrokerProcess(tmp / f"single-{size}", overrides={"kbroker.max.partitions": "100000"})
    b.start(60)
    out: dict[str, Any] = {"partitions": size}
    try:
        out["create_s"] = create(b.bootstrap, size, per_topic, 1)
        admin = AdminClient({"bootstrap.servers": b.bootstrap})  # kept alive until the futures are done
        for f in admin.create_topics([NewTopic("p1000", 1000, 1), NewTopic("p4", 4, 1)]).values():
            f.result(120)
        expected = size + 1004
        out["metadata_ms"], parts = metadata_ms(b.bootstrap)
        assert parts >= expected, parts
        pid = b.proc.pid  # type: ignore[union-attr]
        out["idle_cpu_pct"] = idle_cpu([pid])[0]
        out["rss_mb"] = rss_mb(pid)
        out["rss_kb_per_partition"] = out["rss_mb"] * 1024 / expected
        out["open_files"] = open_files(pid)
        out["open_files_per_partition"] = out["open_files"] / expected
        out["produce_1000_mb_s"] = produce(b.bootstrap, "p1000", 1000)
        out["produce_4_mb_s"] = produce(b.bootstrap, "p4", 4)
        t0 = time.perf_counter()
        b.stop(timeout=300)
        out["clean_stop_s"] = time.perf_counter() - t0
        out["restart_clean_s"] = wait_serving(b, expected)
        assert b.proc is not None
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait(30)
        out["restart_after_kill_s"] = wait_serving(b, expected)
    finally:
        b.stop(timeout=300)
        b.kill()
    return out


def cluster(size: int, per_topic: int, tmp: Path) -> dict[str, Any]:
    etcd = EtcdProcess(tmp / f"etcd-{size}")
    etcd.start()
    c = BrokerCluster(etcd, tmp / f"cluster-{size}", 3, **CLUSTER_SETTINGS)
    out: dict[str, Any] = {"partitions": size}
    try:
        c.start()
        bs = c.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic("p300", 300, 3, config={"min.insync.replicas": "2"})])["p300"].result(120)
        out["produce_300_before_mb_s"] = produce(bs, "p300", 300)
        out["create_s"] = create(bs, size, per_topic, 3)
        out["metadata_ms"], _ = metadata_ms(bs)
        pids = [b.proc.pid for b in c.brokers.values()]  # type: ignore[union-attr]
        cpu = idle_cpu(pids)
        out["idle_cpu_pct_per_broker"] = cpu
        out["rss_mb_per_broker"] = [rss_mb(p) for p in pids]
        out["open_files_per_broker"] = [open_files(p) for p in pids]
        out["produce_300_after_mb_s"] = produce(bs, "p300", 300)
        out["produce_300_ratio"] = out["produce_300_after_mb_s"] / out["produce_300_before_mb_s"]
        out["etcd_keys"] = etcd_keys(etcd)
        # Controller failover: the broker leading the most partitions is killed.
        md = admin.list_topics(timeout=60)
        counts: dict[int, int] = {}
        for t in md.topics.values():
            for p in t.partitions.values():
                counts[p.leader] = counts.get(p.leader, 0) + 1
        victim = max(counts, key=lambda n: counts[n])
        led = {(t.topic, p.id) for t in md.topics.values() for p in t.partitions.values() if p.leader == victim}
        out["failover_leaderships"] = len(led)
        proc = c.brokers[victim].proc
        assert proc is not None
        t0 = time.perf_counter()
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        other = ",".join(b.bootstrap for n, b in c.brokers.items() if n != victim)
        admin2 = AdminClient({"bootstrap.servers": other})
        end = time.monotonic() + 300
        while time.monotonic() < end:
            md = admin2.list_topics(timeout=30)
            moved = sum(1 for t in md.topics.values() for p in t.partitions.values()
                        if (t.topic, p.id) in led and p.leader not in (victim, -1))
            if moved == len(led):
                break
            time.sleep(0.2)
        out["failover_s"] = time.perf_counter() - t0
    finally:
        c.stop()
        etcd.stop()
    return out


def etcd_keys(etcd: EtcdProcess) -> int:
    import base64
    import urllib.request

    body = json.dumps({"key": base64.b64encode(b"/kbroker/").decode(),
                       "range_end": base64.b64encode(b"/kbroker0").decode(), "count_only": True}).encode()
    req = urllib.request.Request(f"{etcd.endpoints.split(',')[0]}/v3/kv/range", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 - the test's own etcd on 127.0.0.1
        return int(json.loads(r.read()).get("count", 0))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,3000,10000")
    ap.add_argument("--topic-partitions", type=int, default=10)
    ap.add_argument("--single", action="store_true")
    ap.add_argument("--cluster", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    runs = [k for k in ("single", "cluster") if getattr(args, k)] or ["single", "cluster"]
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in runs}
    with tempfile.TemporaryDirectory(prefix="kbroker-scale-") as tmp:
        for kind in runs:
            for size in sizes:
                r = (single if kind == "single" else cluster)(size, args.topic_partitions, Path(tmp))
                r["load_avg"] = os.getloadavg()[0]
                print(kind, json.dumps(r), flush=True)
                results[kind].append(r)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale_bench.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
