"""The "null broker": the ceiling of `make bench`, a Kafka endpoint that stores nothing.

It answers just enough of the protocol for confluent-kafka and librdkafka's rdkafka_performance to
run the produce and consume workloads, with as little work per request as a Python server can do:

- ApiVersions (v0-3), Metadata (v0-12; unknown topics are created on the fly, 4 partitions),
  CreateTopics (v0-7), ListOffsets (v1-7), FindCoordinator (v0-3, itself), InitProducerId (v0-4,
  a fresh producer id each time, for the idempotent producer);
- Produce (v3-8): records are not decoded, validated or kept. Only the batch headers are read, to
  count records and advance the partition's end offset; the response is packed by hand. acks=0 gets
  no response, as in Kafka;
- Fetch (v4-12, no fetch sessions): real v2 record batches (no key; values of the size of the first
  record produced to the topic, else ``--value-size`` bytes; built and CRC'd once per size, at most
  1,024 records each), with only the base offset patched, so that any offset below the end offset
  produced so far can be served. A fetch at the end waits (up to max_wait_ms) for the next produce.

``--validate`` makes it the ceiling of a broker that must validate what it stores: every produced
batch goes through kbroker's own checks before it is counted (broker.append_path.validate_batches:
the header and CRC, then every record, compressed batches decompressed in one streaming pass, at
Kafka's default max.message.bytes), on the event loop, with kbroker's malloc settings; a batch that
fails gets kbroker's error code. Nothing is stored, so what separates kbroker from this one is its
log, not its validation (validation_ceiling.py).

Several null brokers can pose as one cluster (``--node-id K --cluster HOST:PORT,...``, the
listeners of all nodes in node-id order): each advertises every node in Metadata and leads
partition p of every topic when ``p % N == K`` (replicas = ISR = [leader]); Produce, Fetch and
ListOffsets for a partition it does not lead get NOT_LEADER_OR_FOLLOWER, as from Kafka. Node 0 is
the controller and every group's coordinator. The nodes share nothing: each counts only what is
produced to the partitions it leads, and a topic a node first hears of (by Metadata, a produce or
CreateTopics sent elsewhere) gets ``--partitions`` partitions, so give every node the partition
count the workload creates its topics with. ``multiprocess_bench.py`` uses this for the ceiling of
"N broker processes against 1".

With ``NULL_BROKER_TRACE=FILE`` in its environment every request appends a line to FILE (wall
time at the answer, api key, connection, correlation id, ms from the frame read to the answer
built), the same trace points as kbroker's request log, for timelines (``ctp_timeline.py``).

Requests are dispatched through ``versions`` and ``handlers`` (api key -> versions served, -> a
function of the decoded request): ``null_txn_broker.py`` extends both with the group and
transaction APIs for the transactional workloads.

What it measures: the client plus the machine plus the cost of moving the bytes through one asyncio
event loop (uvloop when installed, as kbroker uses), i.e. what any Python broker on this machine
could do at most. It is not a Kafka: no durability, no groups, no transactions, no storage. Use it
only as a benchmark ceiling (`bench.py --brokers kbroker,tansu,null`).

    .venv/bin/python benchmarks/null_broker.py [--port 19093] [--value-size 1024]
        [--partitions 4] [--node-id K --cluster HOST:PORT,HOST:PORT,...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]

from protocol.api_table import get_spec  # noqa: E402
from protocol.fast_codecs import FetchPartitionOut, decode_produce_request, encode_fetch_response  # noqa: E402
from protocol.headers import encode_response_prefix, parse_request_header, skip_tagged_fields  # noqa: E402
from storage.batch import build_batch  # noqa: E402

NODE_ID = 0
DEFAULT_PARTITIONS = 4
BATCH_RECORDS = 1024  # records per served batch (≈ 1 MiB of 1 KiB values, like the producers' batch.size)
# api key -> (min, max) version served
VERSIONS: dict[int, tuple[int, int]] = {0: (3, 8), 1: (4, 12), 2: (1, 7), 3: (0, 12), 10: (0, 3), 18: (0, 3),
                                        19: (0, 7), 22: (0, 4)}
OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, UNSUPPORTED_VERSION = 1, 3, 6, 35

_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_PROD_PART = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time_ms


class Topic:
    def __init__(self, name: str, partitions: int) -> None:
        self.name = name
        self.id = uuid.uuid4()
        self.end = [0] * partitions  # per-partition end offset (= records produced so far)
        self.value_size: int | None = None  # of the first record produced: what Fetch serves


class NullBroker:
    """State shared by all connections: topics and their end offsets, the pre-built batches."""

    def __init__(self, host: str, port: int, value_size: int) -> None:
        self.host, self.port = host, port
        self.node_id = NODE_ID
        self.nodes: list[tuple[str, int]] = [(host, port)]  # every node's listener, by node id
        self.clustered = False  # True: lead only partitions p with p % len(nodes) == node_id
        self.default_partitions = DEFAULT_PARTITIONS
        self.topics: dict[str, Topic] = {}
        self.next_pid = 1000
        self.value_size = value_size
        self._values: dict[int, bytes] = {}
        self._batches: dict[tuple[int, int], bytes] = {}
        self.batch(BATCH_RECORDS, value_size)  # the common size, built before the first client arrives
        self._appended = asyncio.Event()
        trace = os.environ.get("NULL_BROKER_TRACE")
        self.trace = open(trace, "a", buffering=1) if trace else None  # noqa: SIM115 - lives as long as the server
        self._connections = 0
        self.validate: Callable[[memoryview | None], int] | None = None  # --validate: records -> error code
        self.versions: dict[int, tuple[int, int]] = dict(VERSIONS)
        # api key -> answer of a decoded request (Produce and Fetch have their own fast paths)
        self.handlers: dict[int, Callable[[Any, int], Any]] = {
            18: lambda req, v: self.api_versions(v), 3: self.metadata, 19: self.create_topics,
            2: self.list_offsets, 10: self.find_coordinator, 22: self.init_producer_id}

    def join_cluster(self, node_id: int, nodes: list[tuple[str, int]]) -> None:
        """Be node ``node_id`` of the null "cluster" whose listeners are ``nodes`` (by node id)."""
        if not 0 <= node_id < len(nodes):
            raise ValueError(f"node id {node_id} not in a cluster of {len(nodes)}")
        self.node_id, self.nodes, self.clustered = node_id, nodes, len(nodes) > 1

    def leader(self, partition: int) -> int:
        return partition % len(self.nodes) if self.clustered else self.node_id

    def replicas(self, partition: int) -> list[int]:
        """The replicas (= ISR) Metadata names for ``partition``: its leader alone here
        (null_replicating_broker.py names more)."""
        return [self.leader(partition)]

    # -- state ----------------------------------------------------------------------------------
    def topic(self, name: str, partitions: int = 0) -> Topic:
        t = self.topics.get(name)
        if t is None:
            t = self.topics[name] = Topic(name, partitions if partitions > 0 else self.default_partitions)
        return t

    def batch(self, n: int, value_size: int) -> bytes:
        """A v2 batch of ``n`` records at base offset 0 (cached: the tail sizes repeat too)."""
        b = self._batches.get((n, value_size))
        if b is None:
            value = self._values.get(value_size)
            if value is None:
                value = self._values[value_size] = os.urandom(value_size)
            b = self._batches[(n, value_size)] = build_batch([(None, value)] * n)
        return b

    def trace_line(self, key: int, conn: int, corr: int, seconds: float) -> None:
        """One NULL_BROKER_TRACE line: wall time at the answer, api key, connection, correlation id,
        ms from the frame read to the answer built."""
        assert self.trace is not None
        self.trace.write(f"{time.time():.6f} {key} {conn} {corr} {seconds * 1000:.3f}\n")

    def appended(self) -> None:
        self._appended.set()
        self._appended = asyncio.Event()

    # -- connections ----------------------------------------------------------------------------
    async def serve(self) -> None:
        server = await asyncio.start_server(self.connection, self.host, self.port, limit=1 << 20)
        async with server:
            await server.serve_forever()

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._connections += 1
        conn = self._connections
        try:
            while True:
                size = _I32.unpack(await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                if self.trace is None:
                    out = await self.request(memoryview(frame))
                else:
                    t0 = time.perf_counter()
                    out = await self.request(memoryview(frame))
                    key, corr = _I16.unpack_from(frame, 0)[0], _I32.unpack_from(frame, 4)[0]
                    self.trace_line(key, conn, corr, time.perf_counter() - t0)
                if out:
                    writer.writelines(out)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def request(self, frame: memoryview) -> list[bytes | memoryview] | None:
        h = parse_request_header(frame)
        key, v = h.api_key, h.api_version
        spec = get_spec(key)
        lo, hi = self.versions.get(key, (0, -1))
        if spec is None or not lo <= v <= hi:
            if key == 18:  # KIP-511: answer in v0 so that the client can retry with a version we know
                return self._encode(h.correlation_id, spec, 0, self.api_versions(0, UNSUPPORTED_VERSION))
            raise ConnectionError(f"api key {key} v{v} not served by the null broker")
        pos = h.body_offset
        if spec.request_flexible(v):
            pos = skip_tagged_fields(frame, pos)
        body = frame[pos:]
        if key == 0:
            chunks = self.produce(body, v)
            if chunks is None:
                return None
        elif key == 1:
            chunks = await self.fetch(spec.request.decode(body, version=v), v)
        else:
            req = spec.request.decode(body, version=v)
            return self._encode(h.correlation_id, spec, v, self.handlers[key](req, v))
        n = sum(len(c) for c in chunks)
        return [encode_response_prefix(h.correlation_id, n, spec.response_header_flexible(v)), *chunks]

    @staticmethod
    def _encode(correlation_id: int, spec: Any, v: int, resp: Any) -> list[bytes | memoryview]:
        body = resp.encode(version=v)
        return [encode_response_prefix(correlation_id, len(body), spec.response_header_flexible(v)), body]

    # -- the record paths ---------------------------------------------------------------------------
    def produce(self, body: memoryview, v: int) -> list[bytes] | None:
        return self.answer_produce(decode_produce_request(body, v), v)

    def answer_produce(self, req: Any, v: int) -> list[bytes] | None:
        """Count the records of a decoded Produce request and build its answer (None for acks=0)."""
        nodes, me = (len(self.nodes), self.node_id) if self.clustered else (0, 0)  # 0: lead every partition
        out = bytearray(_I32.pack(len(req.topic_data)))
        for td in req.topic_data:
            t = self.topic(td.name)
            raw = td.name.encode()
            out += _I16.pack(len(raw)) + raw + _I32.pack(len(td.partition_data))
            for pd in td.partition_data:
                if not 0 <= pd.index < len(t.end):
                    out += _PROD_PART.pack(pd.index, UNKNOWN_TOPIC_OR_PARTITION, -1, -1)
                elif nodes and pd.index % nodes != me:
                    out += _PROD_PART.pack(pd.index, NOT_LEADER_OR_FOLLOWER, -1, -1)
                elif self.validate is not None and (err := self.validate(pd.records)):
                    out += _PROD_PART.pack(pd.index, err, -1, -1)
                else:
                    base = t.end[pd.index]
                    t.end[pd.index] = base + count_records(pd.records)
                    if t.value_size is None:
                        t.value_size = first_value_size(pd.records)
                    out += _PROD_PART.pack(pd.index, 0, base, -1)
                if v >= 5:
                    out += _I64.pack(0)  # log_start_offset
                if v >= 8:
                    out += _I32.pack(0) + _I16.pack(-1)  # record_errors [], error_message null
        out += _I32.pack(0)  # throttle_time_ms
        self.appended()
        return None if req.acks == 0 else [bytes(out)]

    async def fetch(self, req: Any, v: int) -> list[bytes | memoryview]:
        deadline = time.monotonic() + req.max_wait_ms / 1000
        while True:
            topics, total = self._fetch_once(req)
            left = deadline - time.monotonic()
            if total > 0 or left <= 0:
                return encode_fetch_response(v, 0, 0, topics)
            try:
                await asyncio.wait_for(self._appended.wait(), left)
            except TimeoutError:
                pass

    def _fetch_once(self, req: Any) -> tuple[list[tuple[str, None, list[FetchPartitionOut]]], int]:
        budget = req.max_bytes if req.max_bytes > 0 else 1 << 30
        nodes, me = (len(self.nodes), self.node_id) if self.clustered else (0, 0)  # 0: lead every partition
        total = 0
        topics = []
        for ft in req.topics:
            t = self.topics.get(ft.topic)
            parts = []
            for fp in ft.partitions:
                i, offset = fp.partition, fp.fetch_offset
                if t is None or not 0 <= i < len(t.end):
                    parts.append(FetchPartitionOut(i, UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1, None, b""))
                    continue
                if nodes and i % nodes != me:
                    parts.append(FetchPartitionOut(i, NOT_LEADER_OR_FOLLOWER, -1, -1, -1, None, b""))
                    continue
                end = t.end[i]
                value_size = t.value_size if t.value_size is not None else self.value_size
                if not 0 <= offset <= end:
                    parts.append(FetchPartitionOut(i, OFFSET_OUT_OF_RANGE, end, end, 0, None, b""))
                    continue
                # Kafka's limits: partition_max_bytes per partition and max_bytes per response, but
                # at least one batch in the response so that the consumer always makes progress.
                limit = min(fp.partition_max_bytes, budget - total)
                chunks: list[bytes] = []
                size = 0
                while offset < end:
                    n = min(end - offset, BATCH_RECORDS)
                    b = self.batch(n, value_size)
                    if chunks and size + len(b) > limit or not chunks and total and len(b) > limit:
                        break
                    chunks.append(_I64.pack(offset) + b[8:])  # base offset is outside the CRC
                    size += len(b)
                    offset += n
                total += size
                parts.append(FetchPartitionOut(i, 0, end, end, 0, None, b"".join(chunks)))
            topics.append((ft.topic, None, parts))
        return topics, total

    # -- everything else: kafka-python's generic codec -------------------------------------------
    def api_versions(self, v: int, error: int = 0) -> Any:
        r = get_spec(18).response
        keys = [r.ApiVersion(version=v, api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in sorted(self.versions.items())]
        return r(version=v, error_code=error, api_keys=keys, throttle_time_ms=0)

    def metadata(self, req: Any, v: int) -> Any:
        r = get_spec(3).response
        T, P = r.MetadataResponseTopic, r.MetadataResponseTopic.MetadataResponsePartition
        names = list(self.topics) if req.topics is None else [t.name for t in req.topics if t.name]
        topics = []
        for name in names:
            t = self.topic(name)  # auto-create, as Kafka does with auto.create.topics.enable
            parts = [P(version=v, error_code=0, partition_index=i, leader_id=self.leader(i), leader_epoch=0,
                       replica_nodes=self.replicas(i), isr_nodes=self.replicas(i), offline_replicas=[])
                     for i in range(len(t.end))]
            topics.append(T(version=v, error_code=0, name=name, topic_id=t.id, is_internal=False,
                            partitions=parts, authorized_operations=None))
        brokers = [r.MetadataResponseBroker(version=v, node_id=k, host=host, port=port, rack=None)
                   for k, (host, port) in enumerate(self.nodes)] if self.clustered else [
            r.MetadataResponseBroker(version=v, node_id=self.node_id, host=self.host, port=self.port, rack=None)]
        controller = 0 if self.clustered else self.node_id
        return r(version=v, throttle_time_ms=0, brokers=brokers, cluster_id="null-broker", controller_id=controller,
                 topics=topics, authorized_operations=None, error_code=0)

    def create_topics(self, req: Any, v: int) -> Any:
        r = get_spec(19).response
        out = []
        for ct in req.topics:
            t = self.topic(ct.name, ct.num_partitions)
            out.append(r.CreatableTopicResult(version=v, name=ct.name, topic_id=t.id, error_code=0, error_message=None,
                                              num_partitions=len(t.end), replication_factor=1, configs=[]))
        return r(version=v, throttle_time_ms=0, topics=out)

    def list_offsets(self, req: Any, v: int) -> Any:
        r = get_spec(2).response
        T, P = r.ListOffsetsTopicResponse, r.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
        topics = []
        for lt in req.topics:
            t = self.topics.get(lt.name)
            parts = []
            for lp in lt.partitions:
                if t is None or not 0 <= lp.partition_index < len(t.end):
                    parts.append(P(version=v, partition_index=lp.partition_index, error_code=UNKNOWN_TOPIC_OR_PARTITION,
                                   timestamp=-1, offset=-1, leader_epoch=-1))
                    continue
                if self.leader(lp.partition_index) != self.node_id:
                    parts.append(P(version=v, partition_index=lp.partition_index, error_code=NOT_LEADER_OR_FOLLOWER,
                                   timestamp=-1, offset=-1, leader_epoch=-1))
                    continue
                # -2 earliest -> 0; -1 latest (and any timestamp: nothing is kept) -> the end offset
                off = 0 if lp.timestamp == -2 else t.end[lp.partition_index]
                parts.append(P(version=v, partition_index=lp.partition_index, error_code=0, timestamp=-1,
                               offset=off, leader_epoch=0))
            topics.append(T(version=v, name=lt.name, partitions=parts))
        return r(version=v, throttle_time_ms=0, topics=topics)

    def find_coordinator(self, req: Any, v: int) -> Any:
        # one coordinator for every group and transactional id: node 0 of a cluster, else this node
        node = 0 if self.clustered else self.node_id
        host, port = self.nodes[node] if self.clustered else (self.host, self.port)
        return get_spec(10).response(version=v, throttle_time_ms=0, error_code=0, error_message=None,
                                     node_id=node, host=host, port=port)

    def init_producer_id(self, req: Any, v: int) -> Any:
        self.next_pid += 1
        return get_spec(22).response(version=v, throttle_time_ms=0, error_code=0, producer_id=self.next_pid,
                                     producer_epoch=0)


def count_records(records: memoryview | None) -> int:
    """Records in a produce request's record set, from the v2 batch headers alone."""
    if records is None:
        return 0
    n = pos = 0
    end = len(records)
    while pos + 61 <= end:
        n += _I32.unpack_from(records, pos + 57)[0]
        pos += 12 + _I32.unpack_from(records, pos + 8)[0]
    return n


def first_value_size(records: memoryview | None) -> int | None:
    """The value size of the first record of an uncompressed v2 record set (None if it cannot tell)."""
    if records is None or len(records) < 62 or records[16] != 2 or _I16.unpack_from(records, 21)[0] & 7:
        return None
    pos = 61
    try:
        for field in range(6):  # length, attributes, timestamp delta, offset delta, key length, value length
            if field == 1:
                pos += 1
                continue
            n, pos = _varint(records, pos)
            if field == 4 and n > 0:
                pos += n
        return n if n >= 0 else 0
    except IndexError:
        return None


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    """A zigzag varint (the record fields' encoding) and the position after it."""
    shift = raw = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


class NullBrokerProcess:
    """A null broker subprocess on 127.0.0.1 (for bench.py), stopped by pid. ``script``: the server to
    run (this file, or null_txn_broker.py for one that also serves groups and transactions)."""

    def __init__(self, value_size: int = 1024, port: int | None = None, script: Path | None = None,
                 env: dict[str, str] | None = None, args: list[str] | None = None) -> None:
        if port is None:
            port = free_port()
        self.port, self.value_size = port, value_size
        self.script = script or Path(__file__).resolve()
        self.env = env or {}
        self.args = args or []  # more command-line options of the server (--partitions, --cluster, ...)
        self.bootstrap = f"127.0.0.1:{port}"
        self.log_path = Path(f"/tmp/null-broker-{port}.log")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, timeout: float = 30) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, str(self.script), "--port", str(self.port),
                                          "--value-size", str(self.value_size), *self.args],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         env={**os.environ, **self.env})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"null broker exited with {self.proc.returncode}; see {self.log_path}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"null broker did not listen on {self.bootstrap} within {timeout}s")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def log_tail(self) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-40:])
        except OSError:
            return ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_cluster(n: int, value_size: int = 1024, partitions: int = DEFAULT_PARTITIONS, *,
                  script: Path | None = None, extra_args: list[str] | None = None,
                  envs: list[dict[str, str]] | None = None) -> list[NullBrokerProcess]:
    """``n`` null broker subprocesses posing as one cluster (node ids 0..n-1), each started; the caller
    stops them. ``partitions``: the partition count of the topics the workload will create (the
    nodes share nothing, so each must assume it for a topic first heard of elsewhere). ``script``,
    ``extra_args``, ``envs``: the server to run (this file by default), more of its options, more
    environment per node."""
    procs = [NullBrokerProcess(value_size, script=script, env=envs[k] if envs else None) for k in range(n)]
    nodes = ",".join(p.bootstrap for p in procs)
    started: list[NullBrokerProcess] = []
    try:
        for k, p in enumerate(procs):
            p.args = ["--partitions", str(partitions), "--node-id", str(k), "--cluster", nodes, *(extra_args or [])]
            p.start()
            started.append(p)
    except BaseException:
        for p in started:
            p.stop()
        raise
    return procs


def kbroker_validation() -> Callable[[memoryview | None], int]:
    """kbroker's produce-path validation of one partition's records, as an error code (0: valid);
    applies kbroker's malloc settings too, since they decide what decompression buffers cost."""
    from broker.append_path import validate_batches
    from broker.config.topic_defs import TOPIC_CONFIGS
    from broker.malloc_tuning import tune_malloc
    from protocol.errors import KafkaError

    tune_malloc()
    max_message_bytes = int(TOPIC_CONFIGS["max.message.bytes"].default)  # a topic's default, as kbroker's

    def check(records: memoryview | None) -> int:
        if records is None:
            return 0
        try:
            validate_batches(records, max_message_bytes)
        except KafkaError as e:
            return int(e.code)
        return 0

    return check


def run_server(cls: type[NullBroker], host: str, port: int, value_size: int, *, partitions: int = DEFAULT_PARTITIONS,
               node_id: int = NODE_ID, cluster: list[tuple[str, int]] | None = None, validate: bool = False) -> None:
    """Serve ``cls`` (this null broker or a subclass) until interrupted, on uvloop when installed;
    ``cluster``: every node's listener (by node id), to be node ``node_id`` of a null cluster;
    ``validate``: check every produced batch as kbroker does (see the module docstring)."""
    try:
        import uvloop
    except ImportError:
        uvloop = None

    async def run() -> None:
        b = cls(host, port, value_size)
        b.default_partitions = partitions
        if validate:
            b.validate = kbroker_validation()
        if cluster:
            b.join_cluster(node_id, cluster)
        print(f"{cls.__name__} node {b.node_id} on {host}:{port}", flush=True)
        await b.serve()

    try:
        (uvloop.run if uvloop is not None else asyncio.run)(run())
    except KeyboardInterrupt:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=19093)
    ap.add_argument("--value-size", type=int, default=1024, help="value bytes of the records Fetch serves")
    ap.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS,
                    help="partitions of a topic created without a count (by Metadata or Produce)")
    ap.add_argument("--node-id", type=int, default=NODE_ID, help="this node's id in --cluster")
    ap.add_argument("--cluster", type=parse_nodes, metavar="HOST:PORT,...",
                    help="listeners of all nodes of a null cluster, in node-id order (this one's included)")
    ap.add_argument("--validate", action="store_true",
                    help="validate every produced batch with kbroker's own checks before counting it")
    args = ap.parse_args()
    if args.cluster and not (0 <= args.node_id < len(args.cluster) and args.cluster[args.node_id][1] == args.port):
        ap.error("--cluster must list this node's --port at position --node-id")
    run_server(NullBroker, args.host, args.port, args.value_size, partitions=args.partitions,
               node_id=args.node_id, cluster=args.cluster, validate=args.validate)
    return 0


def parse_nodes(text: str) -> list[tuple[str, int]]:
    nodes = []
    for item in text.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise argparse.ArgumentTypeError(f"not HOST:PORT: {item!r}")
        nodes.append((host, int(port)))
    return nodes


if __name__ == "__main__":
    sys.exit(main())
