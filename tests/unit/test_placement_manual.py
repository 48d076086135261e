"""Manual replica assignments (cluster/placement.py): Kafka's ReplicationControlManager checks, as pure logic.

The broker-level behaviour (3 real brokers, confluent-kafka) is in tests/cluster/test_manual_assignments.py;
here every rule once, including the one a test cluster cannot reach on purpose: every replica of a
partition registered but fenced or in controlled shutdown.
"""

from __future__ import annotations

import pytest

from cluster.placement import check_added_partitions_assignment, check_new_topic_assignment, check_replicas
from protocol.errors import ErrorCode, KafkaError

REGISTERED = {1, 2, 3}


def _message(fn, *args) -> str:
    with pytest.raises(KafkaError) as e:
        fn(*args)
    assert e.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    return e.value.message


def test_replica_list_rules_in_kafkas_order() -> None:
    check_replicas([3, 1], REGISTERED, 2)
    check_replicas([3, 1, 2], REGISTERED, None)
    assert _message(check_replicas, [], REGISTERED, None) == \
        "The manual partition assignment includes an empty replica list."
    # Sorted first, as Kafka: the smallest unregistered id is named, a duplicate is found after it.
    assert _message(check_replicas, [7, 5, 5], REGISTERED, None) == \
        "The manual partition assignment includes broker 5, but no such broker is registered."
    assert _message(check_replicas, [2, 1, 2], REGISTERED, None) == \
        "The manual partition assignment includes the broker 2 more than once."
    assert _message(check_replicas, [1], REGISTERED, 2) == (
        "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent with "
        "previous partitions, which have 2 replica(s).")


def test_new_topic_assignment() -> None:
    assert check_new_topic_assignment([(1, [2, 3]), (0, [1, 2])], REGISTERED, REGISTERED) == {0: [1, 2], 1: [2, 3]}
    assert _message(check_new_topic_assignment, [(0, [1]), (0, [2])], REGISTERED, REGISTERED) == \
        "Found multiple manual partition assignments for partition 0"
    assert _message(check_new_topic_assignment, [(0, [1]), (2, [2])], REGISTERED, REGISTERED) == \
        "partitions should be a consecutive 0-based integer sequence"
    assert _message(check_new_topic_assignment, [(0, [1, 2]), (1, [3])], REGISTERED, REGISTERED).startswith(
        "The manual partition assignment includes a partition with 1 replica(s)")
    # Registered, but none of the replicas active (fenced or in controlled shutdown).
    assert _message(check_new_topic_assignment, [(0, [1]), (1, [2])], REGISTERED, {1}) == \
        "All brokers specified in the manual partition assignment for partition 1 are fenced or in controlled shutdown."
    assert check_new_topic_assignment([(0, [2, 1])], REGISTERED, {1}) == {0: [2, 1]}  # one active is enough


def test_added_partitions_assignment() -> None:
    assert check_added_partitions_assignment([[2, 1], [3, 2]], 2, 3, 2, REGISTERED, REGISTERED) == [[2, 1], [3, 2]]
    assert _message(check_added_partitions_assignment, [[1, 2]], 2, 3, 2, REGISTERED, REGISTERED) == \
        "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."
    assert _message(check_added_partitions_assignment, [[1, 2], [3, 1]], 2, 3, 2, REGISTERED, {2}) == \
        "All brokers specified in the manual partition assignment for partition 4 are fenced or in controlled shutdown."
    assert _message(check_added_partitions_assignment, [[1, 2, 3]], 1, 3, 2, REGISTERED, REGISTERED).endswith(
        "which have 2 replica(s).")
    # A single node is a one-broker cluster.
    assert check_added_partitions_assignment([[1]], 1, 1, 1, {1}, {1}) == [[1]]
    assert _message(check_added_partitions_assignment, [[2]], 1, 1, 1, {1}, {1}) == \
        "The manual partition assignment includes broker 2, but no such broker is registered."
