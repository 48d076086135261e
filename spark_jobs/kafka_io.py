"""confluent-kafka plumbing shared by the Spark source, sink and jobs.

Everything here runs either in Spark's driver-side Python planner processes (metadata, offsets)
or inside executor tasks (reading one offset range into Arrow batches). Nothing here is Spark-aware
except that records come out as ``pyarrow.RecordBatch`` in the Kafka source's schema.
"""

from __future__ import annotations

import gc
import logging
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from operator import itemgetter
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, OffsetSpec

from . import raw_reader
from .offsets import OffsetMap, TopicPartition

log = logging.getLogger(__name__)

# A group.id is mandatory for a librdkafka consumer even when it only assign()s and never commits,
# as the source does; nothing is ever committed under this name.
READER_GROUP = "kbroker-spark-reader"

# Arrow schemas matching Spark's Kafka source (timestamps are microseconds, Spark's precision).
HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
_BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]
ARROW_SCHEMA = pa.schema(_BASE_FIELDS)
ARROW_SCHEMA_WITH_HEADERS = pa.schema([*_BASE_FIELDS, pa.field("headers", HEADERS_TYPE)])

# librdkafka timestamp type -> Kafka's TimestampType.id as Spark's Kafka source reports it
# (NO_TIMESTAMP_TYPE -1, CREATE_TIME 0, LOG_APPEND_TIME 1).
_TS_TYPE = {0: -1, 1: 0, 2: 1}
_TS_US = pa.timestamp("us", tz="UTC")


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (retention, deleted topic) and failOnDataLoss is true."""


DATA_LOSS_HINT = ("Some data may have been lost because it is no longer available in kbroker: it was deleted "
                  "(retention, DeleteRecords) or its topic was deleted or re-created before the query read it. "
                  "If you want the query to go on without it instead of failing, set the source option "
                  "failOnDataLoss to false.")


def report_data_loss(message: str, fail_on_data_loss: bool) -> None:
    """What Spark's Kafka source does on possible data loss: raise (failOnDataLoss=true) or log a warning."""
    if fail_on_data_loss:
        raise DataLossError(f"data loss: {message}. {DATA_LOSS_HINT}")
    log.warning("data loss: %s; skipped because failOnDataLoss is false", message)


def client_config(options: Mapping[str, str]) -> dict[str, str]:
    """``kafka.*`` Spark options -> librdkafka configuration (the prefix stripped)."""
    conf = {k[len("kafka."):]: v for k, v in options.items() if k.lower().startswith("kafka.")}
    if "bootstrap.servers" not in conf:
        raise ValueError("option kafka.bootstrap.servers is required")
    return conf


def isolation(conf: Mapping[str, str]) -> str:
    return conf.get("isolation.level", "read_committed")


def admin(conf: Mapping[str, str]) -> AdminClient:
    keep = {k: v for k, v in conf.items() if k not in ("isolation.level",)}
    return AdminClient(keep)


def list_partitions(adm: AdminClient, *, subscribe: str | None = None, pattern: str | None = None,
                    assign: list[TopicPartition] | None = None, missing_ok: bool = False,
                    timeout: float = 30) -> list[TopicPartition]:
    """Topic-partitions selected by exactly one of subscribe / subscribePattern / assign.

    A subscribed topic that does not exist is an error for a batch read; a streaming query passes
    ``missing_ok`` and picks the topic up (from its earliest offset) once it appears, as Spark's
    Kafka source does.
    """
    if assign is not None:
        return sorted(assign)
    md = adm.list_topics(timeout=timeout)
    if subscribe is not None:
        wanted = [t.strip() for t in subscribe.split(",") if t.strip()]
        missing = [t for t in wanted if t not in md.topics or md.topics[t].error is not None]
        if missing and not missing_ok:
            raise ValueError(f"topics not found: {missing}")
        topics = [t for t in wanted if t not in missing]
    else:
        assert pattern is not None
        rx = re.compile(pattern)
        topics = [t for t in md.topics if rx.fullmatch(t) and not t.startswith("__")]
    return sorted((t, p) for t in topics for p in md.topics[t].partitions)


def list_offsets(adm: AdminClient, partitions: list[TopicPartition], which: str, *,
                 isolation_level: str = "read_committed", timeout: float = 30) -> OffsetMap:
    """Earliest or latest offsets; "latest" under read_committed is the last stable offset."""
    if not partitions:
        return {}
    spec = OffsetSpec.earliest() if which == "earliest" else OffsetSpec.latest()
    level = (IsolationLevel.READ_COMMITTED if isolation_level == "read_committed"
             else IsolationLevel.READ_UNCOMMITTED)
    futures = adm.list_offsets({CkTopicPartition(t, p): spec for t, p in partitions},
                               isolation_level=level, request_timeout=timeout)
    return {(tp.topic, tp.partition): fut.result().offset for tp, fut in futures.items()}


def ensure_topic(adm: AdminClient, topic: str, *, partitions: int, config: Mapping[str, str] | None = None,
                 timeout: float = 30) -> None:
    """Create ``topic`` if missing and grow it to at least ``partitions`` partitions.

    Safe to run concurrently from many tasks: "already exists" and "already has that many
    partitions" are success.
    """
    md = adm.list_topics(topic=topic, timeout=timeout)
    meta = md.topics.get(topic)
    if meta is None or meta.error is not None:
        fut = adm.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1,
                                          config=dict(config or {}))], request_timeout=timeout)[topic]
        try:
            fut.result()
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        md = adm.list_topics(topic=topic, timeout=timeout)
        meta = md.topics[topic]
    if len(meta.partitions) < partitions:
        fut = adm.create_partitions([NewPartitions(topic, partitions)], request_timeout=timeout)[topic]
        try:
            fut.result()
        except KafkaException as e:
            # A concurrent task grew it first (to this size or more).
            if e.args[0].code() != KafkaError.INVALID_PARTITIONS:
                raise
            md = adm.list_topics(topic=topic, timeout=timeout)
            if len(md.topics[topic].partitions) < partitions:
                raise


# librdkafka's sparse connections (the default) connect to a broker only once a request needs it, and
# the first connection to a broker learnt from metadata then waits for a reconnect timer: about 50 ms
# per client here. Tasks create short-lived clients (a consumer per range, a producer and a marker
# reader per sink task), so that wait was a large share of a small micro-batch; connect eagerly.
EAGER_CONNECT = {"enable.sparse.connections": False}


def range_consumer(conf: Mapping[str, str], *, range_records: int | None = None, **extra: Any) -> Consumer:
    return Consumer(range_consumer_config(conf, range_records=range_records, **extra))


def range_consumer_config(conf: Mapping[str, str], *, range_records: int | None = None,
                          **extra: Any) -> dict[str, Any]:
    """Settings of a task's range reader: ``conf`` (the query's kafka.* options) and ``extra`` win.

    ``range_records`` (the size of the offset range the task reads) bounds librdkafka's prefetch:
    it fetches until queued.min.messages records wait locally and then pauses for
    fetch.queue.backoff.ms (1 s by default). With the default 100,000, a range longer than that
    sat idle for a second whenever one large fetch filled the queue; with a much larger value the
    consumer went on fetching (and decoding) far past the end of a short range.
    """
    return {
        **EAGER_CONNECT,
        "group.id": READER_GROUP,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
        "isolation.level": "read_committed",
        # Fetches of a few MB: large enough to amortise a round trip, small enough that the last
        # one does not overshoot the end of the range by much (every record fetched past it is
        # read from disk by the broker and decoded here for nothing).
        "fetch.max.bytes": 64 * 1024 * 1024,
        "max.partition.fetch.bytes": 4 * 1024 * 1024,
        "fetch.wait.max.ms": 100,
        "queued.min.messages": max(1000, range_records) if range_records else 100_000,
        "fetch.queue.backoff.ms": 10,
        **conf,
        **extra,
    }


def read_range(conf: Mapping[str, str], topic: str, partition: int, start: int, end: int, *,
               include_headers: bool = False, fail_on_data_loss: bool = True, batch_rows: int = 8192,
               timeout_s: float = 120.0, raw: bool = True) -> Iterator[pa.RecordBatch]:
    """Records of ``topic``/``partition`` with start <= offset < end as Arrow batches.

    First through the raw reader (spark_jobs.raw_reader: Fetch on a plain socket, records decoded
    into Arrow buffers by compiled code) where it is usable (``raw``: the source option rawReader,
    false turns it off); it stops at anything but a plain answer, and librdkafka reads whatever
    is left of the range, as below.

    Under read_committed the broker hides aborted records and control batches, so the offsets
    returned have gaps and the last offsets of a range may never be delivered: the range is done
    when a record at or past ``end - 1`` arrives, or when the consumer reports end-of-partition at
    or past ``end``. Each consume() call becomes one Arrow batch, built column-wise with list
    comprehensions (this loop is the source's per-record cost).

    Offsets of the range that the partition no longer holds (deleted by retention or DeleteRecords,
    or the topic deleted or re-created) raise :class:`DataLossError` when ``fail_on_data_loss``;
    otherwise they are skipped as Spark's Kafka source skips them: reading resumes at the
    partition's new log start, or the rest of the range is skipped when nothing of it is left.
    """
    if end <= start:
        return
    schema = ARROW_SCHEMA_WITH_HEADERS if include_headers else ARROW_SCHEMA
    if raw_reader.usable(conf, include_headers, raw):
        reader = raw_reader.RawRangeReader(conf, topic, partition, start, end, schema, batch_rows)
        try:
            yield from reader.batches()
        except (raw_reader.Fallback, OSError) as e:
            log.info("raw read of %s-%d stopped at offset %d (%s); librdkafka reads the rest of [%d, %d)",
                     topic, partition, reader.next_offset, e, start, end)
        start = reader.next_offset
        if start >= end:
            return
    consumer = range_consumer(conf, range_records=end - start)
    try:
        consumer.assign([CkTopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout_s
        done = False
        next_offset = start
        while not done:
            batch = None
            # The collector paused while the messages live: each consume() makes thousands of
            # GC-tracked Message objects (and _to_batch a timestamp tuple per message), and the
            # collections they triggered traversed them, and the worker's whole heap, again and
            # again: half of the source's CPU time. They hold no reference cycles; reference
            # counting frees them when the batch is built.
            with _gc_paused():
                # consume() blocks until it has num_messages or the timeout passes: ask for no more
                # than the range can still hold, and keep the timeout short for the gappy tail of a range.
                msgs = consumer.consume(num_messages=max(1, min(batch_rows, end - next_offset)), timeout=0.1)
                data = [m for m in msgs if m.error() is None]
                resume = None
                if len(data) != len(msgs):
                    # Events: end-of-partition (after the data before it), or offset-out-of-range, after
                    # which nothing more of the old fetch position comes.
                    data = []
                    for m in msgs:
                        err = m.error()
                        if err is None:
                            data.append(m)
                            continue
                        code = err.code()
                        if code == KafkaError._PARTITION_EOF:
                            done = done or m.offset() >= end
                        elif code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                            lost_from = data[-1].offset() + 1 if data else next_offset
                            resume = _after_offset_out_of_range(consumer, topic, partition, lost_from, end,
                                                                err.str(), fail_on_data_loss)
                            if resume is None:
                                done = True
                            else:
                                consumer.assign([CkTopicPartition(topic, partition, resume)])
                            break
                        else:
                            raise KafkaException(err)
                if data and data[-1].offset() >= end - 1:
                    done = True
                    if data[-1].offset() >= end:
                        data = [m for m in data if m.offset() < end]
                if data:
                    next_offset = data[-1].offset() + 1
                    batch = _to_batch(data, schema, topic, partition, include_headers)
                del msgs, data
            if batch is not None:
                deadline = time.monotonic() + timeout_s
                yield batch
            elif time.monotonic() > deadline:
                raise TimeoutError(f"no progress reading {topic}-{partition} [{start}, {end}) at offset "
                                   f"{next_offset} for {timeout_s}s")
            if resume is not None:
                next_offset = resume
    finally:
        consumer.close()


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Cyclic garbage collection off for the block (restored as it was after it)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _after_offset_out_of_range(consumer: Consumer, topic: str, partition: int, offset: int, end: int,
                               error: str, fail_on_data_loss: bool) -> int | None:
    """Where to go on after the broker said ``offset`` is out of range; None = nothing left of the range.

    The same three cases as Spark's Kafka source (KafkaDataConsumer.getEarliestAvailableOffsetBetween):
    the partition's records now start past ``offset`` (resume at the log start), the range and what
    the partition holds no longer overlap (skip the rest), or ``offset`` is back in range (the topic
    was re-created and refilled meanwhile: retry it).
    """
    try:
        low, high = consumer.get_watermark_offsets(CkTopicPartition(topic, partition), timeout=10, cached=False)
        held = f"the partition now holds offsets [{low}, {high})"
    except KafkaException as e:
        if not fail_on_data_loss:
            raise
        low = high = -1
        held = f"its offsets could not be listed: {e}"
    report_data_loss(f"cannot read {topic}-{partition} offsets [{offset}, {end}) ({error}); {held}",
                     fail_on_data_loss)
    if offset >= high or low >= end:
        return None
    return max(low, offset)


def _to_batch(msgs: list[Message], schema: pa.Schema, topic: str, partition: int,
              include_headers: bool) -> pa.RecordBatch:
    """One consume() result as an Arrow batch in the Kafka source's schema.

    Built column-wise: each column is one C-level ``map`` over the messages (no per-row Python
    frame), constant columns are repeated scalars, and the timestamp column is converted from
    milliseconds by Arrow. Only a batch mixing timestamp types (or holding records without one)
    takes the per-row path for the timestamp columns.
    """
    n = len(msgs)
    stamps = list(map(Message.timestamp, msgs))
    kinds = list(map(itemgetter(0), stamps))
    kind = kinds[0]
    if kind and kinds.count(kind) == n:
        ts = pa.array(list(map(itemgetter(1), stamps)), pa.timestamp("ms", tz="UTC")).cast(_TS_US)
        ts_type = pa.repeat(pa.scalar(_TS_TYPE.get(kind, -1), pa.int32()), n)
    else:
        ts = pa.array([t * 1000 if k else None for k, t in stamps], _TS_US)
        ts_type = pa.array([_TS_TYPE.get(k, -1) for k in kinds], pa.int32())
    arrays = [
        pa.array(list(map(Message.key, msgs)), pa.binary()),
        pa.array(list(map(Message.value, msgs)), pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(list(map(Message.offset, msgs)), pa.int64()),
        ts,
        ts_type,
    ]
    if include_headers:
        arrays.append(pa.array([[{"key": k, "value": v} for k, v in (m.headers() or ())] for m in msgs],
                               HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
