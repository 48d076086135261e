"""Transaction timeout (issue 5, acceptance 3): a producer SIGKILLed mid-transaction is aborted by the coordinator.

A confluent-kafka producer in a subprocess (transaction.timeout.ms=3000) begins a transaction,
produces and is killed with SIGKILL. Until the coordinator notices the timeout, the partition's
last stable offset stays at the dead transaction's first offset, so a read_committed consumer sees
nothing, not even data committed afterwards by another producer. Once the coordinator aborts (epoch
bump, ABORT markers) the LSO moves on: the consumer gets the later committed data and never the
killed producer's records. The transactional.id stays usable by a new instance.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from confluent_kafka import Consumer, IsolationLevel, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

TOPIC = "txn-timeout"
TIMEOUT = 30
TXN_TIMEOUT_MS = 3000
ABORT_DEADLINE = 20  # seconds after the kill by which the coordinator must have aborted
OVERRIDES = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}

CHILD = """
import sys, time
from confluent_kafka import Producer
bootstrap, topic, tid, timeout_ms = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": int(timeout_ms)})
p.init_transactions(30)
p.begin_transaction()
for i in range(5):
    p.produce(topic, value=b"doomed-%d" % i, partition=0)
assert p.flush(30) == 0
print("READY", flush=True)
time.sleep(3600)
"""


def last_stable_offset(admin: AdminClient) -> int:
    tp = TopicPartition(TOPIC, 0)
    res = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=IsolationLevel.READ_COMMITTED,
                             request_timeout=TIMEOUT)
    return res[tp].result(TIMEOUT).offset


def _take(msgs: list, got: list[bytes], eof: bool = False) -> bool:
    """Append the records' values to ``got``; returns whether the reader is at partition EOF
    (``eof`` before these messages, updated by them: an EOF after the last record)."""
    for m in msgs:
        if m.error() is None:
            got.append(m.value())
            eof = False
        elif m.error().code() == KafkaError._PARTITION_EOF:
            eof = True
        else:
            raise AssertionError(m.error())
    return eof


def test_killed_producer_is_aborted_after_its_timeout(broker_factory):
    broker = broker_factory(OVERRIDES)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(TIMEOUT)

    # Taken before the child starts: its transaction's timeout runs from a later instant (its
    # AddPartitionsToTxn), so "less than the timeout since t0" means it cannot have expired yet.
    t0 = time.monotonic()
    child = subprocess.Popen([sys.executable, "-c", CHILD, broker.bootstrap, TOPIC, "doomed", str(TXN_TIMEOUT_MS)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "READY"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()

    # Committed data after the dead transaction's records, from another transactional producer.
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "survivor"})
    p.init_transactions(TIMEOUT)
    p.begin_transaction()
    for i in range(3):
        p.produce(TOPIC, value=b"after-%d" % i, partition=0)
    p.commit_transaction(TIMEOUT)

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "txn-timeout-reader",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(TOPIC, 0, 0)])
        # Only meaningful while the transaction cannot have expired yet: both observations are
        # made, then checked only if they ended before the timeout could have run out (a machine
        # slow enough to get here later skips them, rather than asserting on time).
        lso = last_stable_offset(admin)
        got: list[bytes] = []
        eof = _take(c.consume(num_messages=100, timeout=0.5), got)
        if time.monotonic() - t0 < TXN_TIMEOUT_MS / 1000:
            assert lso == 0, "the open transaction should pin the LSO at its first offset"
            assert got == [], "a read_committed consumer must not get past the open transaction"

        deadline = time.monotonic() + ABORT_DEADLINE
        while not (eof and len(got) >= 3) and time.monotonic() < deadline:
            eof = _take(c.consume(num_messages=100, timeout=0.5), got, eof)
        assert got == [b"after-0", b"after-1", b"after-2"], \
            f"read_committed got {got} within {ABORT_DEADLINE}s of the kill (coordinator abort missing?)"
        end = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=TIMEOUT)[1]
        # 5 doomed + ABORT marker + 3 after + COMMIT marker; the LSO is the log end again.
        assert end == 10
        assert last_stable_offset(admin) == end
        assert c.position([TopicPartition(TOPIC, 0)])[0].offset == end
    finally:
        c.close()

    # The coordinator's abort bumped the epoch; a new instance of the dead transactional.id
    # initialises and commits normally.
    fresh = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "doomed"})
    fresh.init_transactions(TIMEOUT)
    fresh.begin_transaction()
    fresh.produce(TOPIC, value=b"reborn", partition=0)
    fresh.commit_transaction(TIMEOUT)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "txn-timeout-reader2",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(TOPIC, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while len(values) < 4 and time.monotonic() < deadline:
            values += [m.value() for m in c.consume(num_messages=100, timeout=0.5) if m.error() is None]
        assert values == [b"after-0", b"after-1", b"after-2", b"reborn"]
    finally:
        c.close()
