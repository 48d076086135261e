"""A follower that learns of a new partition before its leader does still replicates it at once.

Every broker applies the same metadata from its etcd watch, in its own time. A follower that is
first sends a fetch naming the partition to a leader that does not lead it yet, and is answered
NOT_LEADER_OR_FOLLOWER. Two things then held a new topic's first acks=all write (500-1,000 ms
measured on the first topic of a fresh cluster, with the default timings):
- the follower waited replica.fetch.backoff.ms before naming the partition again; it now waits
  10 ms at first, doubling up to the backoff (broker/replication/fetcher.py);
- the leader's fetch session held the partition from that first fetch, but an append to it did not
  end a fetch parked there until the fetch was answered, up to replica.fetch.wait.max.ms; the
  session now watches the partition from the first fetch that reads it (broker/handlers/fetch.py).

How the test makes the follower first: the leader-to-be is frozen (SIGSTOP) while the controller
creates the topic, until both followers' fetches wait in its socket buffers; then it runs again.
With replica.fetch.backoff.ms and replica.fetch.wait.max.ms at 60 s, a record produced with
acks=all must be acknowledged within 20 s: the old code waited out one or the other.

Real etcd, three real brokers, confluent-kafka.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker_proc import BrokerProcess
from tests.helpers.cluster_state import checked_cluster, topic_partitions, wait_full_isr, wait_until
from tests.helpers.etcd_proc import EtcdProcess


def _unread_connections(port: int) -> int:
    """Established TCP connections to 127.0.0.1:``port`` with bytes its process has not read yet."""
    n = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            local, state, queues = fields[1], fields[3], fields[4]
            if state == "01" and int(local.split(":")[1], 16) == port and int(queues.split(":")[1], 16) > 0:
                n += 1
    return n


def _knows_topic(broker: BrokerProcess, topic: str, leader: int) -> bool:
    with contextlib.suppress(Exception):
        parts = topic_partitions(broker, topic)
        return bool(parts) and parts[0].leader == leader
    return False


def test_first_acks_all_write_when_the_followers_know_the_partition_before_its_leader(
        etcd: EtcdProcess, tmp_path: Path) -> None:
    overrides = {"replica.fetch.wait.max.ms": "60000", "replica.fetch.backoff.ms": "60000",
                 # No ISR shrink during the test: the old code's write would otherwise be acknowledged
                 # once the followers left the new partition's ISR.
                 "replica.lag.time.max.ms": "600000"}
    with checked_cluster(etcd, tmp_path, 3, **overrides) as cluster:
        probe = AdminClient({"bootstrap.servers": cluster.bootstrap})
        controller = probe.describe_cluster(request_timeout=30).result(60).controller.id
        del probe
        leader = next(n for n in sorted(cluster.brokers) if n != controller)
        followers = [n for n in sorted(cluster.brokers) if n != leader]
        lb = cluster.brokers[leader]
        assert lb.proc is not None
        admin = AdminClient({"bootstrap.servers": cluster.brokers[controller].bootstrap})
        os.kill(lb.proc.pid, signal.SIGSTOP)
        try:
            admin.create_topics([NewTopic("ahead", 1, -1, replica_assignment=[[leader, *followers]])]
                                )["ahead"].result(60)
            for n in followers:
                wait_until(lambda n=n: _knows_topic(cluster.brokers[n], "ahead", leader),
                           f"broker {n} knows the new partition")
            # Both followers' first fetches are sent and wait, unread, on the frozen leader.
            wait_until(lambda: _unread_connections(lb.port) >= len(followers), "the followers' fetches queued")
        finally:
            os.kill(lb.proc.pid, signal.SIGCONT)
        wait_full_isr(cluster, "ahead", 1, 3)
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0,
                      "message.timeout.ms": 120_000})
        try:
            delivered: list[object] = []
            p.produce("ahead", b"first", partition=0,
                      on_delivery=lambda err, msg: delivered.append(err or msg.offset()))
            left = p.flush(20)
            assert left == 0 and delivered == [0], f"first write not acknowledged in 20 s: {delivered}"
        finally:
            p.purge()
            p.flush(0)
            del p, admin
