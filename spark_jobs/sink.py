"""Exactly-once Kafka sink for Spark (batch and micro-batch) on kbroker transactions.

Protocol (no Kafka 2PC extension needed):

* Every write task is a transactional producer whose ``transactional.id`` is fixed by what the task
  *is*, not by which attempt runs it: ``<prefix>.<queryId>.<sparkPartitionId>`` for a streaming
  query (the query id is stored in the checkpoint, so it survives driver restarts). A retried or
  speculative attempt therefore calls InitProducerId with the same id, which bumps the epoch,
  fences the earlier attempt and aborts whatever it left open.
* The task writes all its rows **and** one marker record ``{batchId, ...}`` in one transaction. The
  marker goes to partition ``sparkPartitionId`` of a compacted per-query commit-log topic
  ``<commitLogTopicPrefix><queryId>``, so that partition has exactly one writer (this
  transactional.id) and no other transaction can hold its last stable offset back.
* Before writing, the task (after InitProducerId, so no earlier attempt can still commit) reads the
  last committed marker of its partition with read_committed. If it already records this batch id
  or a later one, the batch was written before a crash and the task writes nothing.

Spark replays a micro-batch with the same offsets and the same partitioning after a driver crash,
so "partition p of batch b" names the same rows in every replay. Visibility is atomic per task
(per Spark partition of a micro-batch); docs/spark.md discusses the whole-batch alternative.

With the writer option ``exactlyOnce.mode=2pc`` (streaming only) a micro-batch becomes visible all at
once instead: tasks prepare two-phase-commit transactions and the driver commits them together
(spark_jobs/sink_2pc.py). The default, ``task``, is the protocol above.

Batch (non-streaming) writes use ``<prefix>.batch.<jobUuid>.<partitionId>`` ids: a retried task fences
and replaces its earlier attempt, there is no replay to guard against.

Test hooks (never set them in production): writer option ``kbroker.fault.failTask`` =
``batch:partition:rows[:raise|kill]`` fails the first attempt of that task after ``rows`` rows with
its transaction left open; env ``KBROKERTEST_SPARK_CRASH_AT_BATCH=<batchId>`` SIGKILLs the driver's
process group in the driver-side commit of that batch (after every task committed its data,
before Spark records the batch as done).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from pyspark.sql import DataFrame
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from . import kafka_io, raw_writer
from .sink_parts import CRASH_ENV, FailTask, Rows, TaskReport, crash_driver

log = logging.getLogger(__name__)

BATCH_ID_PROPERTY = "streaming.sql.batchId"  # Spark's MicroBatchExecution.BATCH_ID_KEY local property
QUERY_ID_PROPERTY = "sql.streaming.queryId"  # StreamExecution.QUERY_ID_KEY: stable across restarts

# Producers of deliberately failed attempts are kept alive here so their transactions stay open
# until the retry fences them, as a hung or partitioned executor would.
_ZOMBIES: list[tuple[str | None, Producer | raw_writer.RawTransaction]] = []
# Commit-log topics (and partition counts) this worker process already made sure of.
_KNOWN_COMMIT_TOPICS: dict[str, int] = {}
# transactional id -> (producer id, epoch, batch id) of the last marker this worker process committed
# with the raw writer. The coordinator bumps a transactional id's epoch on every InitProducerId (and
# on a timeout abort), so when this process's next InitProducerId returns the same producer id and
# exactly that epoch + 1, nobody else can have written a marker since: the batch id is the last
# committed one, and the task need not read the commit log (begin_task).
_COMMITTED: dict[str, tuple[int, int, int]] = {}
_Setup = tuple[Producer | raw_writer.RawTransaction, int | None]  # a task's producer, last committed batch


def _mode(value: str | None) -> str:
    """The exactlyOnce.mode option: "task" (per-task transactions + markers, the default) or "2pc"."""
    mode = (value or "task").strip().lower()
    if mode not in ("task", "2pc"):
        raise ValueError(f"exactlyOnce.mode must be task or 2pc, got {value!r}")
    return mode


def _bool(value: str | None, default: bool) -> bool:
    return default if value is None else value.strip().lower() in ("true", "1", "yes")


def _produce_values(producer: Producer, topic: str, values: list[bytes | None], keys: list[bytes | None] | None,
                    ) -> int:
    """The common case, every row to one topic, partitioned by key: one positional produce() per row.

    This loop is the sink's per-row cost, so it does nothing else (no per-row kwargs dict or
    topic lookup); a full local queue (BufferError) waits for deliveries and resumes at the row
    that did not fit. Keys of None are unkeyed records, as with produce(key=None).
    """
    produce = producer.produce
    n = len(values)
    start = 0
    while start < n:
        i = start
        try:
            if keys is None:
                for i in range(start, n):
                    produce(topic, values[i])
            else:
                for i in range(start, n):
                    produce(topic, values[i], keys[i])
        except BufferError:
            producer.poll(0.05)
            start = i
        else:
            start = n
    return n


def _validate_schema(schema: StructType, topic_option: str | None) -> None:
    names = [f.name for f in schema.fields]
    if "value" not in names:
        raise ValueError("the kbroker sink needs a 'value' column (string or binary)")
    unknown = set(names) - {"key", "value", "topic", "partition", "headers"}
    if unknown:
        raise ValueError(f"the kbroker sink accepts key, value, topic, partition, headers; got also {sorted(unknown)}")
    if "topic" not in names and not topic_option:
        raise ValueError("set the 'topic' option or provide a 'topic' column")


class _WriterBase:
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options = {k.lower(): v for k, v in options.items()}
        self.conf = kafka_io.client_config(self.options)
        self.topic = self.opt("topic")
        _validate_schema(schema, self.topic)
        self.exactly_once = _bool(self.opt("kbroker.sink.exactlyOnce"), True)
        self.txn_prefix = self.opt("kbroker.sink.transactionalIdPrefix") or "kbroker-spark"
        self.commit_prefix = self.opt("kbroker.sink.commitLogTopicPrefix") or "_kbroker_spark_commits."
        self.sink_name = self.opt("kbroker.sink.name") or ""
        self.fail_task = FailTask.parse(self.opt("kbroker.fault.failTask"))
        self.columns = [f.name for f in schema.fields]
        # false: librdkafka writes every transaction (spark_jobs.raw_writer says when it cannot anyway)
        self.raw_writer = _bool(self.opt("rawWriter"), True)

    def opt(self, name: str) -> str | None:
        return self.options.get(name.lower())

    # -- producing ----------------------------------------------------------------------------
    def producer(self, transactional_id: str | None) -> Producer:
        self._delivery_error: KafkaError | None = None
        return Producer(self.producer_config(transactional_id))

    def producer_config(self, transactional_id: str | None) -> dict[str, Any]:
        conf: dict[str, Any] = {
            **kafka_io.EAGER_CONNECT,
            "linger.ms": 5,
            "batch.num.messages": 10000,
            "batch.size": 1024 * 1024,
            "queue.buffering.max.messages": 500000,
            # Java's default partitioner, so keyed rows land where Spark's Kafka sink would put them.
            "partitioner": "murmur2_random",
            "enable.idempotence": True,
            "acks": "all",
            **{k: v for k, v in self.conf.items() if k != "isolation.level"},
            "delivery.report.only.error": True,
            "on_delivery": self._on_delivery,
        }
        if transactional_id is not None:
            conf["transactional.id"] = transactional_id
            conf.setdefault("transaction.timeout.ms", 60000)
        return conf

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None and self._delivery_error is None:
            self._delivery_error = err

    def _fault(self, batch_id: int | None, partition: int, attempt: int) -> FailTask | None:
        """The injected failure (kbroker.fault.failTask) this task attempt must suffer, if any."""
        fault = self.fail_task
        if fault is not None and attempt == 0 and fault.partition == partition and fault.batch in (None, batch_id):
            return fault
        return None

    def produce_raw(self, txn: raw_writer.RawTransaction, batches: Iterator[pa.RecordBatch], *,
                    batch_id: int | None, partition: int, attempt: int) -> int:
        """The raw writer's counterpart of :meth:`produce_all` (spark_jobs/raw_writer.py)."""
        assert self.topic is not None  # raw_writer.usable: no topic column
        fault = self._fault(batch_id, partition, attempt)
        count = 0
        for batch in batches:
            if fault is not None and count + batch.num_rows >= fault.after_rows:
                txn.write(batch.slice(0, fault.after_rows - count), self.topic)
                self._inject_failure(txn, fault)
            count += txn.write(batch, self.topic)
        return count

    def produce_all(self, producer: Producer, batches: Iterator[pa.RecordBatch], *, batch_id: int | None,
                    partition: int, attempt: int) -> int:
        fault = self._fault(batch_id, partition, attempt)
        count = 0
        for batch in batches:
            rows = Rows(batch, self.topic)
            if fault is None and rows.topics is None and rows.partitions is None and rows.headers is None:
                count += _produce_values(producer, rows.topic(0), rows.values, rows.keys)
                producer.poll(0)
                continue
            for i in range(rows.n):
                kwargs: dict[str, Any] = {}
                if rows.keys is not None and rows.keys[i] is not None:
                    kwargs["key"] = rows.keys[i]
                if rows.partitions is not None and rows.partitions[i] is not None:
                    kwargs["partition"] = rows.partitions[i]
                if rows.headers is not None and rows.headers[i]:
                    kwargs["headers"] = [(h["key"], h["value"]) for h in rows.headers[i]]
                topic = rows.topic(i)
                while True:
                    try:
                        producer.produce(topic, rows.values[i], **kwargs)
                        break
                    except BufferError:
                        producer.poll(0.05)
                count += 1
                if fault is not None and count == fault.after_rows:
                    self._inject_failure(producer, fault)
            producer.poll(0)
        return count

    def _inject_failure(self, producer: Producer | raw_writer.RawTransaction, fault: FailTask) -> None:
        producer.flush()  # the rows reach the broker inside the still-open transaction
        _ZOMBIES.append((self._transactional_id, producer))
        if fault.mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f"kbroker.fault.failTask: injected failure after {fault.after_rows} rows")

    def check_delivery(self) -> None:
        if self._delivery_error is not None:
            raise KafkaException(self._delivery_error)

    # -- task bodies --------------------------------------------------------------------------
    def write_plain(self, batches: Iterator[pa.RecordBatch], *, batch_id: int | None, partition: int,
                    attempt: int) -> TaskReport:
        """At-least-once (idempotent producer) write: kbroker.sink.exactlyOnce=false."""
        producer = self.producer(None)
        self._transactional_id = None
        n = self.produce_all(producer, batches, batch_id=batch_id, partition=partition, attempt=attempt)
        remaining = producer.flush(120)
        if remaining:
            raise TimeoutError(f"{remaining} records not delivered within 120 s")
        self.check_delivery()
        return TaskReport(partition, batch_id, attempt, n, False, None)

    def begin_task(self, *, transactional_id: str, batch_id: int | None,
                   commit_log: tuple[str, int] | None) -> _Setup:
        """A task's set-up before its first row: fence earlier attempts, find the last committed batch.

        Returns the initialised producer (the raw writer's when it can serve the task) and, with a
        commit log, the batch id of the last marker this transactional id committed (None when
        there is none).
        """
        producer: Producer | raw_writer.RawTransaction
        if raw_writer.usable(self.conf, self.columns, self.raw_writer):
            producer = raw_writer.RawTransaction(self.conf, transactional_id)
            try:
                producer.init()  # fences as init_transactions does
            except BaseException:
                producer.close()
                raise
        else:
            producer = self.producer(transactional_id)
            # Fences every earlier attempt with this id and completes (aborts) what it left open.
            producer.init_transactions(60)
        self.adopt_task(transactional_id)
        last = None
        if commit_log is not None:
            known = _COMMITTED.pop(transactional_id, None)
            if isinstance(producer, raw_writer.RawTransaction) and known is not None and \
                    known[:2] == (producer.producer_id, producer.epoch - 1):
                last = known[2]  # see _COMMITTED
            else:
                # Only after init_transactions: no earlier attempt can commit a marker any more.
                last = last_committed_batch(self.conf, commit_log[0], commit_log[1], transactional_id)
        return producer, last

    def adopt_task(self, transactional_id: str) -> None:
        """This task writes as ``transactional_id``, whose earlier producers its InitProducerId
        has just fenced: zombies of that id in this process can go (a raw writer's keeps its loop
        thread: test hooks only, as a hung executor would)."""
        self._transactional_id = transactional_id
        _ZOMBIES[:] = [z for z in _ZOMBIES if z[0] != transactional_id]

    def keeps_open(self, producer: Producer | raw_writer.RawTransaction) -> bool:
        """An injected failure's zombie: left open (not closed) for the retry to fence."""
        return any(z[1] is producer for z in _ZOMBIES)

    def write_transaction(self, batches: Iterator[pa.RecordBatch], *, transactional_id: str,
                          batch_id: int | None, partition: int, attempt: int,
                          commit_log: tuple[str, int] | None,
                          started: _Started | None = None) -> TaskReport:
        """One transaction: all ``batches`` and the commit marker; nothing when the marker says done.

        ``started``: :meth:`begin_task` already running for this id (see KBrokerStreamWriter.write).
        """
        if started is None:
            producer, last = self.begin_task(transactional_id=transactional_id, batch_id=batch_id,
                                             commit_log=commit_log)
        else:
            producer, last = started.result()
        if isinstance(producer, raw_writer.RawTransaction):
            return self._write_raw(producer, last, batches, transactional_id=transactional_id, batch_id=batch_id,
                                   partition=partition, attempt=attempt, commit_log=commit_log)
        if (done := _replayed(batches, last, transactional_id=transactional_id, batch_id=batch_id,
                              partition=partition, attempt=attempt, commit_log=commit_log)) is not None:
            return done
        producer.begin_transaction()
        n = self.produce_all(producer, batches, batch_id=batch_id, partition=partition, attempt=attempt)
        if commit_log is not None:
            producer.produce(commit_log[0], _marker(batch_id, partition, attempt, n), transactional_id.encode(),
                             partition=commit_log[1])
        producer.commit_transaction(120)
        self.check_delivery()
        return TaskReport(partition, batch_id, attempt, n, False, transactional_id)

    def _write_raw(self, txn: raw_writer.RawTransaction, last: int | None, batches: Iterator[pa.RecordBatch], *,
                   transactional_id: str, batch_id: int | None, partition: int, attempt: int,
                   commit_log: tuple[str, int] | None) -> TaskReport:
        """:meth:`write_transaction` through the raw writer."""
        try:
            if (done := _replayed(batches, last, transactional_id=transactional_id, batch_id=batch_id,
                                  partition=partition, attempt=attempt, commit_log=commit_log)) is not None:
                assert last is not None
                _COMMITTED[transactional_id] = (txn.producer_id, txn.epoch, last)
                return done
            txn.begin()
            n = self.produce_raw(txn, batches, batch_id=batch_id, partition=partition, attempt=attempt)
            if commit_log is not None:
                txn.marker(commit_log[0], commit_log[1], transactional_id.encode(),
                           _marker(batch_id, partition, attempt, n))
            txn.commit()
            if commit_log is not None:
                assert batch_id is not None
                _COMMITTED[transactional_id] = (txn.producer_id, txn.epoch, batch_id)
            return TaskReport(partition, batch_id, attempt, n, False, transactional_id)
        finally:
            if not self.keeps_open(txn):
                txn.close()

    def micro_batch_ids(self, query_id: str, partition: int) -> tuple[str, tuple[str, int]]:
        """The transactional id and commit-log partition of task ``partition`` of query ``query_id``."""
        # Two kbroker writes in one foreachBatch need distinct names, or they would share ids and markers.
        scope = f"{query_id}.{self.sink_name}" if self.sink_name else query_id
        commit_topic = f"{self.commit_prefix}{scope}"
        if _KNOWN_COMMIT_TOPICS.get(commit_topic, 0) <= partition:
            kafka_io.ensure_topic(kafka_io.admin(self.conf), commit_topic, partitions=partition + 1,
                                  config={"cleanup.policy": "compact"})
            _KNOWN_COMMIT_TOPICS[commit_topic] = partition + 1
        return f"{self.txn_prefix}.{scope}.{partition}", (commit_topic, partition)

    def start_micro_batch(self, *, query_id: str, batch_id: int, partition: int) -> _Started:
        """Run the exactly-once set-up of a micro-batch task (:meth:`begin_task`) in the background."""

        def setup() -> _Setup:
            transactional_id, commit_log = self.micro_batch_ids(query_id, partition)
            return self.begin_task(transactional_id=transactional_id, batch_id=batch_id, commit_log=commit_log)

        return _Started(setup)

    def write_micro_batch(self, batches: Iterator[pa.RecordBatch], *, query_id: str, batch_id: int,
                          partition: int, attempt: int, started: _Started | None = None) -> TaskReport:
        """Partition ``partition`` of micro-batch ``batch_id`` of query ``query_id``, exactly once."""
        if not self.exactly_once:
            return self.write_plain(batches, batch_id=batch_id, partition=partition, attempt=attempt)
        transactional_id, commit_log = self.micro_batch_ids(query_id, partition)
        return self.write_transaction(batches, transactional_id=transactional_id, batch_id=batch_id,
                                      partition=partition, attempt=attempt, commit_log=commit_log, started=started)


def _marker(batch_id: int | None, partition: int, attempt: int, records: int) -> bytes:
    """The commit-log record's value: the batch a task committed (its key is the transactional id)."""
    return json.dumps({"batchId": batch_id, "partition": partition, "attempt": attempt, "records": records}).encode()


def _replayed(batches: Iterator[pa.RecordBatch], last: int | None, *, transactional_id: str, batch_id: int | None,
              partition: int, attempt: int, commit_log: tuple[str, int] | None) -> TaskReport | None:
    """The skipped task's report when the commit log says ``batch_id`` was written already (its
    input consumed, as Spark expects), else None."""
    if commit_log is None:
        return None
    assert batch_id is not None
    if last is None or last < batch_id:
        return None
    for _ in batches:
        pass
    log.info("%s: batch %d already committed (last %d); skipping", transactional_id, batch_id, last)
    return TaskReport(partition, batch_id, attempt, 0, True, transactional_id)


class _Started:
    """A task's transaction set-up running in a thread while the task waits for its first input rows.

    Creating the producer, InitProducerId and the marker lookup are round trips to the broker
    (several ms each); the first Arrow batch has to come all the way through the source task.
    The librdkafka calls release the GIL, so the two overlap.
    """

    def __init__(self, fn: Callable[[], _Setup]) -> None:
        self._fn = fn
        self._value: _Setup | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kbroker-sink-setup", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as e:  # handed to the task's thread by result()
            self._error = e

    def result(self) -> _Setup:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value


def _nonempty(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch] | None:
    """``batches`` with empty batches dropped, or None when there is no row at all."""
    it = (b for b in batches if b.num_rows)
    first = next(it, None)
    if first is None:
        return None

    def chain() -> Iterator[pa.RecordBatch]:
        yield first
        yield from it

    return chain()


def last_committed_batch(conf: dict[str, str], topic: str, partition: int, transactional_id: str) -> int | None:
    """The batch id of the last committed marker of ``transactional_id`` in ``topic``/``partition``.

    Reads the tail with read_committed, widening the window until a marker shows up: the partition
    has one writer, so apart from aborted attempts the last committed record is the marker sought.
    """
    consumer = kafka_io.range_consumer(conf, **{"isolation.level": "read_committed",
                                                "fetch.wait.max.ms": 1})
    try:
        tp = CkTopicPartition(topic, partition)
        low, high = consumer.get_watermark_offsets(tp, cached=False, timeout=30)
        window = 16
        while high > low:
            start = max(low, high - window)
            last: int | None = None
            for msg in _read_to(consumer, topic, partition, start, high):
                if msg.key() == transactional_id.encode():
                    last = int(json.loads(msg.value())["batchId"])
            if last is not None or start == low:
                return last
            window *= 8
        return None
    finally:
        consumer.close()


def _read_to(consumer: Any, topic: str, partition: int, start: int, end: int) -> Iterator[Any]:
    consumer.assign([CkTopicPartition(topic, partition, start)])
    while True:
        # poll(), not consume(n): the tail ends in transaction control records that read_committed
        # never delivers, so consume() would always sit out its whole timeout waiting for n
        # messages (50 ms per sink task); poll() hands over each record and the end-of-partition
        # event as soon as they arrive.
        msg = consumer.poll(0.05)
        if msg is None:
            continue
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF and msg.offset() >= end:
                return
            if err.code() != KafkaError._PARTITION_EOF:
                raise KafkaException(err)
            continue
        if msg.offset() >= end:
            return
        yield msg
        if msg.offset() == end - 1:
            return


class KBrokerStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    """Micro-batch sink: one transaction (rows + commit marker) per task, replays skipped; with
    ``exactlyOnce.mode=2pc`` prepared task transactions the driver commits together (sink_2pc.py)."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        super().__init__(options, schema)
        # On the driver before every micro-batch (for its tasks) and in the commit runner: the 2pc
        # mode recovers what a crashed run left open in the former.
        self.twopc = None
        if _mode(self.opt("exactlyOnce.mode")) == "2pc" and self.exactly_once:
            from . import sink_2pc

            self.twopc = sink_2pc.setup(self)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None
        partition, attempt = ctx.partitionId(), ctx.attemptNumber()
        batch_id = int(ctx.getLocalProperty(BATCH_ID_PROPERTY))
        query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY)
        started = None
        if self.twopc is None and self.exactly_once:
            # Fencing and the marker lookup need no input: start them before waiting for it. An
            # empty task then has fenced its id's earlier attempts too (the same partition of the
            # same batch, so they had no rows either, or of a batch already complete), which is
            # harmless.
            started = self.start_micro_batch(query_id=query_id, batch_id=batch_id, partition=partition)
        batches = _nonempty(iterator)
        if batches is None:
            if started is not None:
                producer, _ = started.result()  # nothing begun: the producer has no transaction open
                if isinstance(producer, raw_writer.RawTransaction):
                    producer.close()  # its loop thread and connections
            # Nothing to write; a replay of this batch is empty too, so no marker is needed.
            return TaskReport(partition, batch_id, attempt, 0, False, None)
        if self.twopc is not None:
            from . import sink_2pc

            return sink_2pc.write_task(self, batches, batch_id=batch_id, partition=partition, attempt=attempt)
        return self.write_micro_batch(batches, query_id=query_id, batch_id=batch_id, partition=partition,
                                      attempt=attempt, started=started)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.twopc is not None:
            from . import sink_2pc

            return sink_2pc.commit(self.twopc, messages, batchId)
        reports = [m for m in messages if isinstance(m, TaskReport)]
        written = sum(r.records for r in reports)
        skipped = sum(1 for r in reports if r.skipped)
        log.info("batch %d: %d records in %d tasks (%d replayed tasks skipped)", batchId, written,
                 len(reports), skipped)
        crash = os.environ.get(CRASH_ENV)
        if crash is not None and int(crash) == batchId:
            # Test hook: die like a crashed driver host, data committed but batch not marked done.
            crash_driver()

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.twopc is not None:
            from . import sink_2pc

            return sink_2pc.abort(self.twopc, messages, batchId)
        # Tasks that committed stay committed: the replay of this batch skips them via their markers.
        log.warning("batch %d aborted by Spark", batchId)


class KBrokerBatchWriter(_WriterBase, DataSourceArrowWriter):
    """``df.write.format("kbroker")``: every task writes in one transaction; retries fence earlier attempts."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        super().__init__(options, schema)
        if _mode(self.opt("exactlyOnce.mode")) == "2pc":
            raise ValueError("exactlyOnce.mode=2pc is for streaming writes (writeStream) only")
        # Chosen on the driver, pickled into every task: retries of a task share its transactional.id.
        self.job_id = uuid.uuid4().hex
        # Set by foreach_batch_sink(): this batch write is micro-batch ``batch_id`` of a streaming query.
        query_id, batch_id = self.opt("kbroker.sink.queryId"), self.opt("kbroker.sink.batchId")
        self.micro_batch = (query_id, int(batch_id)) if query_id and batch_id is not None else None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None
        partition, attempt = ctx.partitionId(), ctx.attemptNumber()
        batches = _nonempty(iterator)
        if batches is None:
            return TaskReport(partition, None, attempt, 0, False, None)
        if self.micro_batch is not None:
            return self.write_micro_batch(batches, query_id=self.micro_batch[0], batch_id=self.micro_batch[1],
                                          partition=partition, attempt=attempt)
        if not self.exactly_once:
            return self.write_plain(batches, batch_id=None, partition=partition, attempt=attempt)
        return self.write_transaction(batches, transactional_id=f"{self.txn_prefix}.batch.{self.job_id}.{partition}",
                                      batch_id=None, partition=partition, attempt=attempt, commit_log=None)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        n = sum(m.records for m in messages if isinstance(m, TaskReport))
        log.info("batch write committed: %d records", n)


def foreach_batch_sink(**options: str) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function writing each micro-batch exactly once through the kbroker sink.

    For queries whose output mode the Python streaming sink API does not accept (update mode,
    e.g. aggregations emitting changed rows): ``df.writeStream.outputMode("update")
    .foreachBatch(foreach_batch_sink(**{"kafka.bootstrap.servers": ..., "topic": ...}))``. Same
    protocol as the streaming writer, keyed by the query id and the micro-batch id Spark passes in.
    """

    def write(df: DataFrame, batch_id: int) -> None:
        query_id = df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        if not query_id:
            raise RuntimeError("foreach_batch_sink() must be used as a streaming foreachBatch function")
        writer = df.write.format("kbroker").mode("append")
        for key, value in options.items():
            writer = writer.option(key, value)
        writer.option("kbroker.sink.queryId", query_id).option("kbroker.sink.batchId", str(batch_id)).save()

    return write
