"""Wall-clock jumps on a single broker (issue 28): what is timed as a lease runs on the monotonic
clock, so a broker whose wall clock steps 10 minutes ahead and then 10 minutes back keeps its
consumer group members (session timeouts: no rebalance, no member expired), goes on accepting an
idempotent producer without a sequence error, and commits transactions started after each step
(transaction timeouts are wall-clock, as in Kafka: a transaction open across a step may be aborted,
so none is left open across one here). libfaketime moves only the broker's CLOCK_REALTIME
(tests/helpers/fake_clock.py). Slow (~40 s): ``make test-all``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker_proc import BrokerProcess
from tests.helpers.fake_clock import FakeClock, library

pytestmark = pytest.mark.skipif(library() is None, reason="libfaketime not installed (apt-get install faketime)")
TOPIC = "clock"


@pytest.mark.slow  # four phases, each longer than a session timeout: ~40 s
def test_single_broker_keeps_groups_and_producers_across_clock_jumps(broker_factory, tmp_path: Path) -> None:
    clock = FakeClock(tmp_path / "clock")
    b: BrokerProcess = broker_factory({"group.min.session.timeout.ms": "3000"}, start=False)
    b.env.update(clock.env())
    b.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=2)])[TOPIC].result(30)

    events: list[str] = []
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "clock-group", "auto.offset.reset": "earliest",
                         "session.timeout.ms": 4000, "heartbeat.interval.ms": 500, "log_level": 0})
    consumer.subscribe([TOPIC], on_assign=lambda c, ps: events.append(f"assign {len(ps)}"),
                       on_revoke=lambda c, ps: events.append(f"revoke {len(ps)}"))
    seen: list[bytes] = []
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set():
            for m in consumer.consume(100, 0.2):
                if m.error() is None:
                    seen.append(m.value())

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    errors: list[str] = []
    acked: list[bytes] = []
    producer = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "enable.idempotence": True,
                         "log_level": 0})
    txp = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "clock-txn", "log_level": 0})
    txp.init_transactions(30)
    n = 0

    def phase(label: str) -> None:
        nonlocal n
        for _ in range(200):
            producer.produce(TOPIC, value=b"%s-%d" % (label.encode(), n),
                             on_delivery=lambda err, m: errors.append(str(err)) if err else acked.append(m.value()))
            n += 1
        producer.flush(30)
        for i in range(5):
            txp.begin_transaction()
            txp.produce(TOPIC, value=b"txn-%s-%d" % (label.encode(), i))
            txp.commit_transaction(30)
        # Longer than the member's session timeout passes, on the monotonic clock, and the reader
        # catches up with what was acknowledged.
        quiet_until, deadline = time.monotonic() + 6, time.monotonic() + 60
        while time.monotonic() < deadline and (time.monotonic() < quiet_until or not set(acked) <= set(seen)):
            time.sleep(0.2)

    try:
        phase("before")
        assert events == ["assign 2"], events
        clock.set_and_wait("+600")
        phase("ahead")
        clock.set_and_wait("-600")
        phase("behind")
        clock.set_and_wait("+0")
        phase("real")
        rebalances = list(events)
    finally:
        stop.set()
        reader.join(10)
        consumer.close()  # (revokes, as every close does)
    assert not errors, errors[:3]
    assert rebalances == ["assign 2"], f"the group rebalanced over a clock jump: {rebalances}"
    missing = set(acked) - set(seen)
    assert not missing, f"{len(missing)} acknowledged records not consumed"
    assert sum(1 for v in seen if v.startswith(b"txn-")) == 20
