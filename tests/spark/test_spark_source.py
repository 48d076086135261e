"""Reading kbroker topics as Spark DataFrames (Acceptance 1): read_committed, Kafka-source schema, offsets,
failOnDataLoss."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kafka_util import create_topic, delete_records, delete_topic, produce, read_all, transactional_producer

KAFKA_SOURCE_SCHEMA = [
    ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
    ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int"),
]


def _read(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("kbroker").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


@pytest.fixture
def mixed_topic(broker: Any) -> str:
    """Partition 0: 5 committed, 4 aborted, 3 committed; partition 1: 2 plain + an open-then-committed txn."""
    topic = "mixed"
    create_topic(broker.bootstrap, topic, partitions=2)
    p = transactional_producer(broker.bootstrap, "mixed-writer")
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, f"c1-{i}".encode(), f"k{i}".encode(), partition=0)
    p.commit_transaction()
    p.begin_transaction()
    for i in range(4):
        p.produce(topic, f"aborted-{i}".encode(), partition=0)
        p.produce(topic, f"aborted-p1-{i}".encode(), partition=1)
    p.flush()
    p.abort_transaction()
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, f"c2-{i}".encode(), partition=0)
    p.produce(topic, b"c2-p1", partition=1)
    p.commit_transaction()
    produce(broker.bootstrap, topic, [(1, None, b"plain-0"), (1, None, b"plain-1")],
            headers=[("h", b"v")])
    return topic


def test_batch_read_returns_only_committed_records_with_kafka_schema(spark: Any, broker: Any,
                                                                    mixed_topic: str) -> None:
    df = _read(spark, broker.bootstrap, subscribe=mixed_topic)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == KAFKA_SOURCE_SCHEMA
    rows = df.orderBy("partition", "offset").collect()
    got = [(r.partition, r.value.decode()) for r in rows]
    assert got == ([(0, f"c1-{i}") for i in range(5)] + [(0, f"c2-{i}") for i in range(3)]
                   + [(1, "c2-p1"), (1, "plain-0"), (1, "plain-1")])
    # Same records, offsets and keys as a read_committed Kafka consumer sees.
    expected = sorted((p, o, k, v) for p, o, k, v in read_all(broker.bootstrap, mixed_topic))
    assert sorted((r.partition, r.offset, r.key, r.value) for r in rows) == expected
    assert {r.topic for r in rows} == {mixed_topic}
    assert {r.timestampType for r in rows} == {0}  # CreateTime
    assert all(r.timestamp is not None for r in rows)


def test_read_uncommitted_option_sees_aborted_records(spark: Any, broker: Any, mixed_topic: str) -> None:
    df = _read(spark, broker.bootstrap, subscribe=mixed_topic, **{"kafka.isolation.level": "read_uncommitted"})
    values = {r.value.decode() for r in df.collect()}
    assert {"aborted-0", "aborted-p1-3"} <= values
    assert len(values) == 19


def test_batch_read_honours_starting_and_ending_offsets(spark: Any, broker: Any, mixed_topic: str) -> None:
    # Partition 0 layout: 0-4 committed, 5 marker, 6-9 aborted, 10 marker, 11-13 committed, 14 marker.
    starting = json.dumps({mixed_topic: {"0": 3, "1": -2}})
    ending = json.dumps({mixed_topic: {"0": 12, "1": -1}})
    df = _read(spark, broker.bootstrap, subscribe=mixed_topic, startingOffsets=starting, endingOffsets=ending)
    got = sorted((r.partition, r.value.decode()) for r in df.collect())
    assert got == sorted([(0, "c1-3"), (0, "c1-4"), (0, "c2-0"),
                          (1, "c2-p1"), (1, "plain-0"), (1, "plain-1")])
    # An ending offset that falls on aborted records and markers only yields nothing past them.
    df = _read(spark, broker.bootstrap, assign=json.dumps({mixed_topic: [0]}),
               startingOffsets=json.dumps({mixed_topic: {"0": 5}}), endingOffsets=json.dumps({mixed_topic: {"0": 11}}))
    assert df.count() == 0
    # latest..latest is empty; earliest..latest is everything.
    assert _read(spark, broker.bootstrap, subscribe=mixed_topic, startingOffsets="latest").count() == 0
    assert _read(spark, broker.bootstrap, subscribePattern="mix.*").count() == 11


def test_include_headers(spark: Any, broker: Any, mixed_topic: str) -> None:
    df = _read(spark, broker.bootstrap, subscribe=mixed_topic, includeHeaders="true")
    assert df.schema.fields[-1].name == "headers"
    assert df.schema.fields[-1].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    rows = {r.value: r.headers for r in df.collect()}
    assert [(h.key, h.value) for h in rows[b"plain-0"]] == [("h", b"v")]
    assert rows[b"c1-0"] == []


def test_stream_read_with_max_offsets_per_trigger(spark: Any, broker: Any, tmp_path: Any) -> None:
    topic = "stream-in"
    create_topic(broker.bootstrap, topic, partitions=2)
    produce(broker.bootstrap, topic, [(i % 2, None, str(i).encode()) for i in range(100)])
    seen: list[tuple[int, int]] = []

    def collect(batch_df: Any, batch_id: int) -> None:
        seen.extend((batch_id, int(r.value)) for r in batch_df.collect())

    df = (spark.readStream.format("kbroker").option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "30")
          .load())
    q = (df.writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    assert sorted(v for _, v in seen) == list(range(100))
    per_batch: dict[int, int] = {}
    for b, _ in seen:
        per_batch[b] = per_batch.get(b, 0) + 1
    assert len(per_batch) == 4 and max(per_batch.values()) <= 30
    # Offsets in the checkpoint have the Spark Kafka source's JSON shape.
    last = max(int(p.name) for p in (tmp_path / "ck" / "offsets").iterdir() if p.name.isdigit())
    lines = (tmp_path / "ck" / "offsets" / str(last)).read_text().splitlines()
    assert json.loads(lines[-1]) == {topic: {"0": 50, "1": 50}}


# --- failOnDataLoss: records the query asks for are gone (retention, DeleteRecords, deleted topic) ---------


@pytest.fixture
def trimmed_topic(broker: Any) -> str:
    """Offsets 0-49 in both partitions; DeleteRecords moved partition 0's log start to 20."""
    topic = "trimmed"
    create_topic(broker.bootstrap, topic, partitions=2)
    produce(broker.bootstrap, topic, [(p, None, f"{p}-{i}".encode()) for i in range(50) for p in (0, 1)])
    assert delete_records(broker.bootstrap, topic, {0: 20}) == {0: 20}
    return topic


def test_batch_read_below_log_start_fails_on_data_loss_by_default(spark: Any, broker: Any,
                                                                   trimmed_topic: str) -> None:
    from_zero = json.dumps({trimmed_topic: {"0": 0, "1": 0}})
    df = _read(spark, broker.bootstrap, subscribe=trimmed_topic, startingOffsets=from_zero)
    with pytest.raises(Exception) as info:  # noqa: B017 - Py4J/PySpark wrap the task's DataLossError
        df.collect()
    text = str(info.value)
    assert "DataLossError: data loss: cannot read trimmed-0 offsets [0, 50)" in text
    assert "the partition now holds offsets [20, 50)" in text
    assert "set the source option failOnDataLoss to false" in text
    # "earliest" resolves to the log start, so nothing is missing there.
    assert _read(spark, broker.bootstrap, subscribe=trimmed_topic).count() == 80


def test_batch_read_below_log_start_skips_lost_records_without_fail_on_data_loss(spark: Any, broker: Any,
                                                                                 trimmed_topic: str) -> None:
    from_zero = json.dumps({trimmed_topic: {"0": 0, "1": 0}})
    df = _read(spark, broker.bootstrap, subscribe=trimmed_topic, startingOffsets=from_zero,
               failOnDataLoss="false")
    got = sorted((r.partition, r.offset, r.value.decode()) for r in df.collect())
    assert got == [(0, i, f"0-{i}") for i in range(20, 50)] + [(1, i, f"1-{i}") for i in range(50)]
    # A range that lies entirely below the log start yields nothing.
    df = _read(spark, broker.bootstrap, assign=json.dumps({trimmed_topic: [0]}), startingOffsets=from_zero,
               endingOffsets=json.dumps({trimmed_topic: {"0": 15}}), failOnDataLoss="false")
    assert df.count() == 0


def test_stream_query_fails_on_data_loss_then_skips_it_with_fail_on_data_loss_false(
        spark: Any, broker: Any, tmp_path: Any) -> None:
    """Records deleted after the query read up to them: the next micro-batch fails, or skips them."""
    topic = "stream-trimmed"
    create_topic(broker.bootstrap, topic, partitions=2)
    produce(broker.bootstrap, topic, [(i % 2, None, str(i).encode()) for i in range(100)])
    seen: list[int] = []

    def run(**options: str) -> None:
        reader = (spark.readStream.format("kbroker").option("kafka.bootstrap.servers", broker.bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest"))
        for k, v in options.items():
            reader = reader.option(k, v)
        q = (reader.load().writeStream
             .foreachBatch(lambda df, _: seen.extend(int(r.value) for r in df.collect()))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        q.awaitTermination()

    run()
    assert sorted(seen) == list(range(100))
    # 100 more (offsets 50-99 of each partition); then partition 0 loses offsets up to 70 unread.
    produce(broker.bootstrap, topic, [(i % 2, None, str(i).encode()) for i in range(100, 200)])
    assert delete_records(broker.bootstrap, topic, {0: 70}) == {0: 70}
    seen.clear()
    with pytest.raises(Exception) as info:  # noqa: B017 - StreamingQueryException
        run()
    assert "data loss: cannot read stream-trimmed-0 offsets [50, 100)" in str(info.value)
    assert seen == []
    # The same checkpoint with failOnDataLoss=false replays that batch without the lost records.
    run(failOnDataLoss="false")
    lost = {100 + 2 * i for i in range(20)}  # values at partition-0 offsets 50-69
    assert sorted(seen) == sorted(set(range(100, 200)) - lost)


def test_stream_reader_data_loss_checks_when_planning(broker: Any) -> None:
    """The driver-side checks of Spark's Kafka source, on the reader itself (no query needed)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from spark_jobs.kafka_io import DataLossError
    from spark_jobs.source import KBrokerStreamReader

    create_topic(broker.bootstrap, "dl-a", partitions=2)
    create_topic(broker.bootstrap, "dl-b", partitions=1)
    produce(broker.bootstrap, "dl-a", [(i % 2, None, b"x") for i in range(20)])
    produce(broker.bootstrap, "dl-b", [(0, None, b"x") for _ in range(5)])
    delete_records(broker.bootstrap, "dl-a", {1: 4})

    def latest(start: dict, fail: bool) -> dict:
        reader = KBrokerStreamReader({"kafka.bootstrap.servers": broker.bootstrap, "subscribePattern": "dl-.*",
                                      "failOnDataLoss": str(fail).lower()})
        return reader.latestOffset(start, ReadAllAvailable())

    cases = [
        # A partition first seen after the query started whose log does not start at 0.
        ({"dl-a": {"0": 10}, "dl-b": {"0": 5}}, "added partition dl-a-1 starts at offset 4 instead of 0",
         {"dl-a": {"0": 10, "1": 10}, "dl-b": {"0": 5}}),
        # The log end went below what the query already read (topic re-created or truncated).
        ({"dl-a": {"0": 10, "1": 10}, "dl-b": {"0": 8}}, "dl-b-0 offset went back from 8 to 5",
         {"dl-a": {"0": 10, "1": 10}, "dl-b": {"0": 5}}),
        # A partition the query was reading is gone (deleted topic).
        ({"dl-a": {"0": 10, "1": 10}, "dl-b": {"0": 5}, "dl-c": {"0": 3}}, "partitions dl-c-0 are gone",
         {"dl-a": {"0": 10, "1": 10}, "dl-b": {"0": 5}}),
    ]
    for start, message, end in cases:
        with pytest.raises(DataLossError, match=f"data loss: {message}.*failOnDataLoss to false"):
            latest(start, fail=True)
        assert latest(start, fail=False) == end
    # Deleting a topic the query reads is data loss too; without the check its partitions drop out.
    delete_topic(broker.bootstrap, "dl-b")
    start = {"dl-a": {"0": 10, "1": 10}, "dl-b": {"0": 3}}
    with pytest.raises(DataLossError, match="partitions dl-b-0 are gone"):
        latest(start, fail=True)
    assert latest(start, fail=False) == {"dl-a": {"0": 10, "1": 10}}
