"""queued.max.request.bytes in a cluster: a producer that pipelines acks=all requests must not fill
the request memory pool.

An exhausted pool stops the broker reading every connection, the followers' fetch connections
included, and it is the followers' next fetches that complete acks=all requests (they move the high
watermark). A connection that read ahead without a byte bound (only queued.max.requests frames) let
one librdkafka producer, with a million requests allowed in flight, fill the pool with produce
frames waiting for replication: replication stopped until replica.lag.time.max.ms dropped the
followers from the ISR. A connection now reads ahead at most broker.connection.READ_AHEAD_BYTES.

Real etcd, three real brokers, confluent-kafka.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.cluster_proc import BrokerCluster
from tests.helpers.cluster_state import stop_and_check, wait_full_isr
from tests.helpers.etcd_proc import ETCD_PACKAGE, EtcdProcess
from tests.helpers.tools import require_tool

POOL = 16 << 20  # queued.max.request.bytes: far less than the producer pipelines
RECORDS = 48_000  # x 1 KiB: three times the pool


def test_a_pipelining_acks_all_producer_does_not_starve_the_followers_fetches(tmp_path: Path) -> None:
    require_tool("etcd", shutil.which("etcd") is not None,
                 f"etcd not on PATH (apt-get install {ETCD_PACKAGE}, or `make tools` as root)")
    etcd = EtcdProcess(tmp_path / "etcd")
    etcd.start()
    # replica.lag.time.max.ms well past the test's deadline: a stall is not undone by an ISR shrink.
    cluster = BrokerCluster(etcd, tmp_path, 3, **{"queued.max.request.bytes": str(POOL),
                                                  "replica.lag.time.max.ms": "600000"})
    problems: list[str] = []
    try:
        cluster.start()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        # Four partitions all led by broker 1: one producer connection carries every request.
        admin.create_topics([NewTopic("piped", 4, -1, replica_assignment=[[1, 2, 3]] * 4,
                                      config={"min.insync.replicas": "2"})])["piped"].result(60)
        wait_full_isr(cluster, "piped", 4, 3)
        errors: list = []
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                      "batch.size": 1 << 20, "queue.buffering.max.kbytes": 256 * 1024,
                      "queue.buffering.max.messages": 1_000_000, "message.timeout.ms": 120_000,
                      "on_delivery": lambda err, _msg: err is not None and errors.append(err)})
        value = b"v" * 1024
        for i in range(RECORDS):
            p.produce("piped", value, partition=i % 4)
        p.poll(0)
        left = p.flush(90)
        assert left == 0, f"{left} of {RECORDS} records not acknowledged after 90 s: replication stalled"
        assert errors == []
        del p
    finally:
        problems = stop_and_check(cluster)
        try:
            etcd.stop()
        finally:
            etcd.kill()
    assert not problems, "\n\n".join(problems)
