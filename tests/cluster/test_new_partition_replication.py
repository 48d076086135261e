"""A partition a broker starts leading is fetched by its followers at once, not after their fetch
parked on that leader returns.

A follower adds a new partition to its next fetch from the leader; while the leader has nothing
else to send, the fetch in flight stays parked for replica.fetch.wait.max.ms, and until the
followers fetch the partition its high watermark cannot move, so the first acks=all write to a new
topic waited out that long poll (430-1,000 ms with the default 500 ms, measured). The leader now
ends the parked fetches of the new partition's followers and keeps their polls brief until they
name it (broker.fetch_sessions.FetchSessionCache.expect).

How the test sees it: replica.fetch.wait.max.ms is 60 s, and a first topic led by broker 1 makes
both followers park a fetch there. A second topic is then created on the same three brokers and a
record is produced to it with acks=all: it must be acknowledged within 20 s, which the old code
could not do before the followers' 60 s long polls ended.

Real etcd, three real brokers, confluent-kafka.
"""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.cluster_proc import BrokerCluster
from tests.helpers.cluster_state import checked_cluster, wait_full_isr
from tests.helpers.etcd_proc import EtcdProcess


def test_first_acks_all_write_to_a_new_topic_does_not_wait_for_the_followers_long_poll(
        etcd: EtcdProcess, tmp_path: Path) -> None:
    overrides = {"replica.fetch.wait.max.ms": "60000",
                 # No ISR shrink during the test: the old code's write would otherwise be acknowledged
                 # once the followers left the new partition's ISR.
                 "replica.lag.time.max.ms": "600000"}
    with checked_cluster(etcd, tmp_path, 3, **overrides) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0,
                      "message.timeout.ms": 120_000})
        try:
            _first_write_is_not_held(cluster, admin, p)
        finally:
            p.purge()
            p.flush(0)
            del p, admin


def _first_write_is_not_held(cluster: BrokerCluster, admin: AdminClient, p: Producer) -> None:
    admin.create_topics([NewTopic("parked", 1, -1, replica_assignment=[[1, 2, 3]])])["parked"].result(60)
    wait_full_isr(cluster, "parked", 1, 3)
    # One write replicated: both followers fetch from broker 1 and then park there (nothing moves).
    p.produce("parked", b"first", partition=0)
    assert p.flush(60) == 0

    admin.create_topics([NewTopic("fresh", 1, -1, replica_assignment=[[1, 2, 3]])])["fresh"].result(60)
    wait_full_isr(cluster, "fresh", 1, 3)
    delivered: list[object] = []
    p.produce("fresh", b"new", partition=0, on_delivery=lambda err, msg: delivered.append(err or msg.offset()))
    left = p.flush(20)
    assert left == 0 and delivered == [0], f"first write to the new topic not acknowledged in 20 s: {delivered}"
