"""The ``kbroker`` Spark data source: batch and streaming reads, batch and streaming writes.

Registered with ``spark.dataSource.register(KBrokerDataSource)``; then ``format("kbroker")`` takes
the options of Spark's Kafka source and sink (``kafka.bootstrap.servers``, ``subscribe``,
``subscribePattern``, ``assign``, ``startingOffsets``, ``endingOffsets``, ``maxOffsetsPerTrigger``,
``includeHeaders``, ``failOnDataLoss``, ``topic``, other ``kafka.*`` settings passed to librdkafka)
and produces the same schema. Differences: reads default to ``kafka.isolation.level=read_committed``
and writes are exactly-once (see spark_jobs/sink.py and docs/spark.md).

Offsets live only in Spark's checkpoint (no consumer group), one input partition per
topic-partition range, so a micro-batch replayed after a restart reads exactly the same records.
``failOnDataLoss`` (default true) makes the same checks as Spark's Kafka source: offsets deleted
before a task reads them (kafka_io.read_range) and, when a micro-batch is planned, partitions that
are gone, went backwards, or appeared without starting at 0 (``KBrokerStreamReader.latestOffset``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from . import kafka_io, offsets
from .offsets import OffsetMap, TopicPartition

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
          "timestampType int")
SCHEMA_WITH_HEADERS = SCHEMA + ", headers array<struct<key: string, value: binary>>"


def _bool(value: str | None, default: bool) -> bool:
    if value is None:
        return default
    return value.strip().lower() in ("true", "1", "yes")


def _names(tps: Sequence[TopicPartition]) -> str:
    return ", ".join(f"{topic}-{part}" for topic, part in tps)


@dataclass
class RangePartition(InputPartition):
    """One Spark task: records of one topic-partition in [start, end). start -2 = earliest (new partition)."""

    topic: str
    partition: int
    start: int
    end: int


class _ReaderBase:
    """Option handling shared by the batch and the streaming reader."""

    def __init__(self, options: dict[str, str]) -> None:
        # Spark hands options over case-insensitively (lower-cased keys); look them up the same way.
        self.options = {k.lower(): v for k, v in options.items()}
        self.conf = kafka_io.client_config(self.options)
        self.conf.setdefault("isolation.level", "read_committed")
        chosen = [k for k in ("subscribe", "subscribePattern", "assign") if self.opt(k)]
        if len(chosen) != 1:
            raise ValueError("exactly one of the options subscribe, subscribePattern, assign is required")
        self.include_headers = _bool(self.opt("includeHeaders"), False)
        self.fail_on_data_loss = _bool(self.opt("failOnDataLoss"), True)
        self.raw_reader = _bool(self.opt("rawReader"), True)  # false: librdkafka only (spark_jobs.raw_reader)
        self._admin = None

    def opt(self, name: str) -> str | None:
        return self.options.get(name.lower())

    def __getstate__(self) -> dict[str, object]:
        # Readers are pickled to executors; the admin client lives only in the driver-side process.
        state = dict(self.__dict__)
        state["_admin"] = None
        return state

    @property
    def admin(self):  # noqa: ANN201 - confluent AdminClient
        if self._admin is None:
            self._admin = kafka_io.admin(self.conf)
        return self._admin

    # Streaming queries wait for subscribed topics to appear; batch reads fail on missing ones.
    missing_topics_ok = False

    def topic_partitions(self) -> list[TopicPartition]:
        assign = self.opt("assign")
        return kafka_io.list_partitions(self.admin, subscribe=self.opt("subscribe"),
                                        pattern=self.opt("subscribePattern"),
                                        assign=offsets.parse_assign(assign) if assign else None,
                                        missing_ok=self.missing_topics_ok)

    def earliest(self, tps: list[TopicPartition]) -> OffsetMap:
        return kafka_io.list_offsets(self.admin, tps, "earliest")

    def latest(self, tps: list[TopicPartition]) -> OffsetMap:
        return kafka_io.list_offsets(self.admin, tps, "latest", isolation_level=kafka_io.isolation(self.conf))

    def read_partition(self, part: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(part, RangePartition):
            # Spark plans one placeholder partition when partitions() is empty (nothing to read).
            return
        start = part.start
        if start == offsets.EARLIEST:
            start = self.earliest([(part.topic, part.partition)])[(part.topic, part.partition)]
        yield from kafka_io.read_range(self.conf, part.topic, part.partition, start, part.end,
                                       include_headers=self.include_headers,
                                       fail_on_data_loss=self.fail_on_data_loss, raw=self.raw_reader)

    @staticmethod
    def ranges(start: OffsetMap, end: OffsetMap) -> list[RangePartition]:
        parts = []
        for (topic, part), e in sorted(end.items()):
            s = start.get((topic, part), offsets.EARLIEST)
            if s == offsets.EARLIEST or e > s:
                parts.append(RangePartition(topic, part, s, e))
        return parts


class KBrokerBatchReader(_ReaderBase, DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.starting = offsets.parse_offsets_option(self.opt("startingOffsets"), "earliest")
        self.ending = offsets.parse_offsets_option(self.opt("endingOffsets"), "latest")

    def partitions(self) -> Sequence[InputPartition]:
        tps = self.topic_partitions()
        early, late = self.earliest(tps), self.latest(tps)
        start = offsets.resolve(self.starting, tps, early, late)
        end = offsets.resolve(self.ending, tps, early, late)
        return self.ranges(start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.read_partition(partition)


class KBrokerStreamReader(_ReaderBase, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader with admission control (maxOffsetsPerTrigger) and Trigger.AvailableNow."""

    missing_topics_ok = True

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        if self.opt("endingOffsets"):
            raise ValueError("endingOffsets is for batch queries only")
        self.starting = offsets.parse_offsets_option(self.opt("startingOffsets"), "latest")
        max_per_trigger = self.opt("maxOffsetsPerTrigger")
        self.max_offsets = int(max_per_trigger) if max_per_trigger else None
        self.available_now_target: OffsetMap | None = None

    def initialOffset(self) -> dict:
        tps = self.topic_partitions()
        start = offsets.resolve(self.starting, tps, self.earliest(tps), self.latest(tps))
        return offsets.to_json_dict(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_offsets) if self.max_offsets else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.topic_partitions()
        self.available_now_target = self.latest(tps)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets.from_json_dict(start)
        tps = self.topic_partitions()
        latest = self.latest(tps)
        # Possible data loss, checked as Spark's Kafka source checks it when it plans a micro-batch
        # (KafkaOffsetReader.getOffsetRangesFromResolvedOffsets): failOnDataLoss=true fails the
        # query, false logs a warning and goes on.
        gone = sorted(tp for tp in begin if tp not in latest)
        if gone:
            # Deleted topic or partitions, or a changed assignment: records not yet read are lost.
            kafka_io.report_data_loss(f"partitions {_names(gone)} are gone; some data may have been missed",
                                      self.fail_on_data_loss)
            for tp in gone:
                del begin[tp]
        new = [tp for tp in tps if tp not in begin]
        if new:
            # Partitions that appeared since the last batch are read from their beginning.
            early = self.earliest(new)
            for tp, off in sorted(early.items()):
                if off != 0:
                    kafka_io.report_data_loss(f"added partition {_names([tp])} starts at offset {off} instead "
                                              f"of 0; some data may have been missed", self.fail_on_data_loss)
            begin.update(early)
        target = self.available_now_target
        if target is not None:
            latest = {tp: (min(off, target[tp]) if tp in target else begin[tp]) for tp, off in latest.items()}
        for tp, off in latest.items():
            if off < begin[tp]:
                # The log moved backwards (topic re-created or truncated): what we consumed is gone.
                kafka_io.report_data_loss(f"{_names([tp])} offset went back from {begin[tp]} to {off}; "
                                          f"some data may have been missed", self.fail_on_data_loss)
                begin[tp] = off
        if isinstance(limit, ReadMaxRows):
            latest = offsets.rate_limit(begin, latest, limit.max_rows)
        return offsets.to_json_dict(latest)

    def reportLatestOffset(self) -> dict | None:
        tps = self.topic_partitions()
        return offsets.to_json_dict(self.latest(tps))

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return self.ranges(offsets.from_json_dict(start), offsets.from_json_dict(end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.read_partition(partition)

    def commit(self, end: dict) -> None:
        # Offsets are durable in Spark's checkpoint; nothing to tell the broker.
        pass

    def stop(self) -> None:
        self._admin = None


class KBrokerDataSource(DataSource):
    """``format("kbroker")``: Kafka-source-compatible reads, exactly-once writes, over kbroker."""

    @classmethod
    def name(cls) -> str:
        return "kbroker"

    def schema(self) -> StructType | str:
        return SCHEMA_WITH_HEADERS if _bool(self.options.get("includeheaders"), False) else SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return KBrokerBatchReader(dict(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KBrokerStreamReader(dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import KBrokerBatchWriter

        return KBrokerBatchWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import KBrokerStreamWriter

        return KBrokerStreamWriter(dict(self.options), schema)
