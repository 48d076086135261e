"""A broker whose log dir fills up (issue 28): as Kafka with every log dir failed, it halts at the
first failed write (exit code 1, "Shutdown broker because all log dirs in ... have failed") instead
of going on with a half-written segment; once space is freed and it is started again, every
acknowledged record is there, exactly once, at its acknowledged offset, and nothing partial is read.

The log dir is on a small real tmpfs filled by a file beside it (root only).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker_proc import BrokerProcess
from tests.helpers.small_disk import SmallDisk, available_reason

pytestmark = pytest.mark.skipif(available_reason() is not None, reason=str(available_reason()))
TOPIC = "full"
HALT_LINE = "all log dirs in"


def read_all(bootstrap: str, partitions: int) -> dict[int, list[tuple[int, bytes]]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "disk-full-reader", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "enable.partition.eof": True})
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    eof: set[int] = set()
    try:
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 60
        while len(eof) < partitions and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if m.error() is not None:
                    if m.error().code() == -191:  # _PARTITION_EOF
                        eof.add(m.partition())
                        continue
                    raise AssertionError(f"read error {m.error()}")
                got[m.partition()].append((m.offset(), m.value()))
        assert len(eof) == partitions, f"did not reach the end of every partition: {eof}"
    finally:
        c.close()
    return got


def test_broker_halts_on_a_full_log_dir_and_keeps_every_acknowledged_record(tmp_path: Path) -> None:
    with SmallDisk(tmp_path / "disk", 24) as disk:
        b = BrokerProcess(disk.data_dir, log_path=tmp_path / "broker.log", overrides={"num.partitions": "2"})
        b.start()
        try:
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            admin.create_topics([NewTopic(TOPIC, num_partitions=2)])[TOPIC].result(30)
            acked: dict[bytes, tuple[int, int]] = {}

            def on_delivery(err, msg) -> None:  # noqa: ANN001
                if err is None:
                    acked[msg.value()] = (msg.partition(), msg.offset())

            p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "enable.idempotence": True,
                          "linger.ms": 5, "message.timeout.ms": 15000, "log_level": 0})
            for i in range(300):
                p.produce(TOPIC, value=b"%06d-" % i + b"a" * 500, partition=i % 2, on_delivery=on_delivery)
            p.flush(30)
            assert len(acked) == 300
            disk.fill()
            # Writes go on while the disk is full: the first one that fails halts the broker.
            i = 300
            deadline = time.monotonic() + 60
            while b.running and time.monotonic() < deadline:
                for _ in range(50):
                    p.produce(TOPIC, value=b"%06d-" % i + b"b" * 4000, partition=i % 2, on_delivery=on_delivery)
                    i += 1
                p.poll(0.2)
            assert not b.running, "the broker kept running with a full log dir"
            assert b.proc is not None and b.proc.returncode == 1
            assert HALT_LINE in b.log_text(), b.log_tail()
            p.purge()  # what is left was never acknowledged: the broker is gone
            p.flush(5)
            disk.free()
            b.start()
            got = read_all(b.bootstrap, 2)
            for part, records in got.items():
                offsets = [o for o, _ in records]
                assert offsets == list(range(len(offsets))), f"partition {part}: offsets not contiguous"
                for _, value in records:
                    assert value[:7].decode()[:6].isdigit() and value[6:7] == b"-", f"damaged record {value[:20]!r}"
            found = {v: (part, o) for part, records in got.items() for o, v in records}
            assert len(found) == sum(len(r) for r in got.values()), "a record was stored twice"
            missing = [v[:6] for v, where in acked.items() if found.get(v) != where]
            assert not missing, f"{len(missing)} acknowledged records missing or moved, e.g. {missing[:5]}"
        finally:
            b.kill()


def test_an_idle_broker_halts_when_its_checkpoint_write_fails(tmp_path: Path) -> None:
    """With nothing produced, the periodic recovery-point checkpoint is the first write into a full
    log dir: it fails the dir as any other write does (Kafka: LogManager.checkpointLogRecoveryOffsets
    hands the IOException to the LogDirFailureChannel)."""
    with SmallDisk(tmp_path / "disk", 8) as disk:
        b = BrokerProcess(disk.data_dir, log_path=tmp_path / "broker.log",
                          overrides={"log.flush.offset.checkpoint.interval.ms": "200"})
        b.start()
        try:
            disk.fill()
            deadline = time.monotonic() + 30
            while b.running and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not b.running, "the broker kept running with a full log dir"
            assert HALT_LINE in b.log_text() and "Traceback" not in b.log_text(), b.log_tail()
            disk.free()
            b.start()
        finally:
            b.kill()
