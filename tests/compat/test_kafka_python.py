"""Compatibility scenario with kafka-python 3.0: KafkaAdminClient, idempotent KafkaProducer, assign-consume."""

from __future__ import annotations

import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, OffsetSpec

from tests.compat.scenario import (
    PARTITIONS,
    TOPIC_CONFIG,
    Consumed,
    base_timestamp,
    check_consumed,
    end_offsets,
    make_records,
    max_timestamp,
    offsets_for_time,
    probe_timestamp,
)

TOPIC = "compat-kafka-python"
TIMEOUT = 30


def test_kafka_python_scenario(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=TIMEOUT * 1000)
    try:
        _scenario(broker.bootstrap, admin)
    finally:
        admin.close()


def _scenario(bootstrap: str, admin: KafkaAdminClient) -> None:
    result = admin.create_topics({TOPIC: {"num_partitions": PARTITIONS, "replication_factor": 1,
                                          "configs": TOPIC_CONFIG}}, wait_for_metadata=True)
    assert [t["error_code"] for t in result["topics"]] == [0]
    assert TOPIC in admin.list_topics()

    # Idempotent by default in kafka-python 3.0 (InitProducerId + sequence numbers on every batch).
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    assert producer.config["enable_idempotence"]
    records = make_records("kafka-python", base_ts=base_timestamp())
    try:
        futures = [producer.send(TOPIC, key=r.key, value=r.value, headers=list(r.headers),
                                 timestamp_ms=r.timestamp) for r in records]
        producer.flush(TIMEOUT)
        metas = [f.get(TIMEOUT) for f in futures]
    finally:
        producer.close(TIMEOUT)

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", request_timeout_ms=TIMEOUT * 1000)
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        consumed: list[Consumed] = []
        deadline = time.monotonic() + TIMEOUT
        while len(consumed) < len(records) and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=500, max_records=5000).items():
                for m in msgs:
                    assert m.timestamp_type == 0  # CreateTime
                    consumed.append(Consumed(tp.partition, m.offset, m.key, m.value,
                                             tuple((k, v) for k, v in m.headers), m.timestamp))
        by_partition = check_consumed(records, consumed)
        # The offsets the producer was told match where the records were found.
        found = {c.key: (c.partition, c.offset) for c in consumed}
        assert all(found[r.key] == (m.partition, m.offset) for r, m in zip(records, metas, strict=True))

        ends = end_offsets(by_partition)
        assert consumer.beginning_offsets(tps) == {tp: 0 for tp in tps}
        assert consumer.end_offsets(tps) == {tp: ends[tp.partition] for tp in tps}
        ts = probe_timestamp(by_partition)
        want = offsets_for_time(by_partition, ts)
        got = consumer.offsets_for_times({tp: ts for tp in tps})
        assert {tp.partition: (None if v is None else v.offset) for tp, v in got.items()} == want
        for tp, v in got.items():
            if v is not None:  # the timestamp reported is the found record's
                assert v.timestamp == next(c.timestamp for c in by_partition[tp.partition] if c.offset == v.offset)
        late = consumer.offsets_for_times({tps[0]: max_timestamp(by_partition) + 1})
        assert late[tps[0]] is None
    finally:
        consumer.close()

    # The admin's own ListOffsets: earliest, latest, max timestamp (KIP-734).
    assert {tp.partition: v.offset for tp, v in
            admin.list_partition_offsets({tp: OffsetSpec.EARLIEST for tp in tps}).items()} == dict.fromkeys(ends, 0)
    assert {tp.partition: v.offset for tp, v in
            admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps}).items()} == ends
    got_max = admin.list_partition_offsets({tp: OffsetSpec.MAX_TIMESTAMP for tp in tps})
    for tp, v in got_max.items():
        newest = max(by_partition[tp.partition], key=lambda c: (c.timestamp, -c.offset))
        assert (v.offset, v.timestamp) == (newest.offset, newest.timestamp)

    configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, TOPIC)], config_filter="all")
    topic_configs = configs["topic"][TOPIC]
    for name, value in TOPIC_CONFIG.items():
        assert topic_configs[name]["value"] == value
        assert topic_configs[name]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert topic_configs["cleanup.policy"]["value"] == "delete"
    assert topic_configs["cleanup.policy"]["config_source"] != "DYNAMIC_TOPIC_CONFIG"
    modified = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, TOPIC)])["topic"][TOPIC]
    assert set(modified) == set(TOPIC_CONFIG)

    result = admin.delete_topics([TOPIC])
    assert [t["error_code"] for t in result["topics"]] == [0]
    deadline = time.monotonic() + 10
    while TOPIC in admin.list_topics() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert TOPIC not in admin.list_topics()
