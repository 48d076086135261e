"""Issue 14, acceptance 1: a replicated 3-broker cluster serves the stock clients.

One real etcd and three real brokers for the module. Each client (confluent-kafka, kafka-python,
aiokafka, kcat, kafkajs) gets its own topic of 6 partitions, RF=3, min.insync.replicas=2, created
with the full ISR, and runs the produce/consume part of the tests/compat/ scenario against it
(tests/compat/scenario.py records and checker, with 6 partitions and fewer records to keep the
module well under 90 s): acks=all produce through the bootstrap list of the 3 brokers, read back
everything exactly once and in order. Afterwards, for each topic: `kcat -L` shows 3 brokers, leaders
spread over all three and full ISRs; every partition's high watermark is the consumed end; and up
to that high watermark each partition's batches are byte-identical on all 3 replicas
(tests/helpers/replica_compare.py, read from the brokers' data dirs).

The compat modules' own test functions are not reused as they are: they create their topics with
RF=1 and 3 partitions. kafkajs' scenario.js is reused (its produce step finds the topic already
created with RF=3 and leaves it), and so are the compat scenario's records and checker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.compat.rdkafka_io import consume_all
from tests.compat.rdkafka_io import produce as rdkafka_produce
from tests.compat.scenario import Consumed, Record, base_timestamp, check_consumed, end_offsets, make_records
from tests.helpers.cluster_proc import BrokerCluster
from tests.helpers.cluster_state import (
    assert_partition_replicas_identical,
    high_watermarks,
    stop_and_check,
    wait_full_isr,
)
from tests.helpers.etcd_proc import ETCD_PACKAGE, EtcdProcess
from tests.helpers.tools import require_tool

PARTITIONS = 6
RF = 3
N_RECORDS = 2_000  # per client; 6 partitions x 3 replicas x 5 clients on 2 shared cores
TOPIC_CONFIG = {"min.insync.replicas": "2", "retention.ms": "86400000"}
TIMEOUT = 90
KCAT = shutil.which("kcat")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    require_tool("etcd", shutil.which("etcd") is not None,
                 f"etcd not on PATH (apt-get install {ETCD_PACKAGE}, or `make tools` as root)")
    base = tmp_path_factory.mktemp("replicated")
    etcd = EtcdProcess(base / "etcd")
    etcd.start()
    c = BrokerCluster(etcd, base, 3, **{"replica.fetch.backoff.ms": "200"})
    problems: list[str] = []
    try:
        c.start()
        yield c
    finally:
        problems = stop_and_check(c)
        try:
            etcd.stop()
        finally:
            etcd.kill()
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


def create_topic(cluster: BrokerCluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    fs = admin.create_topics([NewTopic(topic, PARTITIONS, RF, config=TOPIC_CONFIG)],
                             operation_timeout=60, request_timeout=60)
    fs[topic].result(TIMEOUT)
    wait_full_isr(cluster, topic, PARTITIONS, RF)


def check_replicated(cluster: BrokerCluster, topic: str, records: list[Record], consumed: list[Consumed],
                     *, check_timestamps: bool = True) -> None:
    """The scenario's checks with 6 partitions, then metadata (kcat -L), high watermarks and replicas."""
    by_partition = check_consumed(records, consumed, partitions=PARTITIONS, check_timestamps=check_timestamps)
    ends = end_offsets(by_partition)

    require_tool("kcat", KCAT is not None, "kcat not on PATH (apt-get install kcat, or `make tools` as root)")
    meta = json.loads(kcat(cluster.bootstrap, "-L", "-J", "-t", topic))
    assert sorted(b["id"] for b in meta["brokers"]) == [1, 2, 3]
    [t] = meta["topics"]
    assert len(t["partitions"]) == PARTITIONS
    assert {p["leader"] for p in t["partitions"]} == {1, 2, 3}, "leaders not spread over the 3 brokers"
    for p in t["partitions"]:
        assert sorted(r["id"] for r in p["replicas"]) == [1, 2, 3], p
        assert sorted(r["id"] for r in p["isrs"]) == [1, 2, 3], p

    assert high_watermarks(cluster, topic, range(PARTITIONS)) == ends
    for p in range(PARTITIONS):
        hw, batches = assert_partition_replicas_identical(cluster, topic, p)
        assert hw == ends[p] and batches > 0


def kcat(bootstrap: str, *args: str) -> str:
    proc = subprocess.run([KCAT, "-b", bootstrap, *args], capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, f"kcat {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}"
    return proc.stdout


def test_confluent_kafka(cluster: BrokerCluster) -> None:
    topic = "repl-confluent"
    create_topic(cluster, topic)
    records = make_records("confluent", N_RECORDS, base_ts=base_timestamp())
    rdkafka_produce(cluster.bootstrap, topic, records, extra={"enable.idempotence": True})
    consumed = consume_all(cluster.bootstrap, topic, PARTITIONS, len(records), timeout=TIMEOUT)
    check_replicated(cluster, topic, records, consumed)


def test_kafka_python(cluster: BrokerCluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = "repl-kafka-python"
    create_topic(cluster, topic)
    records = make_records("kafka-python", N_RECORDS, base_ts=base_timestamp())
    bootstrap = cluster.bootstrap.split(",")
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, enable_idempotence=True)
    try:
        futures = [producer.send(topic, key=r.key, value=r.value, headers=list(r.headers), timestamp_ms=r.timestamp)
                   for r in records]
        producer.flush(TIMEOUT)
        for f in futures:
            f.get(TIMEOUT)
    finally:
        producer.close(TIMEOUT)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", request_timeout_ms=TIMEOUT * 1000)
    consumed: list[Consumed] = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + TIMEOUT
        while len(consumed) < len(records) and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=500, max_records=5000).items():
                consumed += [Consumed(tp.partition, m.offset, m.key, m.value, tuple(m.headers), m.timestamp)
                             for m in msgs]
    finally:
        consumer.close()
    check_replicated(cluster, topic, records, consumed)


def test_aiokafka(cluster: BrokerCluster) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = "repl-aiokafka"
    create_topic(cluster, topic)
    records = make_records("aiokafka", N_RECORDS, base_ts=base_timestamp())

    async def run() -> list[Consumed]:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5,
                                    enable_idempotence=True)
        await producer.start()
        try:
            futures = [await producer.send(topic, key=r.key, value=r.value, headers=list(r.headers),
                                           timestamp_ms=r.timestamp) for r in records]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="earliest", request_timeout_ms=TIMEOUT * 1000)
        await consumer.start()
        consumed: list[Consumed] = []
        try:
            consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
            await consumer.seek_to_beginning()
            deadline = time.monotonic() + TIMEOUT
            while len(consumed) < len(records) and time.monotonic() < deadline:
                for tp, msgs in (await consumer.getmany(timeout_ms=500, max_records=5000)).items():
                    consumed += [Consumed(tp.partition, m.offset, m.key, m.value, tuple(m.headers), m.timestamp)
                                 for m in msgs]
        finally:
            await consumer.stop()
        return consumed

    consumed = asyncio.run(asyncio.wait_for(run(), TIMEOUT * 2))
    check_replicated(cluster, topic, records, consumed)


def test_kcat(cluster: BrokerCluster, tmp_path: Path) -> None:
    require_tool("kcat", KCAT is not None, "kcat not on PATH (apt-get install kcat, or `make tools` as root)")
    topic = "repl-kcat"
    create_topic(cluster, topic)
    headers = (("src", b"kcat"), ("empty", b""))
    records = [dataclasses.replace(r, headers=headers) for r in make_records("kcat", N_RECORDS, with_headers=False)]
    path = tmp_path / "records.txt"
    path.write_bytes(b"".join(r.key + b":" + r.value + b"\n" for r in records))
    header_args = [a for k, v in headers for a in ("-H", f"{k}={v.decode()}")]
    kcat(cluster.bootstrap, "-P", "-t", topic, "-K:", *header_args, "-X", "acks=all", "-l", str(path))
    out = kcat(cluster.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", r"%p\t%o\t%T\t%k\t%s\t%h\n")
    consumed = []
    for line in out.splitlines():
        p, o, ts, k, v, h = line.split("\t")
        hdrs = tuple((hk, hv.encode()) for hk, hv in (item.split("=", 1) for item in h.split(","))) if h else ()
        consumed.append(Consumed(int(p), int(o), k.encode(), v.encode(), hdrs, int(ts)))
    check_replicated(cluster, topic, records, consumed)


def test_kafkajs(cluster: BrokerCluster, tmp_path: Path) -> None:
    from tests.compat.test_kafkajs import require_kafkajs, run_js, write_records

    require_kafkajs()
    topic = "repl-kafkajs"
    create_topic(cluster, topic)
    records = make_records("kafkajs", N_RECORDS, base_ts=base_timestamp())
    path = tmp_path / "records.json"
    write_records(records, path)
    first = cluster.brokers[1].bootstrap  # scenario.js takes one seed broker; kafkajs discovers the rest
    # The topic exists already (RF=3): scenario.js' createTopics answers false and leaves it as it is.
    out = run_js("produce", {"bootstrap": first, "topic": topic, "partitions": PARTITIONS, "configs": TOPIC_CONFIG,
                             "recordsFile": str(path), "idempotent": True}, timeout=TIMEOUT * 2)
    assert out["created"] is False
    assert out["acks"] and all(a["errorCode"] == 0 for a in out["acks"]), out["acks"][:5]
    out = run_js("consume", {"bootstrap": first, "topic": topic, "groupId": "repl-kafkajs-group",
                             "expected": len(records), "timeoutMs": TIMEOUT * 1000}, timeout=TIMEOUT + 60)
    consumed = [Consumed(c["partition"], c["offset"], None if c["key"] is None else c["key"].encode(),
                         None if c["value"] is None else c["value"].encode(),
                         tuple((k, v.encode()) for k, v in c["headers"]), c["timestamp"]) for c in out["consumed"]]
    check_replicated(cluster, topic, records, consumed)
