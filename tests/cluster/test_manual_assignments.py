"""Issue 33 item 2: manual replica assignments of CreateTopics and CreatePartitions (3 real brokers, etcd).

Found by librdkafka's admin test "CreatePartitions with replicas set". Through confluent-kafka's
AdminClient (NewTopic / NewPartitions with replica_assignment) the partitions land on the brokers
given, in the order given (Metadata's replica lists and leaders, and the partition directories exist
on those brokers only). Assignments Kafka's controller refuses answer INVALID_REPLICA_ASSIGNMENT with
its messages (ReplicationControlManager) and create nothing: a count of CreatePartitions assignments
other than the partitions added, a broker not registered or listed twice, a replica count other than
the topic's, an empty list, a CreateTopics partition index given twice or not 0..n-1; with
assignments, CreateTopics' num_partitions / replication_factor other than -1 are INVALID_REQUEST. The
raw requests cover what librdkafka refuses to send. ("Every replica fenced" needs a broker that is
registered but fenced: tests/unit/test_placement_manual.py.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka.protocol.admin import CreatePartitionsRequest, CreateTopicsRequest

from protocol.errors import ErrorCode
from tests.helpers.cluster_proc import BrokerCluster
from tests.helpers.cluster_state import checked_cluster, topic_partitions, wait_until
from tests.helpers.etcd_proc import EtcdProcess
from tests.helpers.wire import send_request

TIMEOUT = 60
INVALID = KafkaError.INVALID_REPLICA_ASSIGNMENT


@pytest.fixture
def cluster(etcd: EtcdProcess, tmp_path: Path) -> Iterator[BrokerCluster]:
    with checked_cluster(etcd, tmp_path, 3) as c:
        yield c


def error_of(future) -> tuple[int, str]:
    with pytest.raises(KafkaException) as e:
        future.result(TIMEOUT)
    err = e.value.args[0]
    return err.code(), err.str()


def layout(cluster: BrokerCluster, topic: str) -> dict[int, tuple[int, ...]]:
    """Partition -> replicas as every broker's Metadata shows them (the same on all)."""
    views = [{p: i.replicas for p, i in topic_partitions(b, topic).items()} for b in cluster.brokers.values()]
    assert all(v == views[0] for v in views), views
    return views[0]


def dirs(cluster: BrokerCluster, topic: str) -> dict[int, set[int]]:
    """Partition -> the brokers holding its directory."""
    out: dict[int, set[int]] = {}
    for node, b in cluster.brokers.items():
        for d in b.data_dir.glob(f"{topic}-*"):
            out.setdefault(int(d.name.rpartition("-")[2]), set()).add(node)
    return out


def create_topics_raw(cluster: BrokerCluster, name: str, assignments: list[tuple[int, list[int]]], *,
                      partitions: int = -1, rf: int = -1) -> tuple[int, str | None]:
    T = CreateTopicsRequest.CreatableTopic
    req = CreateTopicsRequest(version=5, timeout_ms=30_000, validate_only=False, topics=[T(
        version=5, name=name, num_partitions=partitions, replication_factor=rf, configs=[],
        assignments=[T.CreatableReplicaAssignment(version=5, partition_index=i, broker_ids=r)
                     for i, r in assignments])])
    (t,) = send_request(cluster.brokers[1].bootstrap, req, 5, timeout=TIMEOUT).topics
    return t.error_code, t.error_message


def create_partitions_raw(cluster: BrokerCluster, name: str, count: int,
                          assignments: list[list[int]]) -> tuple[int, str | None]:
    T = CreatePartitionsRequest.CreatePartitionsTopic
    req = CreatePartitionsRequest(version=1, timeout_ms=30_000, validate_only=False, topics=[T(
        version=1, name=name, count=count,
        assignments=[T.CreatePartitionsAssignment(version=1, broker_ids=r) for r in assignments])])
    (r,) = send_request(cluster.brokers[2].bootstrap, req, 1, timeout=TIMEOUT).results
    return r.error_code, r.error_message


def test_manual_assignments_are_used_and_checked(cluster: BrokerCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    given = [[3, 1], [1, 2], [2, 3]]
    admin.create_topics([NewTopic("man", 3, replica_assignment=given)], operation_timeout=TIMEOUT)["man"].result(TIMEOUT)
    wait_until(lambda: layout(cluster, "man") == {0: (3, 1), 1: (1, 2), 2: (2, 3)}, "the given replicas of man")
    assert {p: i.leader for p, i in topic_partitions(cluster.brokers[1], "man").items()} == {0: 3, 1: 1, 2: 2}
    wait_until(lambda: dirs(cluster, "man") == {0: {1, 3}, 1: {1, 2}, 2: {2, 3}}, "man's directories")

    # CreatePartitions "with replicas set" (librdkafka's admin test): the new partitions as given.
    admin.create_partitions([NewPartitions("man", 5, replica_assignment=[[2, 1], [3, 2]])],
                            operation_timeout=TIMEOUT)["man"].result(TIMEOUT)
    wait_until(lambda: layout(cluster, "man") == {0: (3, 1), 1: (1, 2), 2: (2, 3), 3: (2, 1), 4: (3, 2)},
               "the given replicas of the new partitions")
    wait_until(lambda: dirs(cluster, "man") == {0: {1, 3}, 1: {1, 2}, 2: {2, 3}, 3: {1, 2}, 4: {2, 3}},
               "the new partitions' directories")

    def grow(assignment: list[list[int]], count: int = 6, *, validate_only: bool = False) -> tuple[int, str]:
        fut = admin.create_partitions([NewPartitions("man", count, replica_assignment=assignment)],
                                      operation_timeout=TIMEOUT, validate_only=validate_only)["man"]
        return error_of(fut)

    assert grow([[1, 9]]) == (INVALID, "The manual partition assignment includes broker 9, but no such broker is "
                                       "registered.")
    assert grow([[2, 2]]) == (INVALID, "The manual partition assignment includes the broker 2 more than once.")
    assert grow([[1, 2, 3]]) == (INVALID, "The manual partition assignment includes a partition with 3 replica(s), "
                                          "but this is not consistent with previous partitions, which have 2 "
                                          "replica(s).")
    assert grow([[2, 2]], validate_only=True)[0] == INVALID
    # librdkafka refuses to send these two itself: raw requests.
    assert create_partitions_raw(cluster, "man", 7, [[1, 2]]) == (
        INVALID, "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.")
    assert create_partitions_raw(cluster, "man", 6, [[]]) == (
        INVALID, "The manual partition assignment includes an empty replica list.")
    assert layout(cluster, "man") == {0: (3, 1), 1: (1, 2), 2: (2, 3), 3: (2, 1), 4: (3, 2)}
    assert set(dirs(cluster, "man")) == {0, 1, 2, 3, 4}

    # CreateTopics' assignments, checked the same way; nothing is created.
    def create(name: str, assignment: list[list[int]]) -> tuple[int, str]:
        return error_of(admin.create_topics([NewTopic(name, len(assignment), replica_assignment=assignment)],
                                            operation_timeout=TIMEOUT)[name])

    assert create("bad1", [[1, 2], [4, 1]]) == (INVALID, "The manual partition assignment includes broker 4, but "
                                                         "no such broker is registered.")
    assert create("bad2", [[1, 3, 1]]) == (INVALID, "The manual partition assignment includes the broker 1 more "
                                                    "than once.")
    assert create("bad3", [[1, 2], [3]]) == (INVALID, "The manual partition assignment includes a partition with 1 "
                                                      "replica(s), but this is not consistent with previous "
                                                      "partitions, which have 2 replica(s).")
    assert create_topics_raw(cluster, "bad4", [(0, [1]), (0, [2])]) == (
        INVALID, "Found multiple manual partition assignments for partition 0")
    assert create_topics_raw(cluster, "bad5", [(0, [1]), (2, [2])]) == (
        INVALID, "partitions should be a consecutive 0-based integer sequence")
    assert create_topics_raw(cluster, "bad6", [(0, [])]) == (
        INVALID, "The manual partition assignment includes an empty replica list.")
    assert create_topics_raw(cluster, "bad7", [(0, [1])], rf=1) == (
        ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, but replication factor was not "
                                   "set to -1.")
    assert create_topics_raw(cluster, "bad8", [(0, [1])], partitions=1) == (
        ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, but numPartitions was not set "
                                   "to -1.")
    for name in [f"bad{i}" for i in range(1, 9)]:
        assert all(topic_partitions(b, name) == {} for b in cluster.brokers.values()), name
        assert not any(any(b.data_dir.glob(f"{name}-*")) for b in cluster.brokers.values()), name
