"""How a broker's costs grow with the partitions it holds (issue 31, item 5): one broker, and three
brokers with RF=3, at 1k, 3k and 10k partitions.

    .venv/bin/python benchmarks/scale_bench.py [--sizes 1000,3000,10000] [--cluster] [--single]
        [--topic-partitions 10] [--connections 5000] [--groups 1000] [--out benchmarks/results]

For each size, on a fresh broker (or cluster: etcd + 3 kbroker processes, RF=3, min.insync=2):
- creation: ``size / topic-partitions`` topics of ``topic-partitions`` partitions, 50 topics per
  CreateTopics request (confluent-kafka AdminClient), wall time in all;
- Metadata for every topic as a client sees it (protocol client, median of 5);
- idle CPU over 10 s with every partition idle (per broker), RSS and open files (per broker, and
  per partition held);
- produce (confluent-kafka, acks=all, 1 KiB, 100k records) spread over 1,000 partitions, and over
  4 partitions, in the same process;
- single broker, client connections (``--connections N``, 0 skips): N raw TCP connections from
  127.0.0.1 (raw sockets on one asyncio loop: librdkafka would run a thread per broker per client),
  each sending one ApiVersions v0 and reading its answer, 500 in flight at a time; seconds until all
  N are answered, the broker's RSS before and with all open (KB per connection), its open files,
  its idle CPU over 10 s with all N open and silent, Metadata latency with all N open; then all are
  closed and the time until the broker's open files are back (bounded). No broker override is
  needed: max.connections and max.connections.per.ip default to 2^31-1 as in Kafka, the listen
  backlog is 1024;
- single broker, consumer groups (``--groups N``, 0 skips): N KIP-848 groups of one member each
  (ConsumerGroupHeartbeat v1 over 4 pipelined protocol-client connections, subscribed to ``p4``);
  seconds until every member has an epoch > 0 and an assignment, then 15 s of heartbeats at the
  interval the broker answers, with the broker's CPU over that window and its RSS growth (KB per
  group); one OffsetCommit v9 per group with the member's id and epoch, OffsetFetch v8 for all
  N groups (median of 5), ListGroups (median of 5); the members leave (member epoch -1) at the end. The groups'
  records stay in ``__consumer_offsets``, so the restart figures below include loading them.
  RSS per connection / per group is a lower bound: they are measured after the produce runs, whose
  freed heap the allocator hands out again before RSS grows (at 100-600 connections it shows ~0.1
  KB; benchmarks/connection_memory.py counts Python allocations with tracemalloc instead);
- single broker: a clean stop (SIGTERM to exit), a restart to serving (ApiVersions answered and
  Metadata listing every partition), kill -9 and the restart after it;
- cluster: kill -9 of the broker leading the most partitions and the time until every one of them
  has another leader (Metadata polled), and etcd keys per partition; etcd's traffic to the brokers
  (its etcd_network_client_grpc_sent_bytes_total counter, mostly watch events) per partition created
  and per second while everything is idle.
Every figure at every size goes to ``scale_bench.md`` (a table per mode: one row per figure, one
column per size) / ``.json`` and a chart ``scale.png`` (the cost and speed figures in ``CHART``
against the partition count, one panel each; counts and error counts are in the table only); every loop is bounded in count and time. The process raises its open-files
soft limit to the hard limit at start (the broker inherits it): N connections cost N descriptors on
each side.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import statistics
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka.protocol.admin import ListGroupsRequest  # noqa: E402
from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest  # noqa: E402
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest  # noqa: E402
from lib_meter import process_cpu  # noqa: E402

from protocol.client import ProtocolClient  # noqa: E402
from protocol.consumer_group_api import ConsumerGroupHeartbeatRequest  # noqa: E402
from tests.helpers.broker_proc import BrokerProcess  # noqa: E402
from tests.helpers.cluster_proc import BrokerCluster  # noqa: E402
from tests.helpers.etcd_proc import EtcdProcess  # noqa: E402
from tests.helpers.wire import encode_request  # noqa: E402

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


def raise_nofile_limit() -> tuple[int, int]:
    """Soft open-files limit up to the hard one (brokers started afterwards inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):  # an unlimited hard limit is above fs.nr_open: keep the soft one
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)


async def _open_connections(host: str, port: int, n: int, batch: int = 500) -> list[asyncio.StreamWriter]:
    """N connections, each answered one ApiVersions v0; ``batch`` in flight (the listen backlog is 1024)."""
    frame = encode_request(ApiVersionsRequest(version=0), 0, 1, client_id="scale-bench")

    async def one() -> asyncio.StreamWriter:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(frame)
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            await reader.readexactly(size)
        except BaseException:
            writer.close()
            raise
        return writer

    writers: list[asyncio.StreamWriter] = []
    try:
        for i in range(0, n, batch):
            got = await asyncio.wait_for(asyncio.gather(*(one() for _ in range(min(batch, n - i))),
                                                        return_exceptions=True), 120)
            writers += [w for w in got if isinstance(w, asyncio.StreamWriter)]
            failed = [e for e in got if not isinstance(e, asyncio.StreamWriter)]
            if failed:
                raise RuntimeError(f"{len(failed)} of {len(got)} connections failed, e.g. {failed[0]!r}")
    except BaseException:
        for w in writers:
            w.close()
        raise
    return writers


async def _connections(b: BrokerProcess, n: int, out: dict[str, Any]) -> None:
    pid = b.proc.pid  # type: ignore[union-attr]
    host, port = b.bootstrap.rsplit(":", 1)
    files_before = open_files(pid)
    rss_before = rss_mb(pid)
    t0 = time.perf_counter()
    writers = await _open_connections(host, int(port), n)
    try:
        out["conn_open_s"] = time.perf_counter() - t0
        out["conn_rss_before_mb"] = rss_before
        out["conn_rss_open_mb"] = rss_mb(pid)
        out["conn_kb_per_connection"] = (out["conn_rss_open_mb"] - rss_before) * 1024 / n
        out["conn_open_files"] = open_files(pid)
        # The blocking measurements run on a thread: this loop keeps the N sockets open meanwhile.
        out["conn_idle_cpu_pct"] = (await asyncio.to_thread(idle_cpu, [pid]))[0]
        out["conn_metadata_ms"], _ = await asyncio.to_thread(metadata_ms, b.bootstrap)
    finally:
        t0 = time.perf_counter()
        for w in writers:
            w.close()
        await asyncio.gather(*(w.wait_closed() for w in writers), return_exceptions=True)
    end = time.monotonic() + 120
    while open_files(pid) > files_before + 10 and time.monotonic() < end:
        await asyncio.sleep(0.05)
    out["conn_close_s"] = time.perf_counter() - t0
    out["conn_open_files_after_close"] = open_files(pid)
    out["conn_rss_after_close_mb"] = rss_mb(pid)


def connections(b: BrokerProcess, n: int, out: dict[str, Any]) -> None:
    """N idle client connections on the running broker (figures ``conn_*`` into ``out``)."""
    out["connections"] = n
    asyncio.run(_connections(b, n, out))


RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


class _Member:
    """One KIP-848 member, the only one of its group, as a consumer would keep it."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.member_id = str(uuid.uuid4())  # v1: the client names the member
        self.epoch = 0
        self.owned: dict[uuid.UUID, list[int]] | None = None  # None until an assignment is received
        self.interval_s = 5.0
        self.heartbeats = 0
        self.errors = 0
        self.last = 0.0  # monotonic time of the last answer

    def request(self, leave: bool = False) -> Any:
        TP = ConsumerGroupHeartbeatRequest.TopicPartitions
        if self.epoch == 0:  # the join: subscription and rebalance timeout are required
            return ConsumerGroupHeartbeatRequest(
                version=1, group_id=self.group, member_id=self.member_id, member_epoch=0, instance_id=None,
                rack_id=None, rebalance_timeout_ms=300000, subscribed_topic_names=["p4"],
                subscribed_topic_regex=None, server_assignor=None, topic_partitions=[])
        # Later heartbeats: unchanged fields null, the owned partitions sent (as a full heartbeat).
        return ConsumerGroupHeartbeatRequest(
            version=1, group_id=self.group, member_id=self.member_id, member_epoch=-1 if leave else self.epoch,
            instance_id=None, rack_id=None, rebalance_timeout_ms=-1, subscribed_topic_names=None,
            subscribed_topic_regex=None, server_assignor=None,
            topic_partitions=None if leave else [TP(version=1, topic_id=t, partitions=ps)
                                                 for t, ps in (self.owned or {}).items()])

    def answer(self, r: Any) -> int:
        self.heartbeats += 1
        self.last = time.monotonic()
        if r.error_code:
            self.errors += 1
            return r.error_code
        self.epoch = r.member_epoch
        if r.heartbeat_interval_ms > 0:
            self.interval_s = r.heartbeat_interval_ms / 1000
        if r.assignment is not None:
            self.owned = {tp.topic_id: list(tp.partitions) for tp in r.assignment.topic_partitions}
        return 0

    @property
    def joined(self) -> bool:
        return self.epoch > 0 and bool(self.owned)


async def _groups(b: BrokerProcess, n: int, out: dict[str, Any], clients: int = 4, in_flight: int = 200,
                  keepalive_s: float = 15.0) -> None:
    pid = b.proc.pid  # type: ignore[union-attr]
    host, port = b.bootstrap.rsplit(":", 1)
    conns = [await ProtocolClient(host, int(port), client_id=f"scale-bench-{i}").connect() for i in range(clients)]
    try:
        members = [_Member(f"scale-g{i:05d}") for i in range(n)]
        # FindCoordinator creates __consumer_offsets; heartbeats get COORDINATOR_NOT_AVAILABLE before.
        end = time.monotonic() + 120
        while True:
            r = await conns[0].request(FindCoordinatorRequest(version=3, key=members[0].group, key_type=0), 3)
            if r.error_code == 0:
                break
            if time.monotonic() > end:
                raise RuntimeError(f"FindCoordinator: error {r.error_code}")
            await asyncio.sleep(0.2)
        rss_before = rss_mb(pid)
        gate = asyncio.Semaphore(in_flight)

        async def join(i: int, m: _Member) -> None:
            deadline = time.monotonic() + 300
            while not m.joined:  # a first heartbeat may bring no assignment yet: heartbeat again
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{m.group}: no assignment after 300 s (epoch {m.epoch})")
                async with gate:
                    err = m.answer(await conns[i % clients].request(m.request(), 1))
                if err and err not in RETRIABLE:
                    raise RuntimeError(f"{m.group}: heartbeat error {err}")
                if err or not m.joined:
                    await asyncio.sleep(0.1)

        t0 = time.perf_counter()
        await asyncio.gather(*(join(i, m) for i, m in enumerate(members)))
        out["groups_join_s"] = time.perf_counter() - t0
        out["groups_heartbeat_interval_ms"] = members[0].interval_s * 1000
        join_beats = sum(m.heartbeats for m in members)
        out["groups_join_heartbeats_per_member"] = join_beats / n
        join_errors = sum(m.errors for m in members)

        # Keep every member alive for keepalive_s, each at the interval the broker answered,
        # counted from its own last heartbeat (as a consumer does).
        async def keepalive(i: int, m: _Member, until: float) -> None:
            while True:
                due = m.last + m.interval_s
                if due >= until:
                    return
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                m.answer(await conns[i % clients].request(m.request(), 1))

        cpu0, w0 = process_cpu(pid) or 0.0, time.perf_counter()
        until = time.monotonic() + keepalive_s
        await asyncio.gather(*(keepalive(i, m, until) for i, m in enumerate(members)))
        await asyncio.sleep(max(0.0, until - time.monotonic()))
        wall = time.perf_counter() - w0
        out["groups_heartbeat_cpu_pct"] = ((process_cpu(pid) or 0.0) - cpu0) / wall * 100
        out["groups_heartbeats_per_s"] = (sum(m.heartbeats for m in members) - join_beats) / wall
        out["groups_heartbeat_errors"] = sum(m.errors for m in members) - join_errors
        out["groups_rss_mb"] = rss_mb(pid)
        out["groups_kb_per_group"] = (out["groups_rss_mb"] - rss_before) * 1024 / n

        # One offset per group, committed as the member (consumer protocol: its id and epoch, v9).
        C = OffsetCommitRequest.OffsetCommitRequestTopic

        async def commit(i: int, m: _Member) -> int:
            part = min(p for ps in (m.owned or {}).values() for p in ps)
            req = OffsetCommitRequest(version=9, group_id=m.group, generation_id_or_member_epoch=m.epoch,
                                      member_id=m.member_id, group_instance_id=None, topics=[
                                          C(version=9, name="p4", partitions=[C.OffsetCommitRequestPartition(
                                              version=9, partition_index=part, committed_offset=i + 1,
                                              committed_leader_epoch=-1, committed_metadata="")])])
            async with gate:
                r = await conns[i % clients].request(req, 9)
            return max(p.error_code for t in r.topics for p in t.partitions)

        t0 = time.perf_counter()
        codes = await asyncio.gather(*(commit(i, m) for i, m in enumerate(members)))
        out["groups_commit_s"] = time.perf_counter() - t0
        out["groups_commit_errors"] = sum(1 for c in codes if c)

        # Median of 5, as ListGroups below: one sample at 10,000 partitions once read 342 ms where 7
        # in a row later read 25-37 ms (and 24-71 ms at 1,000): single samples catch a collection.
        G = OffsetFetchRequest.OffsetFetchRequestGroup
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            r = await conns[0].request(OffsetFetchRequest(version=8, require_stable=False, groups=[
                G(version=8, group_id=m.group, topics=None) for m in members]), 8)
            times.append(time.perf_counter() - t0)
        out["groups_offset_fetch_ms"] = statistics.median(times) * 1000
        found = sum(1 for g in r.groups if not g.error_code and any(
            p.committed_offset > 0 for t in g.topics for p in t.partitions))
        out["groups_offsets_found"] = found

        times = []
        listed = 0
        for _ in range(5):
            t0 = time.perf_counter()
            r = await conns[0].request(ListGroupsRequest(version=5, states_filter=[], types_filter=[]), 5)
            times.append(time.perf_counter() - t0)
            listed = sum(1 for g in r.groups if g.group_id.startswith("scale-g"))
        out["groups_list_ms"] = statistics.median(times) * 1000
        out["groups_listed"] = listed

        async def leave(i: int, m: _Member) -> int:
            async with gate:
                return (await conns[i % clients].request(m.request(leave=True), 1)).error_code

        codes = await asyncio.gather(*(leave(i, m) for i, m in enumerate(members)))
        out["groups_leave_errors"] = sum(1 for c in codes if c)
    finally:
        for c in conns:
            await c.close()


def groups(b: BrokerProcess, n: int, out: dict[str, Any]) -> None:
    """N one-member KIP-848 consumer groups on the running broker (figures ``groups_*`` into ``out``)."""
    out["groups"] = n
    asyncio.run(_groups(b, n, out))


def single(size: int, per_topic: int, tmp: Path, n_connections: int = 0, n_groups: int = 0) -> dict[str, Any]:
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
        if n_connections:
            connections(b, n_connections, out)
        if n_groups:
            groups(b, n_groups, out)
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
        sent0 = etcd_sent_bytes(etcd)
        out["create_s"] = create(bs, size, per_topic, 3)
        # What etcd sent the three brokers (mostly watch events) while the partitions were created.
        out["etcd_sent_kb_per_partition_created"] = (etcd_sent_bytes(etcd) - sent0) / 1024 / size
        out["metadata_ms"], _ = metadata_ms(bs)
        pids = [b.proc.pid for b in c.brokers.values()]  # type: ignore[union-attr]
        sent0, t0 = etcd_sent_bytes(etcd), time.perf_counter()
        cpu = idle_cpu(pids)
        out["idle_cpu_pct_per_broker"] = cpu
        # Idle: lease keep-alives and nothing per partition, if the watch carries no per-partition traffic.
        out["etcd_sent_kb_s_idle"] = (etcd_sent_bytes(etcd) - sent0) / 1024 / (time.perf_counter() - t0)
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


def etcd_sent_bytes(etcd: EtcdProcess) -> float:
    """Bytes etcd has sent to its gRPC clients (watch events, reads, lease keep-alives): the sum of
    its own ``etcd_network_client_grpc_sent_bytes_total`` counter, from its /metrics endpoint."""
    import urllib.request

    with urllib.request.urlopen(f"{etcd.endpoints.split(',')[0]}/metrics", timeout=10) as r:  # noqa: S310
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("etcd_network_client_grpc_sent_bytes_total"))


# Row labels of the report's tables (units included); a figure without one is shown by its key.
LABELS = {
    "partitions": "partitions held (+1,004 of p1000/p4 on one broker)",
    "create_s": "creating them, s", "metadata_ms": "Metadata for all topics, ms (median of 5)",
    "idle_cpu_pct": "idle CPU, % of a core", "idle_cpu_pct_per_broker": "idle CPU per broker, % of a core",
    "rss_mb": "RSS, MB", "rss_kb_per_partition": "RSS per partition, KB", "rss_mb_per_broker": "RSS per broker, MB",
    "open_files": "open files", "open_files_per_partition": "open files per partition",
    "open_files_per_broker": "open files per broker",
    "produce_1000_mb_s": "produce over 1,000 partitions, MB/s", "produce_4_mb_s": "produce over 4 partitions, MB/s",
    "produce_300_before_mb_s": "produce to p300 before, MB/s", "produce_300_after_mb_s": "produce to p300 after, MB/s",
    "produce_300_ratio": "produce to p300 after / before", "etcd_keys": "etcd keys",
    "etcd_sent_kb_per_partition_created": "etcd to brokers while creating, KB per partition",
    "etcd_sent_kb_s_idle": "etcd to brokers while idle, KB/s",
    "failover_leaderships": "leaderships of the killed broker", "failover_s": "all re-elected after kill -9, s",
    "connections": "client connections opened",
    "conn_open_s": "connections: all opened and answered, s", "conn_rss_before_mb": "connections: RSS before, MB",
    "conn_rss_open_mb": "connections: RSS with all open, MB",
    "conn_kb_per_connection": "connections: RSS per connection, KB",
    "conn_open_files": "connections: broker open files with all open",
    "conn_idle_cpu_pct": "connections: idle CPU with all open, % of a core",
    "conn_metadata_ms": "connections: Metadata with all open, ms",
    "conn_close_s": "connections: closed until open files back, s",
    "conn_open_files_after_close": "connections: open files after close",
    "conn_rss_after_close_mb": "connections: RSS after close, MB",
    "groups": "consumer groups (KIP-848, one member each)", "groups_join_s": "groups: all joined and assigned, s",
    "groups_heartbeat_interval_ms": "groups: heartbeat interval answered, ms",
    "groups_join_heartbeats_per_member": "groups: heartbeats per member to join",
    "groups_heartbeat_cpu_pct": "groups: CPU while heartbeating, % of a core",
    "groups_heartbeats_per_s": "groups: heartbeats/s in that window",
    "groups_heartbeat_errors": "groups: heartbeat errors in that window",
    "groups_rss_mb": "groups: RSS with all alive, MB", "groups_kb_per_group": "groups: RSS per group, KB",
    "groups_commit_s": "groups: one OffsetCommit per group, s (all)", "groups_commit_errors": "groups: commit errors",
    "groups_offset_fetch_ms": "groups: one OffsetFetch for all, ms (median of 5)",
    "groups_offsets_found": "groups: groups with their offset fetched",
    "groups_list_ms": "groups: ListGroups, ms (median of 5)", "groups_listed": "groups: listed",
    "groups_leave_errors": "groups: leave errors",
    "clean_stop_s": "clean stop, s", "restart_clean_s": "restart to serving after a clean stop, s",
    "restart_after_kill_s": "restart to serving after kill -9, s", "load_avg": "1-min load average after the run",
}


def _cell(v: Any) -> str:
    if isinstance(v, list):
        return " / ".join(_cell(x) for x in v)
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def write_report(results: dict[str, list[dict[str, Any]]], out: Path) -> None:
    """scale_bench.md (one table per mode: a row per figure, a column per size) and scale.png."""
    lines = ["# Scale benchmark (issue 31 item 5)", "", "Written by `benchmarks/scale_bench.py`; raw figures in "
             "`scale_bench.json`. Load average after each run in the last row.", ""]
    for kind, runs in results.items():
        if not runs:
            continue
        keys = list(dict.fromkeys(k for r in runs for k in r if k != "partitions"))
        lines += [f"## {'one broker' if kind == 'single' else 'three brokers, RF=3'}", "",
                  "| figure | " + " | ".join(f"{r['partitions']:,} partitions" for r in runs) + " |",
                  "|---|" + "---:|" * len(runs)]
        lines += [f"| {LABELS.get(k, k)} | " + " | ".join(_cell(r.get(k, "")) for r in runs) + " |" for k in keys]
        lines.append("")
    (out / "scale_bench.md").write_text("\n".join(lines))
    chart(results, out / "scale.png")


# The chart's panels: what a partition, a connection or a group costs, and how fast things are
# (counts, error counts and before-values stay in the table only).
CHART = ("create_s", "metadata_ms", "idle_cpu_pct", "idle_cpu_pct_per_broker", "rss_kb_per_partition",
         "rss_mb_per_broker", "open_files_per_partition", "open_files_per_broker", "produce_1000_mb_s",
         "produce_4_mb_s", "produce_300_ratio", "etcd_keys", "etcd_sent_kb_per_partition_created", "failover_s", "clean_stop_s", "restart_clean_s",
         "restart_after_kill_s", "conn_open_s", "conn_kb_per_connection", "conn_idle_cpu_pct", "conn_metadata_ms",
         "groups_join_s", "groups_heartbeat_cpu_pct", "groups_kb_per_group", "groups_offset_fetch_ms",
         "groups_list_ms")


def chart(results: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """The CHART figures measured (lists, per broker: their maximum) against the partition count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in CHART if any(k in r for runs in results.values() for r in runs)]
    if not keys:
        return
    cols = 4
    rows = (len(keys) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.6 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys, strict=False):
        for kind, runs in results.items():
            pts = [(r["partitions"], max(r[key]) if isinstance(r[key], list) else r[key]) for r in runs if key in r]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=kind)
        ax.set_title(LABELS.get(key, key), fontsize=8)
        ax.set_xscale("log")
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,3000,10000")
    ap.add_argument("--topic-partitions", type=int, default=10)
    ap.add_argument("--single", action="store_true")
    ap.add_argument("--cluster", action="store_true")
    ap.add_argument("--connections", type=int, default=5000, help="client connections on one broker (0: skip)")
    ap.add_argument("--groups", type=int, default=1000, help="consumer groups on one broker (0: skip)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    runs = [k for k in ("single", "cluster") if getattr(args, k)] or ["single", "cluster"]
    soft, hard = raise_nofile_limit()
    if "single" in runs and args.connections + 1000 > soft:
        print(f"warning: open-files limit {soft} (hard {hard}) is tight for {args.connections} connections",
              file=sys.stderr)
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in runs}
    with tempfile.TemporaryDirectory(prefix="kbroker-scale-") as tmp:
        for kind in runs:
            for size in sizes:
                if kind == "single":
                    r = single(size, args.topic_partitions, Path(tmp), args.connections, args.groups)
                else:
                    r = cluster(size, args.topic_partitions, Path(tmp))
                r["load_avg"] = os.getloadavg()[0]
                print(kind, json.dumps(r), flush=True)
                results[kind].append(r)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale_bench.json").write_text(json.dumps(results, indent=1))
    write_report(results, args.out)
    print(f"report: {args.out / 'scale_bench.md'}, chart: {args.out / 'scale.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
