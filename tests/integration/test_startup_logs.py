"""What a start logs (issue 18, "Startup and logs"): an empty data dir is a first start, not an
unclean shutdown, and loading partitions logs a summary at INFO rather than one line per partition."""

from __future__ import annotations

import re

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def _start_section(text: str, n: int) -> str:
    return text.split(f"kbroker start #{n}")[-1]


def test_first_start_and_quiet_partition_loading(broker_factory) -> None:
    broker = broker_factory({"offsets.topic.num.partitions": "12"})
    first = _start_section(broker.log_text(), broker.starts)
    assert "(first start)" in first
    assert "unclean" not in first

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("quiet-logs", 30, 1)])["quiet-logs"].result(30)
    created = broker.log_text()
    assert "Created log for quiet-logs-" not in created  # DEBUG now, not 30 INFO lines

    broker.restart()
    again = _start_section(broker.log_text(), broker.starts)
    assert "(clean shutdown)" in again
    assert "Loaded quiet-logs-" not in again  # per-partition lines are DEBUG
    summary = re.search(r"loaded (\d+) partitions of (\d+) topics", again)  # the broker's one summary line
    assert summary is not None and int(summary.group(1)) >= 30


def test_unclean_shutdown_recovery_logs_one_summary(broker_factory) -> None:
    """After kill -9, recovery of each partition's active segment and the producer-state replay
    are DEBUG lines; the log dir gets one INFO summary with the counts (as Kafka's LogManager
    summarises the logs it loaded), not 2-3 INFO lines per partition."""
    broker = broker_factory({"offsets.topic.num.partitions": "2", "transaction.state.log.num.partitions": "2"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("unclean-logs", 8, 1)])["unclean-logs"].result(30)
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(80):
        p.produce("unclean-logs", b"v", partition=i % 8)
    assert p.flush(30) == 0
    del p  # closed before the broker goes away (no librdkafka reconnect noise)
    broker.kill()
    broker.start()
    again = _start_section(broker.log_text(), broker.starts)
    assert "(unclean shutdown)" in again
    info = [line for line in again.splitlines() if " INFO " in line]
    per_partition = [line for line in info if "unclean-logs-" in line]
    assert not per_partition, per_partition
    summary = [line for line in info if re.search(r"Loaded \d+ partitions from ", line)]
    assert len(summary) == 1, info
    m = re.search(r"recovered (\d+) segments of (\d+) partitions, replayed (\d+) batches", summary[0])
    assert m is not None, summary
    # The 8 partitions written to, at least (the internal topics' partitions may add theirs).
    assert int(m.group(2)) >= 8 and int(m.group(1)) >= 8 and int(m.group(3)) >= 8, summary
