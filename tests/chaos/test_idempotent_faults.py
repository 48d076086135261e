"""Idempotent producers under network faults (issue 4, acceptance 3).

A FaultProxy sits in front of the broker (which advertises the proxy, so every client connection
after bootstrap goes through it) and, once the producer holds its producer id, randomly drops
connections, swallows responses after the broker applied the request, and stalls connections until
the client's own request timeout fires. Each client's idempotent producer sends records to a
6-partition topic with explicit partitions; the value of a record is its partition-local sequence
number. Every client is configured the way an application that wants each record written exactly
once would configure it (retry without limit, a delivery timeout far above any fault), so every
send must be acknowledged exactly once and none may be reported as failed.

Then, with the faults switched off, the log is checked twice: with raw Fetch requests sent straight
to the broker's own port (no client library, no proxy; a problem is reported with the producer id,
epoch and sequence of the offending batch), and with a confluent-kafka consumer — the "consumer then
sees" of the acceptance. Both must see every record exactly once, at contiguous offsets from 0, in
per-partition send order.

Observed coverage: these clients keep one (librdkafka, aiokafka) or at most two (kafka-python)
batches per partition in flight against this broker, so the retries the broker sees are duplicates
of a partition's latest batch; answering retries of older cached batches (up to five) is covered by
tests/integration/test_idempotence.py with hand-built batches.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field

import pytest
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import FetchRequest
from kafka.record import MemoryRecords

from tests.compat.rdkafka_io import consume_all
from tests.helpers.broker_proc import BrokerProcess, free_port
from tests.helpers.fault_proxy import FaultProxy
from tests.helpers.wire import RawConnection

PARTITIONS = 6
PRODUCE = 0
INIT_PRODUCER_ID = 22
# Client request timeout: a stalled connection (the proxy keeps it open, answers nothing) must be
# detected by the client itself; short so that a stall costs seconds, not the default 30-40 s.
REQUEST_TIMEOUT_MS = 2000
# Small segments: every partition rolls several times while faults hit, and each roll writes a
# producer-state snapshot, so de-duplication is exercised across rolls too.
TOPIC_CONFIGS = {"segment.bytes": "32768"}


# --- fixtures / setup --------------------------------------------------------------------------


@dataclass
class Rig:
    broker: BrokerProcess
    proxy: FaultProxy
    topic: str


def _rig(broker_factory, topic: str, *, seed: int, **faults: float) -> Rig:
    port = free_port()
    # Armed once a producer id was handed out: the faults are aimed at the idempotent produce path.
    proxy = FaultProxy(f"127.0.0.1:{port}", seed=seed, arm_after_api=INIT_PRODUCER_ID, **faults)
    while proxy.port == port:  # the proxy's own port 0 bind may get the port just released
        port = free_port()
        proxy.upstream = ("127.0.0.1", port)
    broker = broker_factory({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"}, port=port)
    proxy.start()
    _create_topic(broker.bootstrap, topic)
    return Rig(broker, proxy, topic)


@pytest.fixture
def rig_factory(broker_factory):
    made: list[Rig] = []

    def make(topic: str, **kw) -> Rig:
        rig = _rig(broker_factory, topic, **kw)
        made.append(rig)
        return rig

    yield make
    for rig in made:
        rig.proxy.stop()


def _create_topic(bootstrap: str, name: str) -> None:
    T = CreateTopicsRequest.CreatableTopic
    C = T.CreatableTopicConfig
    req = CreateTopicsRequest(version=7, topics=[T(version=7, name=name, num_partitions=PARTITIONS,
                                                   replication_factor=-1, assignments=[], configs=[
                                                       C(version=7, name=k, value=v) for k, v in TOPIC_CONFIGS.items()])],
                              timeout_ms=10000, validate_only=False)
    with RawConnection(bootstrap) as conn:
        resp = conn.request(req, 7)
    assert resp.topics[0].error_code == 0, resp


def _plan(n: int) -> list[tuple[int, bytes]]:
    """(partition, value) in send order: round-robin partitions, value = partition-local sequence."""
    return [(i % PARTITIONS, str(i // PARTITIONS).encode()) for i in range(n)]


# --- reading the log back directly from the broker ---------------------------------------------


@dataclass
class LoggedRecord:
    offset: int
    value: bytes
    producer_id: int
    producer_epoch: int
    sequence: int  # the record's own sequence number (batch base sequence + offset delta)


def read_partition(bootstrap: str, topic: str, partition: int) -> list[LoggedRecord]:
    """Every data record of one partition, from offset 0 to the high watermark, via raw Fetch v11."""
    T = FetchRequest.FetchTopic
    out: list[LoggedRecord] = []
    offset = 0
    with RawConnection(bootstrap, timeout=30) as conn:
        while True:
            req = FetchRequest(version=11, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=8 << 20,
                               isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
                               forgotten_topics_data=[], topics=[T(version=11, topic=topic, partitions=[
                                   T.FetchPartition(version=11, partition=partition, current_leader_epoch=-1,
                                                    fetch_offset=offset, log_start_offset=-1,
                                                    partition_max_bytes=8 << 20)])])
            part = conn.request(req, 11).responses[0].partitions[0]
            assert part.error_code == 0, part
            if part.records:
                records = MemoryRecords(bytes(part.records))
                while (batch := records.next_batch()) is not None:
                    if batch.is_control_batch:
                        offset = batch.base_offset + batch.last_offset_delta + 1
                        continue
                    for rec in batch:
                        if rec.offset < offset:  # a fetch may start inside a batch
                            continue
                        seq = batch.base_sequence + (rec.offset - batch.base_offset) \
                            if batch.base_sequence >= 0 else -1
                        out.append(LoggedRecord(rec.offset, rec.value, batch.producer_id,
                                                batch.producer_epoch, seq))
                        offset = rec.offset + 1
            if offset >= part.high_watermark:
                return out


@dataclass
class Outcome:
    """What the producer reported: per partition, values acknowledged (in ack order) and failed."""

    acked: dict[int, list[bytes]] = field(default_factory=lambda: {p: [] for p in range(PARTITIONS)})
    failed: dict[int, list[tuple[bytes, str]]] = field(default_factory=lambda: {p: [] for p in range(PARTITIONS)})

    @property
    def failures(self) -> list[tuple[int, bytes, str]]:
        return [(p, v, e) for p, fs in self.failed.items() for v, e in fs]


def check_outcome(plan: list[tuple[int, bytes]], outcome: Outcome) -> None:
    """The producer acknowledged every record exactly once and reported none as failed."""
    failures = outcome.failures
    assert not failures, f"{len(failures)} delivery failures reported, e.g. {failures[:5]}"
    sent = _by_partition(plan)
    for p in range(PARTITIONS):
        # Acknowledgements may arrive out of send order (a retried batch is answered after a later
        # one), so compare as multisets; the log's order is checked by check_log.
        extra, missing = Counter(outcome.acked[p]) - Counter(sent[p]), Counter(sent[p]) - Counter(outcome.acked[p])
        assert not extra and not missing, (f"partition {p}: acknowledgements differ from what was sent: "
                                           f"{sum(missing.values())} missing, {sum(extra.values())} extra")


def check_log(rig: Rig, plan: list[tuple[int, bytes]]) -> None:
    """Every record exactly once, at contiguous offsets, in send order per partition: read raw and by a consumer."""
    sent = _by_partition(plan)
    problems: list[str] = []
    for p in range(PARTITIONS):
        logged = read_partition(rig.broker.bootstrap, rig.topic, p)
        values = [r.value for r in logged]
        dups = [v for v, c in Counter(values).items() if c > 1]
        if dups:
            problems.append(f"partition {p}: {len(dups)} values written more than once, e.g. "
                            f"{_describe(logged, dups[0])}")
        if values != sent[p]:
            problems.append(f"partition {p}: log differs from send order: {_first_difference(logged, sent[p])}")
        if [r.offset for r in logged] != list(range(len(logged))):
            problems.append(f"partition {p}: offsets not contiguous from 0")
    assert not problems, "\n".join(problems) + f"\nproxy: {rig.proxy.stats}"

    # What a real consumer sees (through the proxy, whose faults are off by now).
    consumed = consume_all(rig.broker.bootstrap, rig.topic, PARTITIONS, len(plan), timeout=120)
    seen: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    for c in consumed:
        seen[c.partition].append((c.offset, c.value))
    for p in range(PARTITIONS):
        rows = sorted(seen[p])
        offsets, values = [o for o, _ in rows], [v for _, v in rows]
        if offsets != list(range(len(rows))):
            problems.append(f"partition {p}: consumer saw {len(rows)} records at non-contiguous offsets")
        if values != sent[p]:
            first = next((i for i, (a, b) in enumerate(zip(values, sent[p], strict=False)) if a != b),
                         min(len(values), len(sent[p])))
            problems.append(f"partition {p}: consumer saw {len(values)} records, {len(sent[p])} sent; first "
                            f"difference at index {first}")
    assert not problems, "\n".join(problems)


def _by_partition(plan: list[tuple[int, bytes]]) -> dict[int, list[bytes]]:
    sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for p, v in plan:
        sent[p].append(v)
    return sent


def _describe(logged: list[LoggedRecord], value: bytes) -> str:
    return ", ".join(f"offset {r.offset} (pid {r.producer_id} epoch {r.producer_epoch} seq {r.sequence})"
                     for r in logged if r.value == value)


def _first_difference(logged: list[LoggedRecord], sent: list[bytes]) -> str:
    for i, (r, v) in enumerate(zip(logged, sent, strict=False)):
        if r.value != v:
            around = logged[max(0, i - 3): i + 3]
            return (f"at index {i} expected {v!r}, log has " + "; ".join(
                f"[{x.offset}] {x.value!r} pid {x.producer_id} e{x.producer_epoch} seq {x.sequence}"
                for x in around))
    return f"log has {len(logged)} records, {len(sent)} were sent"


# --- producers ---------------------------------------------------------------------------------


def produce_confluent(rig: Rig, plan: list[tuple[int, bytes]]) -> Outcome:
    from confluent_kafka import KafkaException, Producer

    out = Outcome()
    fatal: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is None:
            out.acked[msg.partition()].append(msg.value())
        else:
            out.failed[msg.partition()].append((msg.value(), str(err)))

    def on_error(err) -> None:
        if err.fatal():
            fatal.append(str(err))

    p = Producer({
        "bootstrap.servers": rig.proxy.address,
        "enable.idempotence": True,
        "acks": "all",
        "retries": 2147483647,
        "message.timeout.ms": 300000,
        "linger.ms": 5,
        # Small batches: many requests in flight, so many chances for a fault to hit one.
        "batch.num.messages": 200,
        "retry.backoff.ms": 10,
        "reconnect.backoff.ms": 10,
        "reconnect.backoff.max.ms": 200,
        "request.timeout.ms": REQUEST_TIMEOUT_MS,
        "socket.timeout.ms": REQUEST_TIMEOUT_MS,
        "error_cb": on_error,
    })
    for part, value in plan:
        while True:
            try:
                p.produce(rig.topic, value=value, partition=part, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
            except KafkaException as e:  # fatal idempotence error: no more produce
                fatal.append(str(e))
                break
        if fatal:
            break
        p.poll(0)
    remaining = p.flush(300)
    assert remaining == 0, f"{remaining} messages neither delivered nor failed"
    assert not fatal, f"fatal producer error: {fatal[:3]}; proxy: {rig.proxy.stats}"
    return out


def produce_kafka_python(rig: Rig, plan: list[tuple[int, bytes]]) -> Outcome:
    from kafka import KafkaProducer

    out = Outcome()
    p = KafkaProducer(bootstrap_servers=rig.proxy.address, enable_idempotence=True, acks="all",
                      retries=2147483647, delivery_timeout_ms=300000, request_timeout_ms=REQUEST_TIMEOUT_MS, linger_ms=5,
                      batch_size=2048, retry_backoff_ms=10, reconnect_backoff_ms=10, reconnect_backoff_max_ms=200,
                      max_in_flight_requests_per_connection=5)
    try:
        for part, value in plan:
            fut = p.send(rig.topic, value=value, partition=part)
            fut.add_callback(lambda md, v=value: out.acked[md.partition].append(v))
            fut.add_errback(lambda e, v=value, pt=part: out.failed[pt].append((v, repr(e))))
        p.flush(300)
    finally:
        p.close(timeout=30)
    return out


async def produce_aiokafka(rig: Rig, plan: list[tuple[int, bytes]]) -> Outcome:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaTimeoutError

    out = Outcome()
    p = AIOKafkaProducer(bootstrap_servers=rig.proxy.address, enable_idempotence=True, acks="all", linger_ms=5,
                         max_batch_size=2048, request_timeout_ms=REQUEST_TIMEOUT_MS, retry_backoff_ms=10)
    await p.start()
    try:
        futures = []
        for part, value in plan:
            while True:
                try:
                    futures.append((part, value, await p.send(rig.topic, value=value, partition=part)))
                    break
                except KafkaTimeoutError:
                    # No room in the partition's batch within request_timeout_ms (a stalled
                    # connection holds the batch in flight): the record was not accepted, offer it again.
                    pass
        for part, value, fut in futures:
            try:
                await fut
                out.acked[part].append(value)
            except Exception as e:  # noqa: BLE001 - a reported failure is checked below, not fatal here
                out.failed[part].append((value, repr(e)))
    finally:
        await p.stop()
    return out


# --- tests -------------------------------------------------------------------------------------

N_RECORDS = 100_000
# Per-request fault probabilities. librdkafka sends about six times as many (smaller) requests as
# the pure-Python clients for the same records, so its rates are lower; either way a run sees
# dozens of faults. Each stall costs one client request timeout, hence their low rate.
FAULTS: dict[str, dict[str, float]] = {
    "confluent-kafka": {"drop_rate": 0.03, "swallow_rate": 0.07, "stall_rate": 0.004},
    "kafka-python": {"drop_rate": 0.05, "swallow_rate": 0.12, "stall_rate": 0.015},
    "aiokafka": {"drop_rate": 0.05, "swallow_rate": 0.12, "stall_rate": 0.015},
}
PRODUCERS = {"confluent-kafka": produce_confluent, "kafka-python": produce_kafka_python,
             "aiokafka": produce_aiokafka}


async def _run(rig_factory, client: str, *, seed: int, n: int = N_RECORDS, intensity: float = 1.0) -> None:
    rates = {k: v * intensity for k, v in FAULTS[client].items()}
    rig = await asyncio.to_thread(rig_factory, f"chaos-{client}", seed=seed, max_faults=1000, **rates)
    plan = _plan(n)
    produce = PRODUCERS[client]
    t0 = time.monotonic()
    if asyncio.iscoroutinefunction(produce):
        outcome = await produce(rig, plan)
    else:
        outcome = await asyncio.to_thread(produce, rig, plan)
    elapsed = time.monotonic() - t0
    rig.proxy.disable_faults()
    stats = rig.proxy.stats
    failures = outcome.failures
    print(f"\n{client}: {n} records in {elapsed:.1f}s; proxy: {stats.requests} requests, "
          f"{stats.connections} connections, {stats.drops} drops, {stats.swallows} swallows, "
          f"{stats.stalls} stalls ({stats.swallowed_responses} responses lost), "
          f"{stats.requests_by_api[INIT_PRODUCER_ID]} InitProducerId; "
          f"{len(failures)} delivery failures reported")
    assert stats.drops > 0 and stats.by_api[("swallow", PRODUCE)] > 0, f"faults did not hit Produce: {stats}"
    # Every client retries a failed send until it succeeds: librdkafka and kafka-python because of
    # retries=MAX_INT and a 300 s delivery timeout, aiokafka because an idempotent producer never
    # expires a batch (it retries every retriable error). So nothing may be reported as failed.
    check_outcome(plan, outcome)
    await asyncio.to_thread(check_log, rig, plan)


@pytest.mark.asyncio
@pytest.mark.parametrize("client", [  # the pure-Python clients' runs: make test-all (the suite's time budget)
    c if c == "confluent-kafka" else pytest.param(c, marks=pytest.mark.slow) for c in FAULTS])
async def test_idempotent_producer_under_faults(rig_factory, client):
    await _run(rig_factory, client, seed=1)


@pytest.mark.slow
@pytest.mark.asyncio
@pytest.mark.parametrize("seed", [11, 12])
@pytest.mark.parametrize("client", list(FAULTS))
async def test_idempotent_producer_under_heavy_faults(rig_factory, client, seed):
    await _run(rig_factory, client, seed=seed, intensity=2.0)
