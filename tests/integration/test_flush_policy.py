"""flush.messages / flush.ms: logs are fsynced off the event loop, and produce acknowledges fsynced data.

Against a real broker subprocess (confluent-kafka clients), the recovery point is read from
``recovery-point-offset-checkpoint``, which the running broker rewrites every
``log.flush.offset.checkpoint.interval.ms`` (100 ms here):

- a topic with flush.messages=1 reaches a recovery point equal to its log end offset after
  acknowledged produces, for acks=0, 1 and all, and serves every record back;
- a topic with flush.ms=200 gets there through the flush scheduler alone;
- a topic with the default settings stays at 0 until the clean shutdown flushes it (so the two
  above were flushed by their policy, not by something else).

A subprocess cannot show *when* the fsync happened relative to the response, so the Produce
handler is also driven in-process (a real broker in the test's event loop, tests/helpers/inproc.py): the response exists
only once the flush completed, the fsync runs on an executor thread, concurrent produces to one
partition never overlap two flushes, acks=0 only schedules one, and a failing fsync answers
KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.producer import ProduceRequest

from broker.handlers.produce import handle_produce
from protocol.errors import ErrorCode
from protocol.fast_codecs import decode_produce_request
from storage.batch import build_batch
from storage.checkpoints import RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile
from storage.log import FlushPlan
from tests.helpers.inproc import in_process_broker, request_context

OVERRIDES = {"log.flush.offset.checkpoint.interval.ms": "100"}
WAIT_S = 20


def _create(bootstrap: str, topics: dict[str, dict[str, str]]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, num_partitions=1, config=c) for t, c in topics.items()])
    for f in futures.values():
        f.result(15)


def _produce(bootstrap: str, topic: str, n: int, *, acks: str, tag: str) -> None:
    errors: list[object] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0})

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for i in range(n):
        p.produce(topic, key=b"%d" % i, value=b"%s-%d" % (tag.encode(), i), partition=0, on_delivery=on_delivery)
        p.poll(0)
    assert p.flush(30) == 0
    assert errors == []


def _recovery_points(data_dir: Path) -> dict[tuple[str, int], int]:
    path = data_dir / RECOVERY_POINT_CHECKPOINT
    return OffsetCheckpointFile(path).read() if path.exists() else {}


def _wait_recovery_point(data_dir: Path, topic: str, expected: int) -> dict[tuple[str, int], int]:
    deadline = time.monotonic() + WAIT_S
    points: dict[tuple[str, int], int] = {}
    while time.monotonic() < deadline:
        points = _recovery_points(data_dir)
        if points.get((topic, 0)) == expected:
            return points
        time.sleep(0.1)
    raise AssertionError(f"recovery point of {topic}-0 never reached {expected}: last checkpoint {points}")


def _values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    while len(out) < expected and time.monotonic() < deadline:
        for m in c.consume(100, timeout=0.5):
            assert m.error() is None, m.error()
            out.append(m.value())
    c.close()
    return out


# --- a real broker -------------------------------------------------------------------------------


def test_flush_policies_advance_the_recovery_point_while_running(broker_factory) -> None:
    broker = broker_factory(OVERRIDES)
    _create(broker.bootstrap, {"each": {"flush.messages": "1"}, "timed": {"flush.ms": "200"}, "lazy": {}})
    for topic in ("each", "timed", "lazy"):
        _produce(broker.bootstrap, topic, 50, acks="all", tag=topic)

    _wait_recovery_point(broker.data_dir, "each", 50)  # flush.messages: flushed by the produce path
    points = _wait_recovery_point(broker.data_dir, "timed", 50)  # flush.ms: flushed by the scheduler
    # Nothing flushes a topic with the default policy before its segment rolls or the broker stops.
    assert points[("lazy", 0)] == 0

    assert broker.stop() == 0
    points = _recovery_points(broker.data_dir)
    assert points[("each", 0)] == points[("timed", 0)] == points[("lazy", 0)] == 50


def test_produce_with_every_acks_setting_and_flush_messages_1(broker_factory) -> None:
    broker = broker_factory(OVERRIDES)
    _create(broker.bootstrap, {"durable": {"flush.messages": "1"}})
    expected = []
    for acks in ("0", "1", "all"):
        _produce(broker.bootstrap, "durable", 20, acks=acks, tag=f"acks{acks}")
        expected += [b"acks%s-%d" % (acks.encode(), i) for i in range(20)]
    assert _values(broker.bootstrap, "durable", 60) == expected
    _wait_recovery_point(broker.data_dir, "durable", 60)  # acks=0 too: its flush was scheduled


# --- the Produce handler in-process --------------------------------------------------------------


def _request(acks: int, topic: str = "t", partitions: tuple[int, ...] = (0,)) -> object:
    v = 9
    P = ProduceRequest.TopicProduceData
    req = ProduceRequest(version=v, transactional_id=None, acks=acks, timeout_ms=30000, topic_data=[
        P(version=v, name=topic, partition_data=[
            P.PartitionProduceData(version=v, index=i, records=build_batch([(b"k", b"v" * 20)] * 2))
            for i in partitions])])
    return decode_produce_request(memoryview(bytearray(req.encode(version=v))), v)


@pytest.fixture
async def in_process(tmp_path: Path):  # noqa: ANN201
    """A broker in this event loop with topic "t" (2 partitions, flush.messages=1), and a Produce
    RequestContext reaching it."""
    async with in_process_broker(tmp_path / "data") as broker:
        await broker.services.topics.create_topic("t", 2, {"flush.messages": "1"})
        rm = broker.services.partitions
        logs = [rm.get("t", p).log for p in range(2)]
        yield rm, request_context(broker, 0, 9), logs


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """Instrument FlushPlan.sync: how many ran, how many at once at most, on which threads."""
    stats: dict[str, object] = {"count": 0, "running": 0, "max_running": 0, "threads": set()}
    lock = threading.Lock()
    real = FlushPlan.sync

    def sync(self: FlushPlan) -> None:
        with lock:
            stats["count"] += 1  # type: ignore[operator]
            stats["running"] += 1  # type: ignore[operator]
            stats["max_running"] = max(stats["max_running"], stats["running"])  # type: ignore[call-overload]
            stats["threads"].add(threading.get_ident())  # type: ignore[attr-defined]
        try:
            time.sleep(0.02)  # widen the window in which a second, overlapping flush could start
            real(self)
        finally:
            with lock:
                stats["running"] -= 1  # type: ignore[operator]

    monkeypatch.setattr(FlushPlan, "sync", sync)
    return stats


@pytest.mark.parametrize("acks", [1, -1])
async def test_produce_answers_only_after_the_flush_completed(in_process, syncs, acks: int) -> None:
    rm, ctx, logs = in_process
    resp = await handle_produce(ctx, _request(acks, partitions=(0, 1)))
    codes = [p.error_code for t in resp.responses for p in t.partition_responses]
    assert codes == [ErrorCode.NONE, ErrorCode.NONE]
    # complete_flush (on the loop, after the executor's fsync) is what moves the recovery point.
    assert [lg.recovery_point for lg in logs] == [lg.log_end_offset for lg in logs] == [2, 2]
    assert syncs["count"] == 2 and threading.get_ident() not in syncs["threads"]  # type: ignore[operator]


async def test_concurrent_produces_never_overlap_flushes_of_one_log(in_process, syncs) -> None:
    rm, ctx, logs = in_process
    resps = await asyncio.gather(*(handle_produce(ctx, _request(-1)) for _ in range(20)))
    bases = sorted(r.responses[0].partition_responses[0].base_offset for r in resps)
    assert bases == list(range(0, 40, 2))
    assert logs[0].recovery_point == logs[0].log_end_offset == 40
    assert syncs["max_running"] == 1
    assert syncs["count"] < 20  # produces arriving during a flush share the next one
    assert not logs[0].flush_in_flight


async def test_acks_0_schedules_the_flush_without_waiting(in_process, syncs) -> None:
    rm, ctx, logs = in_process
    assert await handle_produce(ctx, _request(0)) is None
    await rm.wait_flushes()
    assert logs[0].recovery_point == logs[0].log_end_offset == 2


async def test_failed_fsync_answers_storage_error(in_process, monkeypatch: pytest.MonkeyPatch) -> None:
    rm, ctx, logs = in_process

    def broken(self: FlushPlan) -> None:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as m:
        m.setattr(FlushPlan, "sync", broken)
        resp = await handle_produce(ctx, _request(1))
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.KAFKA_STORAGE_ERROR and part.base_offset == -1
    assert logs[0].recovery_point == 0 and logs[0].segments[0].dirty  # retried by the next flush
    resp = await handle_produce(ctx, _request(1))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    assert logs[0].recovery_point == logs[0].log_end_offset == 4


async def test_coordinator_appends_return_only_after_the_flush(in_process, syncs) -> None:
    """Coordinator records (offset commits, transaction state) go through LocalPartitionAccess;
    with flush.messages=1 they must be fsynced before the coordinator answers its client."""
    rm, ctx, logs = in_process
    access = ctx.services.txn_coordinator.access
    offset = await access.append("t", 1, bytes(build_batch([(b"k", b"v")])))
    assert offset == 0
    assert logs[1].recovery_point == logs[1].log_end_offset == 1
    assert threading.get_ident() not in syncs["threads"]  # type: ignore[operator]
