"""Pipelined Produce in a cluster: a connection's next Produce is appended while the one before it
waits for replication, and every answer still goes out in request order.

Kafka handles one request per connection at a time, so an acks=all producer's throughput per
connection is one request per replication round trip. kbroker appends the next Produce of the same
connection as soon as the previous one's appends are done (broker/connection.py); what it waits for
(the high watermark) is unchanged, and a request of any other API waits for the Produce requests
before it, so requests still take effect, and are answered, in the order sent.

How the test sees it: both followers are frozen (SIGSTOP), so nothing the leader appends can be
replicated; two acks=all Produce requests and an ApiVersions request are sent in one write on one
connection. The second batch must reach the leader's segment file while the first is still
unanswered (before this change it was read only after the first was answered), no answer may come
while the followers are frozen, and once they resume the answers come in request order with the
second batch right after the first.

Real etcd, three real brokers, raw requests encoded by kafka-python (tests/helpers/wire.py).
"""

from __future__ import annotations

import os
import select
import signal
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.producer import ProduceRequest

from storage.batch import build_batch
from tests.helpers.cluster_proc import BrokerCluster
from tests.helpers.cluster_state import checked_cluster, wait_full_isr
from tests.helpers.etcd_proc import EtcdProcess
from tests.helpers.waiting import wait_for
from tests.helpers.wire import RawConnection, encode_request

TOPIC = "piped-produce"
V = 9


def _produce(batch: bytes) -> ProduceRequest:
    P = ProduceRequest.TopicProduceData
    return ProduceRequest(version=V, transactional_id=None, acks=-1, timeout_ms=150_000, topic_data=[
        P(version=V, name=TOPIC, partition_data=[P.PartitionProduceData(version=V, index=0, records=batch)])])


def test_next_produce_is_appended_while_the_previous_waits_and_answers_stay_in_order(
        etcd: EtcdProcess, tmp_path: Path) -> None:
    # Frozen followers must stay in the ISR and registered for the test's length: no ISR shrink,
    # no lease expiry (the cluster helper's 3 s session would end while they are stopped).
    frozen: list[int] = []
    with checked_cluster(etcd, tmp_path, 3, **{"replica.lag.time.max.ms": "600000",
                                               "broker.session.timeout.ms": "60000"}) as cluster:
        try:
            _frozen_followers_hold_both_answers(cluster, frozen)
        finally:
            for node in frozen:
                os.kill(cluster.brokers[node].proc.pid, signal.SIGCONT)


def _frozen_followers_hold_both_answers(cluster: BrokerCluster, frozen: list[int]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, -1, replica_assignment=[[1, 2, 3]],
                                  config={"min.insync.replicas": "2"})])[TOPIC].result(60)
    wait_full_isr(cluster, TOPIC, 1, 3)
    leader = cluster.brokers[1]
    segment = leader.data_dir / f"{TOPIC}-0" / "00000000000000000000.log"
    first = build_batch([(b"a%d" % i, b"first-%d" % i) for i in range(3)])
    second = build_batch([(b"b%d" % i, b"second-%d" % i) for i in range(5)])

    with RawConnection(leader.bootstrap, timeout=180) as conn:
        conn.request(ApiVersionsRequest(version=3, client_software_name="t", client_software_version="1"), 3)
        for node in (2, 3):
            os.kill(cluster.brokers[node].proc.pid, signal.SIGSTOP)
            frozen.append(node)
        # One write, so the broker reads the three requests together (a Produce is pipelined
        # when another request is already there to overlap with it).
        api_versions = ApiVersionsRequest(version=3, client_software_name="t", client_software_version="1")
        corr_first, corr_second, corr_versions = 9001, 9002, 9003
        conn.send_raw(encode_request(_produce(first), V, corr_first)
                      + encode_request(_produce(second), V, corr_second)
                      + encode_request(api_versions, 3, corr_versions))

        wait_for(lambda: segment.exists() and segment.stat().st_size == len(first) + len(second),
                 "both batches in the leader's segment while the first waits for replication", timeout=45)
        readable, _, _ = select.select([conn.sock], [], [], 0.2)
        assert not readable, "an answer came while no follower could have the records"

        for node in frozen:
            os.kill(cluster.brokers[node].proc.pid, signal.SIGCONT)
        frozen.clear()
        # receive() checks each answer's correlation id: request order.
        r1 = conn.receive(_produce(first), V, corr_first).responses[0].partition_responses[0]
        r2 = conn.receive(_produce(second), V, corr_second).responses[0].partition_responses[0]
        r3 = conn.receive(api_versions, 3, corr_versions)
    assert (r1.error_code, r1.base_offset) == (0, 0)
    assert (r2.error_code, r2.base_offset) == (0, 3)
    assert r3.error_code == 0
