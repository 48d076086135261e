"""confluent-kafka (librdkafka) produce and assign-consume helpers shared by the compat tests.

The confluent-kafka scenario consumes with :func:`consume_all`; the chaos tests use it to read back,
with a real consumer, what a producer wrote under faults; the fetch wake-up test reuses :func:`produce`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, KafkaError, Producer, TopicPartition

from tests.compat.scenario import Consumed, Record

TIMEOUT = 30


def produce(bootstrap: str, topic: str, records: Iterable[Record], *, extra: dict | None = None) -> None:
    """Produce keyed records with headers and CreateTime timestamps; assert every delivery succeeded."""
    errors: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(f"{msg.key()!r}: {err}")

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **(extra or {})})
    for r in records:
        while True:
            try:
                p.produce(topic, key=r.key, value=r.value, headers=list(r.headers), timestamp=r.timestamp or 0,
                          on_delivery=on_delivery)
                break
            except BufferError:  # local queue full: let deliveries drain
                p.poll(0.1)
        p.poll(0)
    remaining = p.flush(TIMEOUT)
    assert remaining == 0, f"{remaining} messages not delivered"
    assert not errors, errors[:5]


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int, *,
                extra: dict | None = None, timeout: float = TIMEOUT) -> list[Consumed]:
    """Assign every partition from offset 0 and read until ``expected`` records and EOF everywhere."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat-unused", "enable.auto.commit": False,
                  "enable.partition.eof": True, **(extra or {})})
    out: list[Consumed] = []
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        eof: set[int] = set()
        deadline = time.monotonic() + timeout
        while (len(out) < expected or len(eof) < partitions) and time.monotonic() < deadline:
            for msg in c.consume(num_messages=1000, timeout=0.5):
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        eof.add(msg.partition())
                        continue
                    raise AssertionError(f"consume error: {msg.error()}")
                eof.discard(msg.partition())
                ts_type, ts = msg.timestamp()
                assert ts_type == TIMESTAMP_CREATE_TIME
                out.append(Consumed(msg.partition(), msg.offset(), msg.key(), msg.value(),
                                    tuple(msg.headers() or ()), ts))
    finally:
        c.close()
    return out
