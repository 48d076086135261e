"""DeleteRecords on a replicated partition answers once every live replica has dropped the records
(Kafka's DelayedDeleteRecords: the low watermark over the leader and its live followers). Proof: right
after the answer the leader is killed with SIGKILL, and the new leader's earliest offset is already the
requested one. The followers' long poll is 10 s (replica.fetch.wait.max.ms), so without the leader
waking them and waiting for their log start they would still hold the records. Real etcd and three
real brokers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.admin import DeleteRecordsRequest

from protocol.errors import ErrorCode
from storage.batch import build_batch
from tests.helpers.cluster_proc import BrokerCluster
from tests.helpers.cluster_state import (
    checked_cluster,
    list_offset,
    live,
    produce_raw,
    view,
    wait_full_isr,
    wait_until,
)
from tests.helpers.etcd_proc import EtcdProcess
from tests.helpers.wire import send_request

TOPIC = "trimmed"
EARLIEST = -2


@pytest.fixture
def cluster(etcd: EtcdProcess, tmp_path: Path) -> Iterator[BrokerCluster]:
    with checked_cluster(etcd, tmp_path, 3, **{"replica.fetch.wait.max.ms": "10000",
                                            "broker.session.timeout.ms": "3000"}) as c:
        yield c


def delete_records(broker, offset: int, timeout_ms: int = 30_000) -> tuple[int, int]:  # noqa: ANN001
    R = DeleteRecordsRequest
    T = R.DeleteRecordsTopic
    req = R(version=2, timeout_ms=timeout_ms, topics=[
        T(version=2, name=TOPIC, partitions=[T.DeleteRecordsPartition(version=2, partition_index=0, offset=offset)])])
    p = send_request(broker.bootstrap, req, 2, timeout=timeout_ms / 1000 + 10).topics[0].partitions[0]
    return p.error_code, p.low_watermark


def test_delete_records_waits_for_the_followers(cluster: BrokerCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2",
                                                       "segment.bytes": "1024"})])[TOPIC].result(60)
    wait_full_isr(cluster, TOPIC, 1, 3)
    first = view(cluster, TOPIC)[0]
    leader = cluster.brokers[first.leader]
    for i in range(10):
        code, _ = produce_raw(leader, TOPIC, 0, bytes(build_batch([(b"k", b"v%d" % i)] * 10)), acks=-1)
        assert code == 0
    # Every replica has all 100 records and knows the high watermark before the deletion.
    wait_full_isr(cluster, TOPIC, 1, 3)

    assert delete_records(leader, 60) == (ErrorCode.NONE, 60)
    leader.kill()
    new = wait_until(lambda: (p := view(cluster, TOPIC, via=live(cluster)[0])[0]).leader not in (-1, first.leader)
                     and p, "a new leader after the kill")
    new_leader = cluster.brokers[new.leader]
    # The first answer of the new leader already has the records gone.
    code, earliest = wait_until(lambda: (r := list_offset(new_leader, TOPIC, 0, EARLIEST))[0] == 0 and r,
                                "ListOffsets EARLIEST on the new leader")
    assert earliest == 60
    # Out of range above the high watermark, as in Kafka.
    assert delete_records(new_leader, 10_000)[0] == ErrorCode.OFFSET_OUT_OF_RANGE
