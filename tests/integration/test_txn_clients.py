"""Transactions through stock clients: confluent-kafka, kafka-python and aiokafka (issue 5, acceptance 1).

For each client: a produce-only transaction; two transactional producers whose commits and aborts
interleave over several partitions (read_committed consumers see exactly the committed records in
order, read_uncommitted ones see everything, and positions end at the log end offset, past the
markers); consume-transform-produce with offsets sent to the transaction in the group-metadata form
(aiokafka only has the group-id form); and zombie fencing, where a second producer with the same
transactional.id fences the first on commit, on send and on send-offsets.

Every scenario reads its results back with the same client's consumer, so the fetch path
(LSO, aborted-transaction lists, control batches) is exercised by each client too.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 30
PARTITIONS = 3

# Consume-transform-produce needs consumer groups (TxnOffsetCommit, AddOffsetsToTxn); they are wired
# into the broker as soon as the module exists.
requires_groups = pytest.mark.skipif(not (ROOT / "coordinator" / "group_coordinator.py").exists(),
                                     reason="consumer groups (coordinator/group_coordinator.py) not built yet")

_ids = itertools.count()


@pytest.fixture(autouse=True)
def _collect_garbage():
    """Run finalizers right after each test: a fenced aiokafka producer leaves futures with
    unretrieved exceptions whose __del__ logs; when the GC happened to run them inside pytest's
    later ast.parse, CPython 3.11.7 raised "AST constructor recursion depth mismatch"."""
    yield
    gc.collect()


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_ids)}-{int(time.time() * 1000) % 10_000_000}"


# --- shared helpers ---------------------------------------------------------------------------------


def create_topics(bootstrap: str, *names: str, partitions: int = PARTITIONS, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, partitions, 1, config=config or {}) for n in names],
                                  operation_timeout=10)
    for f in futures.values():
        f.result(TIMEOUT)


def log_end_offsets(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
    """High watermarks (log end on a single node), including trailing control batches."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-watermarks"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT)[1] for p in range(partitions)}
    finally:
        c.close()


def produce_plain(bootstrap: str, topic: str, count: int, partitions: int = PARTITIONS) -> dict[int, list[bytes]]:
    """Non-transactional input records ``in-<i>`` round-robin over partitions; returns values per partition."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    out: dict[int, list[bytes]] = {q: [] for q in range(partitions)}
    for i in range(count):
        value = f"in-{i}".encode()
        p.produce(topic, value=value, key=value, partition=i % partitions)
        out[i % partitions].append(value)
    assert p.flush(TIMEOUT) == 0
    return out


def transform(value: bytes) -> bytes:
    return b"T:" + value


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=TIMEOUT)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


@dataclass
class Expected:
    """What an interleaved plan wrote: every data record and the committed ones, in log order."""
    sent: dict[int, list[bytes]] = field(default_factory=lambda: {p: [] for p in range(PARTITIONS)})
    committed: dict[int, list[bytes]] = field(default_factory=lambda: {p: [] for p in range(PARTITIONS)})
    commits: int = 0
    aborts: int = 0


# Two producers A and B with transactions open at the same time on the same partitions, so aborted
# ranges overlap committed ones and the LSO is held by one producer while the other finishes.
PLAN: tuple[tuple, ...] = (
    ("A", "begin"), ("A", "send", 0), ("B", "begin"), ("B", "send", 0), ("A", "send", 1), ("B", "send", 1),
    ("A", "commit"), ("B", "send", 2), ("B", "abort"),
    ("A", "begin"), ("B", "begin"), ("A", "send", 2), ("B", "send", 2), ("A", "send", 0), ("A", "abort"),
    ("B", "send", 0), ("B", "commit"),
    ("A", "begin"), ("A", "send", 1), ("A", "abort"),
    ("B", "begin"), ("B", "send", 1), ("B", "send", 2), ("B", "send", 0), ("B", "commit"),
    ("A", "begin"), ("A", "send", 2), ("A", "commit"),
)
RECORDS_PER_SEND = 2


class TxnOps:
    """A transactional producer behind one interface so :func:`run_plan` can drive any client."""

    def begin(self) -> None: ...
    def send(self, topic: str, partition: int, value: bytes) -> None: ...  # returns once acknowledged
    def commit(self) -> None: ...
    def abort(self) -> None: ...
    def close(self) -> None: ...


def plan_steps(plan: tuple[tuple, ...]):
    """Yield (producer, action, partition, values) with the values each send writes."""
    txn_no = {"A": 0, "B": 0}
    for step in plan:
        who, action = step[0], step[1]
        if action == "begin":
            txn_no[who] += 1
        values = []
        if action == "send":
            values = [f"{who}{txn_no[who]}-p{step[2]}-{i}".encode() for i in range(RECORDS_PER_SEND)]
        yield who, action, (step[2] if action == "send" else None), values


def record_step(exp: Expected, pending: dict[str, list[tuple[int, bytes]]], who: str, action: str,
                partition: int | None, values: list[bytes]) -> None:
    if action == "begin":
        pending[who] = []
    elif action == "send":
        assert partition is not None
        for v in values:
            exp.sent[partition].append(v)
            pending[who].append((partition, v))
    elif action == "commit":
        exp.commits += 1
        # Committed records keep their log positions; merging by send order keeps them in offset order.
        for p, v in pending.pop(who):
            exp.committed[p].append(v)
    elif action == "abort":
        exp.aborts += 1
        pending.pop(who)


def reorder_committed(exp: Expected) -> None:
    """Committed records sorted by their position in the log (send order across both producers)."""
    for p in exp.committed:
        order = {v: i for i, v in enumerate(exp.sent[p])}
        exp.committed[p].sort(key=order.__getitem__)


def run_plan(producers: dict[str, TxnOps], topic: str) -> Expected:
    exp = Expected()
    pending: dict[str, list[tuple[int, bytes]]] = {}
    for who, action, partition, values in plan_steps(PLAN):
        ops = producers[who]
        if action == "begin":
            ops.begin()
        elif action == "send":
            for v in values:
                ops.send(topic, partition, v)
        elif action == "commit":
            ops.commit()
        else:
            ops.abort()
        record_step(exp, pending, who, action, partition, values)
    reorder_committed(exp)
    return exp


async def run_plan_async(producers: dict[str, Callable[[str, tuple], Awaitable[None]]], topic: str) -> Expected:
    exp = Expected()
    pending: dict[str, list[tuple[int, bytes]]] = {}
    for who, action, partition, values in plan_steps(PLAN):
        await producers[who](action, (topic, partition, values))
        record_step(exp, pending, who, action, partition, values)
    reorder_committed(exp)
    return exp


def check_read(exp: Expected, isolation: str, got: dict[int, list[bytes]], positions: dict[int, int],
               ends: dict[int, int]) -> None:
    want = exp.committed if isolation == "read_committed" else exp.sent
    assert got == want, f"{isolation}: records differ"
    assert positions == ends, f"{isolation}: positions {positions} should be the log end offsets {ends}"


# === confluent-kafka ================================================================================


def confluent_producer(bootstrap: str, tid: str, **extra) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 0, **extra})
    p.init_transactions(TIMEOUT)
    return p


class ConfluentOps(TxnOps):
    def __init__(self, bootstrap: str, tid: str) -> None:
        self.errors: list[KafkaError] = []  # failed deliveries
        self.p = confluent_producer(bootstrap, tid)

    def begin(self) -> None:
        self.p.begin_transaction()

    def send(self, topic: str, partition: int, value: bytes) -> None:
        def on_delivery(err, msg) -> None:
            if err is not None:
                self.errors.append(err)

        self.p.produce(topic, value=value, partition=partition, on_delivery=on_delivery)
        assert self.p.flush(TIMEOUT) == 0
        assert not self.errors, self.errors

    def commit(self) -> None:
        self.p.commit_transaction(TIMEOUT)

    def abort(self) -> None:
        self.p.abort_transaction(TIMEOUT)


def confluent_read(bootstrap: str, topic: str, isolation: str, partitions: int = PARTITIONS, *,
                   start: dict[int, int] | None = None, extra: dict | None = None,
                   offsets: dict[int, list[int]] | None = None) -> tuple[dict[int, list[bytes]], dict[int, int]]:
    """Assign every partition from ``start`` (default 0), read to EOF (the LSO for read_committed).

    Returns values and final positions per partition; fills ``offsets`` with each record's offset.
    """
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("txn-reader"), "enable.auto.commit": False,
                  "enable.partition.eof": True, "isolation.level": isolation, **(extra or {})})
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    try:
        c.assign([TopicPartition(topic, p, (start or {}).get(p, 0)) for p in range(partitions)])
        eof: set[int] = set()
        deadline = time.monotonic() + TIMEOUT
        while len(eof) < partitions and time.monotonic() < deadline:
            for msg in c.consume(num_messages=500, timeout=0.5):
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        eof.add(msg.partition())
                        continue
                    raise AssertionError(f"consume error: {msg.error()}")
                eof.discard(msg.partition())
                got[msg.partition()].append(msg.value())
                if offsets is not None:
                    offsets.setdefault(msg.partition(), []).append(msg.offset())
        assert len(eof) == partitions, f"no EOF on partitions {set(range(partitions)) - eof}"
        positions = {tp.partition: tp.offset for tp in c.position([TopicPartition(topic, p)
                                                                    for p in range(partitions)])}
    finally:
        c.close()
    return got, positions


def test_confluent_produce_only_transaction(broker):
    topic = unique("txn-cf-produce")
    create_topics(broker.bootstrap, topic)
    p = confluent_producer(broker.bootstrap, unique("cf-tid"))
    p.begin_transaction()
    values = [f"v{i}".encode() for i in range(10)]
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % PARTITIONS)
    p.commit_transaction(TIMEOUT)
    want = {q: values[q::PARTITIONS] for q in range(PARTITIONS)}
    ends = log_end_offsets(broker.bootstrap, topic)
    # Each partition: its records plus one COMMIT marker.
    assert ends == {q: len(want[q]) + 1 for q in range(PARTITIONS)}
    for isolation in ("read_committed", "read_uncommitted"):
        got, positions = confluent_read(broker.bootstrap, topic, isolation)
        assert got == want
        assert positions == ends


def test_confluent_interleaved_commit_abort(broker):
    topic = unique("txn-cf-interleaved")
    create_topics(broker.bootstrap, topic)
    exp = run_plan({"A": ConfluentOps(broker.bootstrap, unique("cf-A")),
                    "B": ConfluentOps(broker.bootstrap, unique("cf-B"))}, topic)
    assert exp.commits and exp.aborts
    ends = log_end_offsets(broker.bootstrap, topic)
    for isolation in ("read_committed", "read_uncommitted"):
        check_read(exp, isolation, *confluent_read(broker.bootstrap, topic, isolation), ends)


@pytest.mark.parametrize("segment_bytes", [None, 300], ids=["one-segment", "many-segments"])
def test_confluent_read_committed_in_small_fetches_and_from_inside_aborted_transactions(broker, segment_bytes):
    """One batch per fetch, and fetches starting in the middle of an aborted transaction: the
    aborted-transaction list of every response must cover the returned range, not just
    transactions that start inside it. With tiny segments, transactions and their .txnindex
    entries span several segments."""
    topic = unique("txn-cf-small-fetch")
    create_topics(broker.bootstrap, topic, config={"segment.bytes": str(segment_bytes)} if segment_bytes else None)
    exp = run_plan({"A": ConfluentOps(broker.bootstrap, unique("cf-A")),
                    "B": ConfluentOps(broker.bootstrap, unique("cf-B"))}, topic)
    ends = log_end_offsets(broker.bootstrap, topic)
    # 1 byte per partition: the broker still returns the first whole batch (KIP-74), and only that.
    small = {"max.partition.fetch.bytes": 1, "message.max.bytes": 1000, "fetch.max.bytes": 1000}
    check_read(exp, "read_committed", *confluent_read(broker.bootstrap, topic, "read_committed", extra=small), ends)

    offsets: dict[int, list[int]] = {}
    values, _ = confluent_read(broker.bootstrap, topic, "read_uncommitted", offsets=offsets)
    offset_of = {v: o for p in values for v, o in zip(values[p], offsets[p], strict=True)}
    committed = {v for vs in exp.committed.values() for v in vs}
    # Per partition: the second record of the first aborted send (one record into an aborted batch).
    start = {}
    for p, vs in values.items():
        inside = [v for v in vs if v not in committed and v.endswith(b"-1")]
        assert inside, f"plan has no aborted send on partition {p}"
        start[p] = offset_of[inside[0]]
    got, positions = confluent_read(broker.bootstrap, topic, "read_committed", start=start)
    assert got == {p: [v for v in exp.committed[p] if offset_of[v] >= start[p]] for p in range(PARTITIONS)}
    assert positions == ends
    if segment_bytes:
        broker.stop()
        segments = {p: len(list((broker.data_dir / f"{topic}-{p}").glob("*.log"))) for p in range(PARTITIONS)}
        assert all(n > 2 for n in segments.values()), segments


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_confluent_open_transaction_across_broker_restart(broker, kill):
    """Aborted ranges (.txnindex), producer state and an open transaction survive a broker restart:
    read_committed still hides the aborted records and stops at the open transaction (LSO), and the
    producer commits it after the restart."""
    topic = unique("txn-cf-restart")
    create_topics(broker.bootstrap, topic)
    a = ConfluentOps(broker.bootstrap, unique("cf-A"))
    exp = run_plan({"A": a, "B": ConfluentOps(broker.bootstrap, unique("cf-B"))}, topic)
    before = log_end_offsets(broker.bootstrap, topic)
    a.begin()
    open_values = {0: [b"open-0a", b"open-0b"], 1: [b"open-1a"]}
    for p, vs in open_values.items():
        for v in vs:
            a.send(topic, p, v)
    broker.restart(kill=kill)

    got, positions = confluent_read(broker.bootstrap, topic, "read_committed")
    assert got == exp.committed
    assert positions == before  # the open transaction's first offsets, on partitions 0 and 1
    got, _ = confluent_read(broker.bootstrap, topic, "read_uncommitted")
    assert got == {p: exp.sent[p] + open_values.get(p, []) for p in range(PARTITIONS)}

    a.commit()
    got, positions = confluent_read(broker.bootstrap, topic, "read_committed")
    assert got == {p: exp.committed[p] + open_values.get(p, []) for p in range(PARTITIONS)}
    assert positions == log_end_offsets(broker.bootstrap, topic)


def _is_fenced(err: KafkaError) -> bool:
    return err.fatal() or err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                         KafkaError.INVALID_PRODUCER_EPOCH)


@requires_groups
def test_confluent_consume_transform_produce(broker):
    src, dst, group = unique("txn-cf-in"), unique("txn-cf-out"), unique("cf-ctp")
    create_topics(broker.bootstrap, src, dst)
    inputs = produce_plain(broker.bootstrap, src, 300)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    producer = confluent_producer(broker.bootstrap, unique("cf-ctp"))
    done, aborted = 0, False
    try:
        consumer.subscribe([src])
        deadline = time.monotonic() + 60
        while done < 300 and time.monotonic() < deadline:
            msgs = [m for m in consumer.consume(num_messages=40, timeout=0.5) if m.error() is None]
            if not msgs:
                continue
            producer.begin_transaction()
            for m in msgs:
                producer.produce(dst, key=m.key(), value=transform(m.value()), partition=m.partition())
            positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), TIMEOUT)
            if not aborted and done >= 100:
                # An aborted batch: its offsets must not count, so the records are read and written again.
                producer.abort_transaction(TIMEOUT)
                aborted = True
                for tp in consumer.committed(consumer.assignment(), timeout=TIMEOUT):
                    consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))
                continue
            producer.commit_transaction(TIMEOUT)
            done += len(msgs)
    finally:
        consumer.close()
    assert done == 300 and aborted
    assert committed_offsets(broker.bootstrap, group, src) == log_end_offsets(broker.bootstrap, src)
    got, _ = confluent_read(broker.bootstrap, dst, "read_committed")
    assert got == {p: [transform(v) for v in vs] for p, vs in inputs.items()}


# send: the zombie's first send in the transaction (AddPartitionsToTxn is fenced); send_again: a
# send to a partition already in its (meanwhile aborted) transaction, i.e. a Produce request with the
# old epoch that the partition itself must refuse.
ZOMBIE_CASES = ["commit", "send", "send_again", "send_offsets"]


@requires_groups
@pytest.mark.parametrize("outcome", ["commit", "abort"])
def test_confluent_transactional_offsets_pending_until_marker(broker, outcome):
    """Offsets sent to a transaction are invisible to a read_uncommitted OffsetFetch and unstable
    for a read_committed one (librdkafka sets require_stable and retries UNSTABLE_OFFSET_COMMIT)
    until the transaction ends; then the commit shows them and the abort drops them."""
    src, dst, group = unique("txn-cf-pend-in"), unique("txn-cf-pend-out"), unique("cf-pending")
    create_topics(broker.bootstrap, src, dst)
    meta_consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    producer = confluent_producer(broker.bootstrap, unique("cf-pending"))
    tp = [TopicPartition(src, 0)]

    def committed(isolation: str, timeout: float) -> int:
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "isolation.level": isolation})
        try:
            return c.committed(tp, timeout=timeout)[0].offset
        finally:
            c.close()

    try:
        # A committed starting point through a first transaction.
        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition(src, 0, 3)], meta_consumer.consumer_group_metadata(),
                                             TIMEOUT)
        producer.commit_transaction(TIMEOUT)
        assert committed("read_committed", TIMEOUT) == 3

        producer.begin_transaction()
        producer.produce(dst, value=b"x", partition=0)
        producer.send_offsets_to_transaction([TopicPartition(src, 0, 7)], meta_consumer.consumer_group_metadata(),
                                             TIMEOUT)
        assert committed("read_uncommitted", TIMEOUT) == 3
        with pytest.raises(KafkaException) as info:
            committed("read_committed", 2)  # UNSTABLE_OFFSET_COMMIT, retried by librdkafka until the timeout
        assert info.value.args[0].code() == KafkaError._TIMED_OUT
        if outcome == "commit":
            producer.commit_transaction(TIMEOUT)
        else:
            producer.abort_transaction(TIMEOUT)
    finally:
        meta_consumer.close()
    want = 7 if outcome == "commit" else 3
    assert committed("read_committed", TIMEOUT) == want
    assert committed("read_uncommitted", TIMEOUT) == want


@pytest.mark.parametrize("where", ZOMBIE_CASES)
def test_confluent_zombie_fencing(broker, where):
    if where == "send_offsets" and not (ROOT / "coordinator" / "group_coordinator.py").exists():
        pytest.skip("consumer groups not built yet")
    topic, tid = unique("txn-cf-zombie"), unique("cf-zombie")
    create_topics(broker.bootstrap, topic)
    zombie = ConfluentOps(broker.bootstrap, tid)
    zombie.begin()
    if where in ("commit", "send_again"):
        zombie.send(topic, 0, b"zombie-open")  # open on the partition when the new instance arrives
    fresh = ConfluentOps(broker.bootstrap, tid)  # aborts the zombie's open transaction and bumps the epoch

    with pytest.raises(KafkaException) as info:
        if where == "commit":
            zombie.p.commit_transaction(TIMEOUT)
        elif where in ("send", "send_again"):
            # No flush() here: confluent-kafka 2.16's flush() raises the fatal KafkaError object itself
            # (not an exception) when a delivery callback is pending; commit surfaces the same error.
            zombie.p.produce(topic, value=b"zombie-late", partition=0)
            zombie.p.commit_transaction(TIMEOUT)
        else:
            group_consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("cf-zombie-g")})
            try:
                zombie.p.send_offsets_to_transaction([TopicPartition(topic, 0, 0)],
                                                     group_consumer.consumer_group_metadata(), TIMEOUT)
            finally:
                group_consumer.close()
    assert _is_fenced(info.value.args[0]), info.value.args[0]
    if where == "send":  # the send's AddPartitionsToTxn is what got fenced
        assert "add partitions" in info.value.args[0].str().lower(), info.value.args[0]

    fresh.begin()
    fresh.send(topic, 0, b"fresh")
    fresh.commit()
    got, _ = confluent_read(broker.bootstrap, topic, "read_committed")
    assert got[0] == [b"fresh"]
    got, _ = confluent_read(broker.bootstrap, topic, "read_uncommitted")
    assert b"zombie-late" not in got[0]  # fenced before it reached the log
    assert (b"zombie-open" in got[0]) == (where in ("commit", "send_again"))


# === kafka-python ===================================================================================


class KafkaPythonOps(TxnOps):
    def __init__(self, bootstrap: str, tid: str) -> None:
        from kafka import KafkaProducer

        self.p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid, linger_ms=0,
                               request_timeout_ms=TIMEOUT * 1000)
        self.p.init_transactions()

    def begin(self) -> None:
        self.p.begin_transaction()

    def send(self, topic: str, partition: int, value: bytes) -> None:
        self.p.send(topic, value=value, partition=partition).get(timeout=TIMEOUT)

    def commit(self) -> None:
        self.p.commit_transaction()

    def abort(self) -> None:
        self.p.abort_transaction()

    def close(self) -> None:
        self.p.close(timeout=5)


def kafka_python_read(bootstrap: str, topic: str, isolation: str,
                      partitions: int = PARTITIONS) -> tuple[dict[int, list[bytes]], dict[int, int]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      isolation_level=isolation, request_timeout_ms=TIMEOUT * 1000)
    tps = [KTP(topic, p) for p in range(partitions)]
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    try:
        c.assign(tps)
        c.seek_to_beginning(*tps)
        ends = c.end_offsets(tps)  # the LSO for read_committed
        deadline = time.monotonic() + TIMEOUT
        while any(c.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            for tp, recs in c.poll(timeout_ms=500).items():
                got[tp.partition].extend(r.value for r in recs)
        positions = {tp.partition: c.position(tp) for tp in tps}
    finally:
        c.close()
    return got, positions


def test_kafka_python_produce_only_transaction(broker):
    topic = unique("txn-kp-produce")
    create_topics(broker.bootstrap, topic)
    ops = KafkaPythonOps(broker.bootstrap, unique("kp-tid"))
    try:
        ops.begin()
        values = [f"v{i}".encode() for i in range(10)]
        futures = [ops.p.send(topic, value=v, partition=i % PARTITIONS) for i, v in enumerate(values)]
        ops.commit()
        assert all(f.succeeded() for f in futures)
    finally:
        ops.close()
    want = {q: values[q::PARTITIONS] for q in range(PARTITIONS)}
    ends = log_end_offsets(broker.bootstrap, topic)
    assert ends == {q: len(want[q]) + 1 for q in range(PARTITIONS)}
    for isolation in ("read_committed", "read_uncommitted"):
        got, positions = kafka_python_read(broker.bootstrap, topic, isolation)
        assert got == want
        assert positions == ends


def test_kafka_python_interleaved_commit_abort(broker):
    topic = unique("txn-kp-interleaved")
    create_topics(broker.bootstrap, topic)
    a, b = KafkaPythonOps(broker.bootstrap, unique("kp-A")), KafkaPythonOps(broker.bootstrap, unique("kp-B"))
    try:
        exp = run_plan({"A": a, "B": b}, topic)
    finally:
        a.close()
        b.close()
    ends = log_end_offsets(broker.bootstrap, topic)
    for isolation in ("read_committed", "read_uncommitted"):
        check_read(exp, isolation, *kafka_python_read(broker.bootstrap, topic, isolation), ends)


@requires_groups
def test_kafka_python_consume_transform_produce(broker):
    from kafka import KafkaConsumer, OffsetAndMetadata

    src, dst, group = unique("txn-kp-in"), unique("txn-kp-out"), unique("kp-ctp")
    create_topics(broker.bootstrap, src, dst)
    inputs = produce_plain(broker.bootstrap, src, 300)
    consumer = KafkaConsumer(src, bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest", isolation_level="read_committed",
                             request_timeout_ms=TIMEOUT * 1000)
    ops = KafkaPythonOps(broker.bootstrap, unique("kp-ctp"))
    done, aborted = 0, False
    try:
        deadline = time.monotonic() + 60
        while done < 300 and time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=500, max_records=40)
            msgs = [r for recs in batch.values() for r in recs]
            if not msgs:
                continue
            ops.begin()
            for r in msgs:
                ops.p.send(dst, key=r.key, value=transform(r.value), partition=r.partition)
            offsets = {tp: OffsetAndMetadata(consumer.position(tp), "", -1) for tp in consumer.assignment()}
            ops.p.send_offsets_to_transaction(offsets, consumer.group_metadata())
            if not aborted and done >= 100:
                ops.abort()
                aborted = True
                for tp in consumer.assignment():
                    committed = consumer.committed(tp)
                    consumer.seek(tp, committed if committed is not None else 0)
                continue
            ops.commit()
            done += len(msgs)
    finally:
        consumer.close()
        ops.close()
    assert done == 300 and aborted
    assert committed_offsets(broker.bootstrap, group, src) == log_end_offsets(broker.bootstrap, src)
    got, _ = kafka_python_read(broker.bootstrap, dst, "read_committed")
    assert got == {p: [transform(v) for v in vs] for p, vs in inputs.items()}


@pytest.mark.parametrize("where", ZOMBIE_CASES)
def test_kafka_python_zombie_fencing(broker, where):
    from kafka import KafkaConsumer, OffsetAndMetadata
    from kafka import TopicPartition as KTP
    from kafka.errors import KafkaError as KPError

    if where == "send_offsets" and not (ROOT / "coordinator" / "group_coordinator.py").exists():
        pytest.skip("consumer groups not built yet")
    topic, tid = unique("txn-kp-zombie"), unique("kp-zombie")
    create_topics(broker.bootstrap, topic)
    zombie = KafkaPythonOps(broker.bootstrap, tid)
    fresh = None
    try:
        zombie.begin()
        if where in ("commit", "send_again"):
            zombie.send(topic, 0, b"zombie-open")
        fresh = KafkaPythonOps(broker.bootstrap, tid)
        with pytest.raises(KPError) as info:
            if where == "commit":
                zombie.commit()
            elif where in ("send", "send_again"):
                zombie.p.send(topic, value=b"zombie-late", partition=0).get(timeout=TIMEOUT)
                zombie.commit()
            else:
                c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=unique("kp-zombie-g"))
                try:
                    zombie.p.send_offsets_to_transaction({KTP(topic, 0): OffsetAndMetadata(0, "", -1)},
                                                         c.group_metadata())
                finally:
                    c.close()
        assert type(info.value).__name__ in ("ProducerFencedError", "InvalidProducerEpochError"), info.value
        fresh.begin()
        fresh.send(topic, 0, b"fresh")
        fresh.commit()
    finally:
        zombie.close()
        if fresh is not None:
            fresh.close()
    got, _ = kafka_python_read(broker.bootstrap, topic, "read_committed")
    assert got[0] == [b"fresh"]
    got, _ = kafka_python_read(broker.bootstrap, topic, "read_uncommitted")
    assert b"zombie-late" not in got[0]


# === aiokafka =======================================================================================


async def aiokafka_producer(bootstrap: str, tid: str):
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid, request_timeout_ms=TIMEOUT * 1000)
    await p.start()  # runs InitProducerId
    return p


async def aiokafka_read(bootstrap: str, topic: str, isolation: str,
                        partitions: int = PARTITIONS) -> tuple[dict[int, list[bytes]], dict[int, int]]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         isolation_level=isolation, auto_offset_reset="earliest",
                         request_timeout_ms=TIMEOUT * 1000)
    await c.start()
    tps = [ATP(topic, p) for p in range(partitions)]
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    try:
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        ends = await c.end_offsets(tps)  # the LSO for read_committed
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if all([await c.position(tp) >= ends[tp] for tp in tps]):
                break
            for tp, recs in (await c.getmany(timeout_ms=500)).items():
                got[tp.partition].extend(r.value for r in recs)
        positions = {tp.partition: await c.position(tp) for tp in tps}
    finally:
        await c.stop()
    return got, positions


async def test_aiokafka_produce_only_transaction(broker):
    topic = unique("txn-aio-produce")
    create_topics(broker.bootstrap, topic)
    p = await aiokafka_producer(broker.bootstrap, unique("aio-tid"))
    values = [f"v{i}".encode() for i in range(10)]
    try:
        async with p.transaction():
            for i, v in enumerate(values):
                await p.send(topic, value=v, partition=i % PARTITIONS)
        # An exception inside the context aborts the transaction.
        with pytest.raises(RuntimeError):
            async with p.transaction():
                await p.send_and_wait(topic, value=b"aborted", partition=0)
                raise RuntimeError("abort please")
    finally:
        await p.stop()
    want = {q: values[q::PARTITIONS] for q in range(PARTITIONS)}
    ends = log_end_offsets(broker.bootstrap, topic)
    assert ends == {0: len(want[0]) + 3, 1: len(want[1]) + 1, 2: len(want[2]) + 1}  # +COMMIT, +aborted +ABORT
    got, positions = await aiokafka_read(broker.bootstrap, topic, "read_committed")
    assert got == want and positions == ends
    got, positions = await aiokafka_read(broker.bootstrap, topic, "read_uncommitted")
    assert got == {**want, 0: [*want[0], b"aborted"]} and positions == ends


async def test_aiokafka_interleaved_commit_abort(broker):
    topic = unique("txn-aio-interleaved")
    create_topics(broker.bootstrap, topic)
    producers = {"A": await aiokafka_producer(broker.bootstrap, unique("aio-A")),
                 "B": await aiokafka_producer(broker.bootstrap, unique("aio-B"))}

    def driver(p) -> Callable[[str, tuple], Awaitable[None]]:
        async def step(action: str, args: tuple) -> None:
            if action == "begin":
                await p.begin_transaction()
            elif action == "send":
                topic_, partition, values = args
                for v in values:
                    await p.send_and_wait(topic_, value=v, partition=partition)
            elif action == "commit":
                await p.commit_transaction()
            else:
                await p.abort_transaction()
        return step

    try:
        exp = await run_plan_async({k: driver(p) for k, p in producers.items()}, topic)
    finally:
        for p in producers.values():
            await p.stop()
    ends = log_end_offsets(broker.bootstrap, topic)
    for isolation in ("read_committed", "read_uncommitted"):
        check_read(exp, isolation, *await aiokafka_read(broker.bootstrap, topic, isolation), ends)


@requires_groups
async def test_aiokafka_consume_transform_produce(broker):
    from aiokafka import AIOKafkaConsumer

    src, dst, group = unique("txn-aio-in"), unique("txn-aio-out"), unique("aio-ctp")
    create_topics(broker.bootstrap, src, dst)
    inputs = produce_plain(broker.bootstrap, src, 300)
    consumer = AIOKafkaConsumer(src, bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False,
                                auto_offset_reset="earliest", isolation_level="read_committed",
                                request_timeout_ms=TIMEOUT * 1000)
    await consumer.start()
    producer = await aiokafka_producer(broker.bootstrap, unique("aio-ctp"))
    done, aborted = 0, False
    try:
        deadline = time.monotonic() + 60
        while done < 300 and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500, max_records=40)
            msgs = [r for recs in batch.values() for r in recs]
            if not msgs:
                continue
            try:
                async with producer.transaction():
                    for r in msgs:
                        await producer.send(dst, key=r.key, value=transform(r.value), partition=r.partition)
                    offsets = {tp: await consumer.position(tp) for tp in consumer.assignment()}
                    # aiokafka only has the group-id form (no generation / member id).
                    await producer.send_offsets_to_transaction(offsets, group)
                    if not aborted and done >= 100:
                        raise _AbortBatch
            except _AbortBatch:
                aborted = True
                for tp in consumer.assignment():
                    committed = await consumer.committed(tp)
                    consumer.seek(tp, committed if committed is not None else 0)
                continue
            done += len(msgs)
    finally:
        await consumer.stop()
        await producer.stop()
    assert done == 300 and aborted
    assert committed_offsets(broker.bootstrap, group, src) == log_end_offsets(broker.bootstrap, src)
    got, _ = await aiokafka_read(broker.bootstrap, dst, "read_committed")
    assert got == {p: [transform(v) for v in vs] for p, vs in inputs.items()}


class _AbortBatch(Exception):
    """Raised inside ``producer.transaction()`` to make aiokafka abort the batch."""




@pytest.mark.parametrize("where", [
    "commit", "send",
    "send_again",
    "send_offsets",
])
async def test_aiokafka_zombie_fencing(broker, where):
    from aiokafka import TopicPartition as ATP
    from aiokafka.errors import KafkaError as AIOError

    if where == "send_offsets" and not (ROOT / "coordinator" / "group_coordinator.py").exists():
        pytest.skip("consumer groups not built yet")
    topic, tid = unique("txn-aio-zombie"), unique("aio-zombie")
    create_topics(broker.bootstrap, topic)
    zombie = await aiokafka_producer(broker.bootstrap, tid)
    fresh = None
    try:
        await zombie.begin_transaction()
        if where in ("commit", "send_again"):
            await zombie.send_and_wait(topic, value=b"zombie-open", partition=0)
        fresh = await aiokafka_producer(broker.bootstrap, tid)
        with pytest.raises(AIOError) as info:
            if where == "commit":
                await asyncio.wait_for(zombie.commit_transaction(), TIMEOUT)
            elif where in ("send", "send_again"):
                await asyncio.wait_for(zombie.send_and_wait(topic, value=b"zombie-late", partition=0), TIMEOUT)
                await asyncio.wait_for(zombie.commit_transaction(), TIMEOUT)
            else:
                await asyncio.wait_for(zombie.send_offsets_to_transaction({ATP(topic, 0): 0}, unique("aio-g")),
                                       TIMEOUT)
        assert type(info.value).__name__ in ("ProducerFenced", "InvalidProducerEpoch"), repr(info.value)
        async with fresh.transaction():
            await fresh.send_and_wait(topic, value=b"fresh", partition=0)
    finally:
        await zombie.stop()
        if fresh is not None:
            await fresh.stop()
    got, _ = await aiokafka_read(broker.bootstrap, topic, "read_committed")
    assert got[0] == [b"fresh"]
    got, _ = await aiokafka_read(broker.bootstrap, topic, "read_uncommitted")
    assert b"zombie-late" not in got[0]
