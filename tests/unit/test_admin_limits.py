"""Kafka's per-request bounds on admin work, kbroker's partition total, and the stop deadline."""

from __future__ import annotations

import subprocess
import sys

import pytest

from broker.admin_limits import (
    MAX_RECORDS_PER_USER_OP,
    TOO_MANY_PARTITIONS,
    TOO_MANY_RECORDS,
    check_broker_partitions,
    check_records,
    check_requested_partitions,
    create_topic_records,
    requested_partitions,
)
from protocol.errors import ErrorCode, KafkaError
from tests.helpers.broker_proc import REPO_ROOT


def test_a_created_topic_writes_one_record_per_topic_config_and_partition() -> None:
    assert create_topic_records(1, 0) == 2
    assert create_topic_records(9999, 0) == MAX_RECORDS_PER_USER_OP
    assert create_topic_records(9998, 1) == MAX_RECORDS_PER_USER_OP
    check_records(create_topic_records(9999, 0))  # the largest creation Kafka accepts
    for total in (create_topic_records(10000, 0), create_topic_records(9999, 1),
                  create_topic_records(1, 0) + create_topic_records(9998, 0)):
        with pytest.raises(KafkaError) as e:
            check_records(total)
        assert (e.value.code, e.value.message) == (ErrorCode.POLICY_VIOLATION, TOO_MANY_RECORDS)


def test_requested_partitions_count_as_kafka_counts_them() -> None:
    assert requested_partitions(-1, 0, 3) == 3  # the broker default
    assert requested_partitions(0, 0, 3) == 0 and requested_partitions(-5, 0, 3) == 0
    assert requested_partitions(-1, 4, 3) == 4  # manual assignments count one each
    check_requested_partitions([5000, 5000])
    with pytest.raises(KafkaError) as e:
        check_requested_partitions([5000, 5001])
    assert (e.value.code, e.value.message) == (ErrorCode.POLICY_VIOLATION, TOO_MANY_PARTITIONS)


def test_broker_partition_limit() -> None:
    check_broker_partitions(90, 10, 100)
    with pytest.raises(KafkaError) as e:
        check_broker_partitions(90, 11, 100)
    assert e.value.code == ErrorCode.POLICY_VIOLATION
    assert "kbroker.max.partitions=100" in e.value.message


def test_stop_deadline_exits_the_process_whatever_it_is_doing() -> None:
    """The deadline runs in its own thread: a main thread stuck in a blocking call still ends."""
    code = ("import logging, sys, time\n"
            "from broker.serve import setup_logging, _shutdown_deadline\n"
            "setup_logging('INFO')\n"
            "_shutdown_deadline(200, 'SIGTERM')\n"
            "time.sleep(60)\n"
            "sys.exit(0)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert "shutdown did not finish within 200 ms of SIGTERM" in proc.stderr
