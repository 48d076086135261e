"""What the Spark path's performance work relies on: client settings, the marker lookup, the Arrow paths.

Speed itself is measured by benchmarks/spark_bench.py; these tests pin the behaviour each
optimisation depends on so that a later edit cannot silently undo it.
"""

from __future__ import annotations

import json
from typing import Any

from kafka_util import create_topic, transactional_producer
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from spark_jobs import kafka_io, sink

SINK_SCHEMA = StructType([StructField("key", BinaryType()), StructField("value", StringType())])


def _writer(bootstrap: str, **options: str) -> sink.KBrokerStreamWriter:
    return sink.KBrokerStreamWriter({"kafka.bootstrap.servers": bootstrap, "topic": "out", **options}, SINK_SCHEMA)


def test_task_clients_connect_eagerly() -> None:
    # Sparse connections cost ~50 ms per short-lived client (the reconnect timer before the first
    # connection to a broker learnt from metadata); every task creates such clients.
    w = _writer("127.0.0.1:1")
    for conf in (kafka_io.range_consumer_config({"bootstrap.servers": "127.0.0.1:1"}),
                 w.producer_config("t.0"), w.producer_config(None)):
        assert conf["enable.sparse.connections"] is False
    # The user's kafka.* options still win.
    w = _writer("127.0.0.1:1", **{"kafka.enable.sparse.connections": "true"})
    assert w.producer_config("t.0")["enable.sparse.connections"] == "true"
    conf = kafka_io.range_consumer_config({"bootstrap.servers": "x", "enable.sparse.connections": "true"})
    assert conf["enable.sparse.connections"] == "true"


def test_range_reader_does_not_back_off_on_a_full_queue() -> None:
    # librdkafka pauses fetching for fetch.queue.backoff.ms (1 s default) once queued.min.messages
    # (100,000 default) records wait locally, which one large fetch of small records exceeds.
    conf = kafka_io.range_consumer_config({"bootstrap.servers": "127.0.0.1:1"})
    assert conf["queued.min.messages"] >= 1_000_000
    assert conf["fetch.queue.backoff.ms"] <= 10


def test_marker_lookup_returns_when_the_tail_ends_in_control_records(broker: Any) -> None:
    # Every committed marker is followed by a commit control record that read_committed never
    # delivers: the lookup must finish on end-of-partition, for one or many markers, committed or not.
    create_topic(broker.bootstrap, "commits", partitions=1, config={"cleanup.policy": "compact"})
    p = transactional_producer(broker.bootstrap, "q.0")
    for batch_id in range(3):
        p.begin_transaction()
        p.produce("commits", json.dumps({"batchId": batch_id}).encode(), b"q.0", partition=0)
        p.commit_transaction(30)
    p.begin_transaction()
    p.produce("commits", json.dumps({"batchId": 9}).encode(), b"q.0", partition=0)
    p.flush()
    p.abort_transaction(30)
    conf = {"bootstrap.servers": broker.bootstrap}
    assert sink.last_committed_batch(conf, "commits", 0, "q.0") == 2
    assert sink.last_committed_batch(conf, "commits", 0, "q.1") is None
