"""Bounds on how much one admin request may create: Kafka's controller limits plus kbroker's
per-broker partition total.

Kafka's KRaft controller (ReplicationControlManager, QuorumController) refuses, with
POLICY_VIOLATION and for every topic of the request:
- CreateTopics whose requested partitions add up to more than ``MAX_PARTITIONS_PER_BATCH``
  (counted before any other check: ``num_partitions`` -1 counts ``num.partitions``, other
  non-positive counts nothing, manual assignments count one each): "Excessively large number
  of partitions per request.";
- an operation that would write more than ``MAX_RECORDS_PER_USER_OP`` metadata records (its
  records go into a BoundedList whose overflow becomes "Unable to perform excessively large
  batch operation."). A created topic writes one TopicRecord, one ConfigRecord per config it
  sets and one PartitionRecord per partition; topics that fail their own checks write nothing.
  So one topic of 9,999 partitions and no configs is the largest creation Kafka accepts.
CreatePartitions writes one PartitionRecord per added partition into the same kind of list.

kbroker extension: ``kbroker.max.partitions`` bounds the partitions one broker holds, since each
costs a directory, open files and memory; internal topics are exempt (their sizes are configs).
"""

from __future__ import annotations

from collections.abc import Iterable

from protocol.errors import ErrorCode, KafkaError

MAX_RECORDS_PER_USER_OP = 10_000
MAX_PARTITIONS_PER_BATCH = 10_000

TOO_MANY_RECORDS = "Unable to perform excessively large batch operation."
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."
MAX_PARTITIONS_CONFIG = "kbroker.max.partitions"


def requested_partitions(num_partitions: int, num_assignments: int, default_partitions: int) -> int:
    """One topic's share of Kafka's validateTotalNumberOfPartitions."""
    if num_assignments:
        return num_assignments
    if num_partitions == -1:
        return default_partitions
    return max(num_partitions, 0)


def check_requested_partitions(counts: Iterable[int]) -> None:
    """Kafka's pre-check over a whole CreateTopics request (``counts`` from requested_partitions)."""
    if sum(counts) > MAX_PARTITIONS_PER_BATCH:
        raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_MANY_PARTITIONS)


def create_topic_records(num_partitions: int, num_configs: int) -> int:
    """Metadata records Kafka writes for one created topic."""
    return 1 + num_configs + num_partitions


def check_records(total: int) -> None:
    """The BoundedList rule: at most MAX_RECORDS_PER_USER_OP records per request."""
    if total > MAX_RECORDS_PER_USER_OP:
        raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_MANY_RECORDS)


def check_broker_partitions(current: int, adding: int, limit: int) -> None:
    """kbroker.max.partitions: refuse a creation that would take this broker past ``limit``."""
    if current + adding > limit:
        raise KafkaError(ErrorCode.POLICY_VIOLATION,
                         f"Creating {adding} partition(s) would bring this broker to {current + adding} "
                         f"partitions, above {MAX_PARTITIONS_CONFIG}={limit} (it holds {current}).")
