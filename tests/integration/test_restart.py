"""Topics, configs and records survive a clean restart (SIGTERM) and a crash (kill -9)."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic


def _consume_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    idle = 0
    while len(out) < expected and idle < 120:  # up to 60 s without a record (a slow restart)
        msgs = c.consume(1000, timeout=0.5)
        idle = 0 if msgs else idle + 1
        for m in msgs:
            assert m.error() is None, m.error()
            out.append((m.partition(), m.offset(), m.key(), m.value()))
    c.close()
    return out


@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "kill9"])
def test_restart_keeps_topics_configs_and_records(broker, crash):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("keep", num_partitions=3, config={"retention.ms": "123456789"})])["keep"].result(10)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(3000):
        p.produce("keep", key=b"k%d" % i, value=b"v%d" % i, partition=i % 3)
    assert p.flush(30) == 0
    before = sorted(_consume_all(broker.bootstrap, "keep", 3, 3000))
    assert len(before) == 3000

    broker.restart(kill=crash)

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    md = admin.list_topics(timeout=10)
    assert len(md.topics["keep"].partitions) == 3
    res = ConfigResource(ConfigResource.Type.TOPIC, "keep")
    configs = admin.describe_configs([res])[res].result(10)
    assert configs["retention.ms"].value == "123456789"
    after = sorted(_consume_all(broker.bootstrap, "keep", 3, 3000))
    assert after == before
    # Appends continue at the right offsets after the restart.
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    p.produce("keep", key=b"new", value=b"new", partition=0)
    assert p.flush(10) == 0
    last = _consume_all(broker.bootstrap, "keep", 3, 3001)
    offsets = sorted(o for part, o, _, _ in last if part == 0)
    assert offsets == list(range(len(offsets)))
