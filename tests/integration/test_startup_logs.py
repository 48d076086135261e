"""What a start logs (issue 18, "Startup and logs"): an empty data dir is a first start, not an
unclean shutdown, and loading partitions logs a summary at INFO rather than one line per partition."""

from __future__ import annotations

import re

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
