"""Kafka-side helpers for the Spark tests: create and delete topics, produce (plain and transactional),
delete records, read back."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

Record = tuple[int, int, bytes | None, bytes | None]  # partition, offset, key, value


def create_topic(bootstrap: str, topic: str, partitions: int = 2, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1,
                                  config=config or {})])[topic].result(30)


def produce(bootstrap: str, topic: str, records: Iterable[tuple[int, bytes | None, bytes]],
            **extra: object) -> None:
    """records: (partition, key, value)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "queue.buffering.max.messages": 1000000})
    for part, key, value in records:
        while True:
            try:
                p.produce(topic, value, key, partition=part, **extra)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0


def transactional_producer(bootstrap: str, txn_id: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    p.init_transactions(30)
    return p


def read_all(bootstrap: str, topic: str, isolation: str = "read_committed", *, headers: bool = False) -> list[Any]:
    """Every record of every partition of ``topic`` up to its current end (LSO for read_committed):
    (partition, offset, key, value), and with ``headers`` the record's headers (a list) as a fifth."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "kbroker-spark-tests-reader",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        parts = sorted(c.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {}
        for p in parts:
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), cached=False, timeout=30)
            ends[p] = (low, high)
        pending = {p for p, (low, high) in ends.items() if high > low}
        c.assign([TopicPartition(topic, p, ends[p][0]) for p in parts])
        out: list[Record] = []
        while pending:
            for m in c.consume(5000, 2.0):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF and m.offset() >= ends[m.partition()][1]:
                        pending.discard(m.partition())
                    continue
                rec = (m.partition(), m.offset(), m.key(), m.value())
                out.append((*rec, m.headers() or []) if headers else rec)
                if m.offset() >= ends[m.partition()][1] - 1:
                    pending.discard(m.partition())
        return out
    finally:
        c.close()


def values(records: list[Record]) -> list[bytes | None]:
    return [r[3] for r in records]


def delete_records(bootstrap: str, topic: str, before: dict[int, int]) -> dict[int, int]:
    """DeleteRecords: move the log start of each partition up to ``before[partition]``; returns the new log starts."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, p, off) for p, off in before.items()],
                                   request_timeout=30)
    return {tp.partition: fut.result(30).low_watermark for tp, fut in futures.items()}


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.delete_topics([topic], request_timeout=30)[topic].result(30)
