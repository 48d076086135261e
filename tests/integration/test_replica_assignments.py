"""Issue 33 item 2 on a single node: manual replica assignments checked as for a one-broker cluster.

Through confluent-kafka's AdminClient (NewTopic / NewPartitions with replica_assignment): an
assignment naming only this broker (node id 1) is accepted and its partitions are created here;
another id is not registered, a repeated id is listed twice, and a CreatePartitions assignment count
other than the partitions added is refused: INVALID_REPLICA_ASSIGNMENT, with Kafka's messages, and
nothing is created. (The cluster behaviour: tests/cluster/test_manual_assignments.py.)
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

TIMEOUT = 30
INVALID = KafkaError.INVALID_REPLICA_ASSIGNMENT


def _error(future) -> tuple[int, str]:
    with pytest.raises(KafkaException) as e:
        future.result(TIMEOUT)
    return e.value.args[0].code(), e.value.args[0].str()


def _partitions(admin: AdminClient, topic: str) -> dict[int, list[int]]:
    # All topics: asking for one by name would auto-create it (auto.create.topics.enable in tests).
    md = admin.list_topics(timeout=TIMEOUT).topics.get(topic)
    return {} if md is None else {p: list(m.replicas) for p, m in md.partitions.items()}


def test_single_node_checks_manual_assignments(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("s", 2, replica_assignment=[[1], [1]])])["s"].result(TIMEOUT)
    assert _partitions(admin, "s") == {0: [1], 1: [1]}
    admin.create_partitions([NewPartitions("s", 3, replica_assignment=[[1]])])["s"].result(TIMEOUT)
    assert _partitions(admin, "s") == {0: [1], 1: [1], 2: [1]}
    assert sorted(d.name for d in broker.data_dir.glob("s-*")) == ["s-0", "s-1", "s-2"]

    def grow(assignment: list[list[int]], count: int = 4) -> tuple[int, str]:
        return _error(admin.create_partitions([NewPartitions("s", count, replica_assignment=assignment)])["s"])

    assert grow([[2]]) == (INVALID, "The manual partition assignment includes broker 2, but no such broker is "
                                    "registered.")
    assert grow([[1, 1]]) == (INVALID, "The manual partition assignment includes the broker 1 more than once.")
    assert grow([[1], [1]], 6) == (INVALID, "Attempted to add 3 additional partition(s), but only 2 assignment(s) "
                                            "were specified.")
    assert _error(admin.create_topics([NewTopic("t", 1, replica_assignment=[[3]])])["t"]) == (
        INVALID, "The manual partition assignment includes broker 3, but no such broker is registered.")
    assert _partitions(admin, "s") == {0: [1], 1: [1], 2: [1]} and _partitions(admin, "t") == {}
    assert not any(broker.data_dir.glob("t-*")) and not (broker.data_dir / "s-3").exists()
