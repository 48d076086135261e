"""Protocol fuzzing harness (kbroker issue 17 item 6): mutated requests for every API and version served.

Cases are generated deterministically from a seed: a valid seed request for an (api, version) the
broker advertises in ApiVersions (tests/fuzz/seeds.py), then one mutation: value-level (an edge
value in one field, still decodable), byte-level (tests/fuzz/mutators.py: bit flips, truncation,
huge counts, bad varints, invalid UTF-8, random tagged fields, splices), header-level (wrong
version / client id length), a lying size prefix, or a Produce carrying a malformed record batch
(tests/fuzz/batches.py), whose answer must be an error.

Cases are pipelined over several raw connections to 127.0.0.1, each pipeline followed by an
ApiVersions sentinel: answers arrive in order, so the first unanswered case before a close is the
one that closed the connection, and cases after it are sent again on a new connection. A case
counts once, when the broker processed it (answered, closed the connection on it, or held it past
the stall timeout, as Fetch and JoinGroup may legitimately do).

Checks: the broker process stays up; a separate process sends ApiVersions on a fresh connection
every 100 ms and every answer must come within 1 s; every "Traceback" in the broker log is
attributed (client port in the log line -> the case that closed that connection) and confirmed by
replaying the case alone; after the run, a librdkafka consumer reads every partition end to end,
and, with the broker stopped, ``kbroker dump-log --deep-verify`` must find no undecodable batch.

CLI: python -m tests.fuzz.harness --cases N --seed S [--bootstrap H:P --broker-log FILE] [--workers W]
Without --bootstrap a broker is started from the current tree on a temporary data dir.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import multiprocessing
import random
import re
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fuzz import batches, mutators, seeds

API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 0, 4) + b"fuzz"
SENTINEL_BASE = 0x7F000000
STALL_TIMEOUT = 3.0
LIVENESS_LIMIT = 1.0
PORT_RE = re.compile(r"from (\d+\.\d+\.\d+\.\d+):(\d+)")


# --- frames ---------------------------------------------------------------------------------------

def frame_for(api_key: int, version: int, body: bytes, corr: int, flexible: bool, client_id: bytes = b"fuzz") -> bytes:
    hdr = struct.pack(">hhih", api_key, version, corr, len(client_id)) + client_id
    if flexible:
        hdr += b"\x00"
    return struct.pack(">i", len(hdr) + len(body)) + hdr + body


def set_corr(frame: bytes, corr: int) -> bytes:
    return frame[:8] + struct.pack(">i", corr) + frame[12:]


@dataclass
class Case:
    index: int
    api_key: int
    version: int
    kind: str
    frame: bytes
    alone: bool = False  # lying size prefix: sent alone, then our write side is shut
    bad_batch: str | None = None  # Produce with this malformed batch kind: the answer must be an error

    @property
    def corr(self) -> int:
        return struct.unpack_from(">i", self.frame, 8)[0]

    def describe(self) -> str:
        return f"api{self.api_key} v{self.version} {self.kind}"


# --- case generation ------------------------------------------------------------------------------

class CaseGenerator:
    def __init__(self, served: dict[int, tuple[int, int]], world: seeds.World, seed: int) -> None:
        from protocol.api_table import get_spec

        self.rng = random.Random(seed)
        self.world = world
        self.served = served
        self.pairs = [(k, v) for k, (lo, hi) in sorted(served.items()) for v in range(lo, hi + 1)
                      if get_spec(k) is not None]
        self.specs = {k: get_spec(k) for k in served}
        self._seed_cache: dict[tuple[int, int], list[bytes]] = {}
        self.n = 0

    def seed_frames(self, key: int, version: int) -> list[bytes]:
        got = self._seed_cache.get((key, version))
        if got is None:
            rng = random.Random(key * 1000 + version)
            got = [self.encode(key, version, seeds.build_seed(key, version, self.world, rng), 0) for _ in range(3)]
            self._seed_cache[(key, version)] = got
        return got

    def encode(self, key: int, version: int, req: Any, corr: int) -> bytes:
        body = bytes(req.encode(version=version))
        return frame_for(key, version, body, corr, self.specs[key].request.flexible_version_q(version))

    def next(self) -> Case:
        rng = self.rng
        i = self.n
        self.n += 1
        corr = i & 0x3FFFFFFF
        r = rng.random()
        if r < 0.06:
            return self._bad_produce(i, corr)
        key, version = rng.choice(self.pairs)
        base = set_corr(rng.choice(self.seed_frames(key, version)), corr)
        flexible = self.specs[key].request.flexible_version_q(version)
        if r < 0.40:
            req = seeds.build_seed(key, version, self.world, rng)
            what = seeds.mutate_value(req, version, self.world, rng)
            try:
                return Case(i, key, version, f"value:{what.split('=')[0].split('*')[0]}", self.encode(key, version, req, corr))
            except Exception:
                pass  # a value the encoder cannot represent (e.g. a string over 32767 bytes): mutate bytes
        if r < 0.47:
            lo, hi = self.served[key]
            return Case(i, key, version, "header_version", mutators.header_version(base, rng, lo, hi))
        if r < 0.49:
            return Case(i, key, version, "header_client_id", mutators.header_client_id(base, rng))
        if r < 0.52:
            return Case(i, key, version, "wrong_length", mutators.wrong_length(base, rng), alone=True)
        if flexible and r < 0.60:
            if rng.random() < 0.7:
                return Case(i, key, version, "tagged_fields", mutators.tagged_fields(base, rng))
            return Case(i, key, version, "header_tagged", mutators.header_tagged(base, rng))
        if r < 0.64:
            other = rng.choice(self.seed_frames(*rng.choice(self.pairs)))
            return Case(i, key, version, "splice", mutators.splice(base, rng, other))
        name = rng.choice(list(mutators.BODY_MUTATORS))
        return Case(i, key, version, name, mutators.BODY_MUTATORS[name](base, rng))

    def _bad_produce(self, i: int, corr: int) -> Case:
        from kafka.protocol.producer import ProduceRequest

        rng = self.rng
        lo, hi = self.served[0]
        version = rng.randrange(max(lo, 3), hi + 1)
        kind, data = batches.random_bad_batch(rng)
        topic = self.world.topic(rng)
        T = ProduceRequest.TopicProduceData
        P = T.PartitionProduceData
        req = ProduceRequest(version=version, transactional_id=None, acks=-1, timeout_ms=1000,
                             topic_data=[T(version=version, name=topic, partition_data=[
                                 P(version=version, index=rng.randrange(self.world.partitions), records=data)])])
        return Case(i, 0, version, f"batch:{kind}", self.encode(0, version, req, corr), bad_batch=kind)


# --- results --------------------------------------------------------------------------------------

@dataclass
class Report:
    cases: int = 0
    by_api: collections.Counter = field(default_factory=collections.Counter)
    outcomes: collections.Counter = field(default_factory=collections.Counter)
    by_kind: collections.Counter = field(default_factory=collections.Counter)
    connections: int = 0
    seconds: float = 0.0
    crashers: dict[str, dict[str, Any]] = field(default_factory=dict)  # signature -> details
    unattributed_tracebacks: list[str] = field(default_factory=list)
    accepted_bad_batches: list[dict[str, Any]] = field(default_factory=list)
    liveness: dict[str, Any] = field(default_factory=dict)
    broker_alive: bool = True
    integrity: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.cases / self.seconds if self.seconds else 0.0

    def problems(self, *, timed: bool = True) -> list[str]:
        """Everything that fails the run. ``timed=False`` leaves out probes answered later than 1 s (still
        failing probes that got no answer): pytest runs must not assert on time on a shared machine."""
        out = []
        if not self.broker_alive:
            out.append("broker process died")
        out += [f"crasher {sig}: {d['case']} {d['hex'][:200]}" for sig, d in self.crashers.items()]
        out += [f"unattributed traceback: {t[:300]}" for t in self.unattributed_tracebacks]
        out += [f"malformed batch accepted: {b}" for b in self.accepted_bad_batches]
        if (timed and self.liveness.get("late", 0)) or self.liveness.get("failed", 0):
            out.append(f"liveness: {self.liveness}")
        for k, v in self.integrity.items():
            if k.endswith("_errors") and v:
                out.append(f"integrity {k}: {v}")
        if self.integrity.get("deep_verify_exit", 0) != 0:
            out.append(f"deep-verify exit {self.integrity['deep_verify_exit']}: {self.integrity.get('deep_verify_tail')}")
        return out

    def summary(self) -> str:
        from protocol.api_table import get_spec

        lines = [f"cases: {self.cases} in {self.seconds:.1f}s ({self.rate:.0f}/s) over {self.connections} connections",
                 "outcomes: " + ", ".join(f"{k}={v}" for k, v in sorted(self.outcomes.items()))]
        lines.append("by api:")
        for key, n in sorted(self.by_api.items()):
            spec = get_spec(key)
            lines.append(f"  {key:3d} {spec.name if spec else '?':28s} {n}")
        lines.append("by mutation: " + ", ".join(f"{k}={v}" for k, v in self.by_kind.most_common()))
        lines.append(f"liveness: {self.liveness}")
        lines.append(f"crashers: {len(self.crashers)}")
        for sig, d in self.crashers.items():
            hx = d["hex"] if len(d["hex"]) <= 400 else f"{d['hex'][:400]}... ({len(d['hex']) // 2} bytes)"
            lines.append(f"  {sig}\n    case: {d['case']} confirmed={d['confirmed']} count={d['count']}\n    hex: {hx}")
        for t in self.unattributed_tracebacks:
            lines.append(f"  unattributed traceback: {t}")
        lines.append(f"malformed batches accepted: {len(self.accepted_bad_batches)} {self.accepted_bad_batches[:5]}")
        lines.append(f"integrity: {json.dumps(self.integrity, default=str)}")
        lines.append(f"broker alive: {self.broker_alive}")
        return "\n".join(lines)


# --- liveness probe (own process, so the fuzzer's CPU use cannot delay it) -------------------------

def _probe(host: str, port: int, stop: Any, conn: Any) -> None:
    lat: list[float] = []
    late: list[str] = []  # wall-clock times of probes over the limit, to match with the broker log
    failed = 0
    frame = struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0
    while not stop.is_set():
        t0 = time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=5) as s:
                s.sendall(frame)
                (size,) = struct.unpack(">i", _recv(s, 4))
                _recv(s, size)
            lat.append(time.monotonic() - t0)
            if lat[-1] > LIVENESS_LIMIT and len(late) < 50:
                late.append(time.strftime("%H:%M:%S", time.gmtime(time.time() - lat[-1])) + f" {lat[-1]:.2f}s")
        except OSError:
            failed += 1
            if len(late) < 50:
                late.append(time.strftime("%H:%M:%S", time.gmtime()) + " failed")
        stop.wait(0.1)
    conn.send((lat, failed, late))
    conn.close()


def _recv(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionResetError("closed")
        buf += chunk
    return bytes(buf)


class Liveness:
    def __init__(self, host: str, port: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.stop_ev = ctx.Event()
        self.recv, send = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=_probe, args=(host, port, self.stop_ev, send), daemon=True)
        self.proc.start()

    def finish(self) -> dict[str, Any]:
        self.stop_ev.set()
        lat, failed, late = self.recv.recv() if self.recv.poll(30) else ([], -1, [])
        self.proc.join(10)
        lat.sort()

        def pct(p: float) -> float:
            return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 1) if lat else -1.0

        return {"probes": len(lat), "failed": failed, "p50_ms": pct(0.5), "p99_ms": pct(0.99),
                "max_ms": round(lat[-1] * 1000, 1) if lat else -1.0,
                "late": sum(1 for x in lat if x > LIVENESS_LIMIT), "late_at_utc": late[:10]}


# --- broker log watcher ---------------------------------------------------------------------------

class LogWatch:
    """Reads the broker log as it grows; yields (client port or None, traceback text) per traceback."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.pos = path.stat().st_size if path and path.exists() else 0
        self.buf = ""

    def poll(self, final: bool = False) -> list[tuple[int | None, str, str]]:
        """(client port or None, signature, text) of each traceback completed since the last poll."""
        if self.path is None:
            return []
        with open(self.path, errors="replace") as f:
            f.seek(self.pos)
            self.buf += f.read()
            self.pos = f.tell()
        lines = self.buf.split("\n")
        complete, rest = lines[:-1], lines[-1]
        out: list[tuple[int | None, str, str]] = []
        i = 0
        consumed = len(complete)
        while i < len(complete):
            if "Traceback (most recent call last)" not in complete[i]:
                i += 1
                continue
            j = i + 1
            while j < len(complete) and (complete[j][:1] in (" ", "\t", "") or complete[j].startswith("During")
                                         or "Traceback (most recent" in complete[j]):
                j += 1
            if j >= len(complete) and not final:
                consumed = max(0, i - 1)  # the exception line is not written yet
                break
            last = complete[j] if j < len(complete) else ""
            prev = complete[i - 1] if i > 0 else ""
            m = PORT_RE.search(prev)
            inner = [x.strip() for x in complete[i:j] if x.strip().startswith("File ")]
            sig = f"{last.strip()[:160]} @ {inner[-1] if inner else '?'}"
            out.append((int(m.group(2)) if m else None, sig, "\n".join(complete[max(0, i - 1):j + 1])))
            i = j + 1
        self.buf = "\n".join(complete[consumed:] + [rest])
        return out


# --- the runner -----------------------------------------------------------------------------------

class Runner:
    def __init__(self, bootstrap: str, gen: CaseGenerator, total: int, *, workers: int, pipeline: int,
                 log_path: Path | None, time_limit: float, broker_proc: Any = None) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.gen = gen
        self.total = total
        self.workers = workers
        self.pipeline = pipeline
        self.requeue: collections.deque[Case] = collections.deque()
        self.report = Report()
        self.watch = LogWatch(log_path)
        self.time_limit = time_limit
        self.broker_proc = broker_proc
        self.closed_by_port: dict[int, list[Case]] = {}
        self.pending_tb: list[tuple[int | None, str, str, float]] = []
        self.generated = 0

    def _take(self) -> Case | None:
        if self.requeue:
            return self.requeue.popleft()
        if self.generated >= self.total:
            return None
        self.generated += 1
        return self.gen.next()

    def _done(self, case: Case, outcome: str) -> None:
        r = self.report
        r.cases += 1
        r.by_api[case.api_key] += 1
        r.outcomes[outcome] += 1
        r.by_kind[case.kind.split(":")[0] if not case.kind.startswith("batch") else "bad_batch"] += 1

    async def _worker(self, wid: int) -> None:
        reader = writer = None
        while time.monotonic() < self.deadline:
            if self.broker_proc is not None and self.broker_proc.poll() is not None:
                self.report.broker_alive = False
                return
            batch: list[Case] = []
            while len(batch) < self.pipeline:
                c = self._take()
                if c is None:
                    break
                if c.alone:
                    if batch:
                        self.requeue.append(c)
                        break
                    batch.append(c)
                    break
                batch.append(c)
            if not batch:
                return
            if writer is None or batch[0].alone:
                if writer is not None:
                    writer.close()
                try:
                    reader, writer = await asyncio.open_connection(self.host, self.port)
                except OSError:
                    self.requeue.extendleft(reversed(batch))
                    await asyncio.sleep(0.2)
                    if self.broker_proc is not None and self.broker_proc.poll() is not None:
                        self.report.broker_alive = False
                        return
                    continue
                self.report.connections += 1
            local_port = writer.get_extra_info("sockname")[1]
            keep = await self._run_pipeline(reader, writer, batch, wid, local_port)
            if not keep:
                writer.close()
                reader = writer = None
        if writer is not None:
            writer.close()

    async def _run_pipeline(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, batch: list[Case],
                            wid: int, local_port: int) -> bool:
        """Send the batch (+ sentinel), read answers; returns whether the connection is still usable."""
        sentinel = SENTINEL_BASE + wid
        alone = batch[0].alone
        data = b"".join(c.frame for c in batch)
        if not alone:
            data += frame_for(18, 0, b"", sentinel, False)
        try:
            writer.write(data)
            if alone:
                writer.write_eof()
            await writer.drain()
        except (OSError, RuntimeError):
            pass
        index = {c.corr: i for i, c in enumerate(batch)}
        answered = -1
        while True:
            try:
                head = await asyncio.wait_for(reader.readexactly(4), STALL_TIMEOUT)
                (size,) = struct.unpack(">i", head)
                payload = await asyncio.wait_for(reader.readexactly(size), STALL_TIMEOUT)
            except TimeoutError:
                first = answered + 1
                if first < len(batch):
                    self._done(batch[first], "stalled")
                    self.requeue.extendleft(reversed(batch[first + 1:]))
                return False
            except (asyncio.IncompleteReadError, OSError):
                first = answered + 1
                if first < len(batch):
                    self._done(batch[first], "closed")
                    # The culprit is batch[first] unless the broker dropped answers it had already
                    # computed for earlier frames (it does on an unexpected error): keep the tail.
                    self.closed_by_port[local_port] = batch[first:]
                    self.requeue.extendleft(reversed(batch[first + 1:]))
                return False
            corr = struct.unpack_from(">i", payload, 0)[0]
            if corr == sentinel:
                for c in batch[answered + 1:]:
                    self._done(c, "no_response")
                return True
            i = index.get(corr)
            if i is None or i <= answered:
                continue
            for c in batch[answered + 1:i]:
                self._done(c, "no_response")
            answered = i
            case = batch[i]
            self._done(case, "answered")
            if case.bad_batch is not None:
                self._check_produce(case, payload)

    def _check_produce(self, case: Case, payload: bytes) -> None:
        from kafka.protocol.producer import ProduceResponse

        try:
            resp = ProduceResponse.decode(payload, version=case.version, header=True)
            codes = [p.error_code for t in resp.responses for p in t.partition_responses]
        except Exception as e:  # an answer the client cannot parse is a finding too
            codes = [f"undecodable answer: {e}"]
        if any(c == 0 for c in codes) and case.bad_batch not in batches.MAY_BE_ACCEPTED:
            self.report.accepted_bad_batches.append({"kind": case.bad_batch, "version": case.version,
                                                     "hex": case.frame.hex()})

    async def _watch_log(self) -> None:
        last = time.monotonic()
        while True:
            self._drain_log(False)
            await asyncio.sleep(0.5)
            if time.monotonic() - last > 30:
                last = time.monotonic()
                print(f"progress: {self.report.cases} cases, {len(self.report.crashers)} crasher signatures",
                      file=sys.stderr, flush=True)

    def _drain_log(self, final: bool) -> None:
        now = time.monotonic()
        for port, sig, text in self.watch.poll(final):
            self.pending_tb.append((port, sig, text, now))
        still = []
        for port, sig, text, t in self.pending_tb:
            tail = self.closed_by_port.get(port) if port is not None else None
            if tail is not None or port is None or final or now - t > 10:
                self._record_tb(sig, text, tail)
            else:
                still.append((port, sig, text, t))
        self.pending_tb = still
        if len(self.closed_by_port) > 200_000:
            self.closed_by_port.clear()

    def _record_tb(self, sig: str, text: str, tail: list[Case] | None) -> None:
        if not tail:
            if len(self.report.unattributed_tracebacks) < 20:
                self.report.unattributed_tracebacks.append(text[-1500:])
            return
        case = tail[0]
        d = self.report.crashers.setdefault(sig, {"case": case.describe(), "hex": case.frame.hex(), "count": 0,
                                                 "confirmed": None, "traceback": text[-3000:],
                                                 "candidates": [(c.describe(), c.frame.hex()) for c in tail[:32]]})
        d["count"] += 1

    async def run(self) -> Report:
        t0 = time.monotonic()
        self.deadline = t0 + self.time_limit
        watcher = asyncio.create_task(self._watch_log())
        await asyncio.gather(*(self._worker(w) for w in range(self.workers)))
        self.report.seconds = time.monotonic() - t0
        await asyncio.sleep(1.0)
        watcher.cancel()
        self._drain_log(True)
        return self.report


def confirm_crashers(report: Report, bootstrap: str, log_path: Path | None) -> None:
    """Replay each crasher alone and check that a traceback follows it."""
    if log_path is None:
        return
    host, port = bootstrap.rsplit(":", 1)
    for d in report.crashers.values():
        d["confirmed"] = False
        for name, hx in d.pop("candidates", [(d["case"], d["hex"])]):
            before = log_path.stat().st_size
            with contextlib.suppress(OSError), socket.create_connection((host, int(port)), timeout=5) as s:
                s.sendall(bytes.fromhex(hx))
                s.shutdown(socket.SHUT_WR)
                with contextlib.suppress(OSError):
                    while s.recv(65536):
                        pass
            time.sleep(0.3)  # the log line is written after the close
            with open(log_path, errors="replace") as f:
                f.seek(before)
                if "Traceback (most recent call last)" in f.read():
                    d.update(case=name, hex=hx, confirmed=True)
                    break


# --- setup and integrity --------------------------------------------------------------------------

def prepare_world(bootstrap: str) -> tuple[seeds.World, dict[int, tuple[int, int]]]:
    """Create the fuzz topics, write a few records, read topic ids and the served versions."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

    from tests.helpers.wire import send_request

    world = seeds.World()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futs = admin.create_topics([NewTopic(t, world.partitions, 1) for t in world.topics] +
                               [NewTopic("fuzz-compact", 2, 1, config={"cleanup.policy": "compact"})])
    for f in futs.values():
        with contextlib.suppress(Exception):
            f.result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(200):
        p.produce(world.topics[i % 2], key=b"k%d" % i, value=b"seed-%d" % i, partition=i % world.partitions)
    p.flush(30)
    av = send_request(bootstrap, ApiVersionsRequest(version=0), 0)
    served = {k.api_key: (k.min_version, k.max_version) for k in av.api_keys}
    try:
        md = send_request(bootstrap, MetadataRequest(version=12, topics=None, allow_auto_topic_creation=False,
                                                     include_topic_authorized_operations=False), 12)
        world.topic_ids = {t.name: t.topic_id for t in md.topics if t.name in world.topics}
    except Exception as e:  # fuzz anyway (seeds then carry zero topic ids); the log shows why
        print(f"warning: Metadata v12 failed during setup: {e!r}", file=sys.stderr)
    return world, served


def read_back_all(bootstrap: str, timeout: float = 120.0) -> dict[str, Any]:
    """A librdkafka consumer reads every partition of every topic from the start to its end."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "fuzz-readback", "enable.auto.commit": False,
                  "enable.partition.eof": True, "check.crcs": True, "auto.offset.reset": "earliest",
                  "fetch.error.backoff.ms": 50})
    try:
        md = c.list_topics(timeout=30)
        tps = [TopicPartition(t, p, -2) for t, tm in md.topics.items() for p in tm.partitions]
        c.assign(tps)
        pending = {(tp.topic, tp.partition) for tp in tps}
        errors: list[str] = []
        records = 0
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for m in c.consume(1000, 1.0):
                err = m.error()
                if err is None:
                    records += 1
                elif err.code() == KafkaError._PARTITION_EOF:
                    pending.discard((m.topic(), m.partition()))
                elif len(errors) < 20:
                    errors.append(f"{m.topic()}[{m.partition()}]: {err}")
        return {"partitions": len(tps), "records_read": records, "read_errors": errors,
                "unfinished_errors": sorted(f"{t}[{p}]" for t, p in pending)[:20]}
    finally:
        c.close()


def deep_verify(data_dir: Path) -> tuple[int, str]:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "cli", "dump-log", "--deep-verify", str(data_dir)], cwd=root,
                         capture_output=True, text=True, timeout=600)
    return out.returncode, (out.stdout + out.stderr)[-1500:]


def run_against(bootstrap: str, cases: int, seed: int, *, workers: int = 8, pipeline: int = 32,
                log_path: Path | None = None, time_limit: float = 3600.0, broker_proc: Any = None) -> Report:
    world, served = prepare_world(bootstrap)
    gen = CaseGenerator(served, world, seed)
    host, port = bootstrap.rsplit(":", 1)
    live = Liveness(host, int(port))
    try:
        runner = Runner(bootstrap, gen, cases, workers=workers, pipeline=pipeline, log_path=log_path,
                        time_limit=time_limit, broker_proc=broker_proc)
        report = asyncio.run(runner.run())
    finally:
        liveness = live.finish()
    report.liveness = liveness
    if broker_proc is not None and broker_proc.poll() is not None:
        report.broker_alive = False
    if report.broker_alive:
        confirm_crashers(report, bootstrap, log_path)
        report.integrity.update(read_back_all(bootstrap))
    return report


FUZZ_OVERRIDES = {
    # Mutated names must not auto-create topics by the thousand; CreateTopics still creates some.
    "auto.create.topics.enable": "false",
    "kbroker.max.partitions": "3000",
    "num.partitions": "2",
}


def campaign(cases: int, seed: int, data_dir: Path, *, workers: int = 8, pipeline: int = 32,
             time_limit: float = 3600.0, overrides: dict[str, str] | None = None) -> Report:
    """Start a broker from this tree, fuzz it, read everything back, stop it and deep-verify its data."""
    from tests.helpers.broker_proc import BrokerProcess

    broker = BrokerProcess(data_dir, overrides={**FUZZ_OVERRIDES, **(overrides or {})})
    broker.start()
    try:
        report = run_against(broker.bootstrap, cases, seed, workers=workers, pipeline=pipeline,
                             log_path=broker.log_path, time_limit=time_limit, broker_proc=broker.proc)
    finally:
        code = broker.stop(60)
        broker.kill()
    report.integrity["sigterm_exit"] = code
    if code != 0:
        report.integrity["exit_errors"] = [f"broker exited {code} on SIGTERM"]
    rc, tail = deep_verify(data_dir)
    report.integrity["deep_verify_exit"] = rc
    report.integrity["deep_verify_tail"] = tail.strip().splitlines()[-1] if tail.strip() else ""
    tb = broker.log_text().count("Traceback (most recent call last)")
    report.integrity["log_tracebacks"] = tb
    report.integrity["log_path"] = str(broker.log_path)
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz.harness", description=__doc__.split("\n")[0])
    p.add_argument("--cases", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bootstrap", help="fuzz a running broker at H:P (127.0.0.1 only); default: start one")
    p.add_argument("--broker-log", type=Path, help="that broker's log, for traceback attribution")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--pipeline", type=int, default=32)
    p.add_argument("--time-limit", type=float, default=3600.0, help="stop after this many seconds")
    p.add_argument("--data-dir", type=Path, help="data dir of the started broker (default: a temp dir)")
    p.add_argument("--report", type=Path, help="write the full report (crasher frames in hex) as JSON here")
    p.add_argument("--log-level", help="kbroker.log.level of the started broker (ERROR keeps tracebacks, drops WARN)")
    args = p.parse_args(argv)
    if args.bootstrap:
        if not args.bootstrap.startswith("127.0.0.1:"):
            p.error("only 127.0.0.1 targets are allowed")
        report = run_against(args.bootstrap, args.cases, args.seed, workers=args.workers, pipeline=args.pipeline,
                             log_path=args.broker_log, time_limit=args.time_limit)
    else:
        data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="kbroker-fuzz-")) / "data"
        overrides = {"kbroker.log.level": args.log_level} if args.log_level else None
        report = campaign(args.cases, args.seed, data_dir, workers=args.workers, pipeline=args.pipeline,
                          time_limit=args.time_limit, overrides=overrides)
    print(report.summary())
    if args.report:
        args.report.write_text(json.dumps({**{k: v for k, v in vars(report).items()}, "rate": report.rate},
                                          default=str, indent=1))
    problems = report.problems()
    print(f"problems: {len(problems)}")
    for line in problems:
        print(f"  {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
