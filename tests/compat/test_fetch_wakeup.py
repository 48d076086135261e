"""A Fetch parked at the log end is answered by the next append, not by its max-wait timer.

Both checks use fetch.wait.max.ms / max_wait_ms = 20000 and require delivery in under 8 s: a broker
that only answers when the wait expires fails them. The upper bound is the behaviour under test; the
gap between the two leaves room for a slow machine's stalls.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.consumer import FetchRequest

from tests.compat.rdkafka_io import produce
from tests.compat.scenario import make_records
from tests.helpers import RawConnection

TOPIC = "wakeup"
MAX_WAIT_MS = 20000
BOUND_S = 8.0


def _producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})


def _send_one(p: Producer, value: bytes) -> None:
    p.produce(TOPIC, key=b"k", value=value)
    assert p.flush(10) == 0


def test_parked_consumer_gets_new_record_promptly(broker):
    produce(broker.bootstrap, TOPIC, make_records("wakeup", 1))  # creates the topic; end offset 1
    p = _producer(broker.bootstrap)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wakeup-unused", "enable.auto.commit": False,
                  "fetch.wait.max.ms": MAX_WAIT_MS, "fetch.min.bytes": 1})
    try:
        c.assign([TopicPartition(TOPIC, 0, 1)])
        assert c.consume(num_messages=10, timeout=1.0) == []  # now parked in a long-poll Fetch
        latencies = []
        # After the first round the consumer's next Fetch starts right after the previous delivery, so
        # rounds 2 and 3 produce early in a fresh 20 s wait: only a wake-up on append answers them quickly.
        for i in range(3):
            time.sleep(0.2)
            t0 = time.monotonic()
            _send_one(p, b"round-%d" % i)
            msgs = []
            while not msgs and time.monotonic() - t0 < MAX_WAIT_MS / 1000 + 10:
                msgs = [m for m in c.consume(num_messages=10, timeout=0.1) if m.error() is None]
            latencies.append(time.monotonic() - t0)
            assert [m.value() for m in msgs] == [b"round-%d" % i]
            assert msgs[0].offset() == 1 + i
        assert max(latencies) < BOUND_S, f"delivery latencies {latencies} (fetch.wait.max.ms={MAX_WAIT_MS})"
    finally:
        c.close()


def test_raw_fetch_is_answered_by_append(broker):
    p = _producer(broker.bootstrap)
    _send_one(p, b"first")  # creates the topic; end offset 1
    T = FetchRequest.FetchTopic
    request = FetchRequest(version=11, replica_id=-1, max_wait_ms=MAX_WAIT_MS, min_bytes=1, max_bytes=1 << 20,
                           isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[],
                           topics=[T(version=11, topic=TOPIC, partitions=[T.FetchPartition(
                               version=11, partition=0, current_leader_epoch=-1, fetch_offset=1,
                               log_start_offset=-1, partition_max_bytes=1 << 20)])])
    with RawConnection(broker.bootstrap, timeout=MAX_WAIT_MS / 1000 + 5) as conn:
        corr = conn.send(request, 11)
        time.sleep(0.3)  # the Fetch is parked at the log end by now
        t0 = time.monotonic()
        _send_one(p, b"second")
        response = conn.receive(request, 11, corr)
        elapsed = time.monotonic() - t0
    assert response.error_code == 0
    [part] = response.responses[0].partitions
    assert part.error_code == 0 and part.high_watermark == 2
    assert part.records and b"second" in bytes(part.records)
    assert elapsed < BOUND_S, f"parked Fetch answered {elapsed:.2f}s after the append"
