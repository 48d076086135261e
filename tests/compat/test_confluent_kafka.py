"""Compatibility scenario with confluent-kafka (librdkafka): admin, produce, assign-consume, offsets, configs."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from tests.compat.rdkafka_io import consume_all, produce
from tests.compat.scenario import (
    PARTITIONS,
    TOPIC_CONFIG,
    base_timestamp,
    check_consumed,
    end_offsets,
    make_records,
    max_timestamp,
    offsets_for_time,
    probe_timestamp,
)

TOPIC = "compat-confluent"
TIMEOUT = 30


def test_confluent_kafka_scenario(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config=TOPIC_CONFIG)], operation_timeout=10)
    futures[TOPIC].result(TIMEOUT)
    md = admin.list_topics(TOPIC, timeout=TIMEOUT)
    assert len(md.topics[TOPIC].partitions) == PARTITIONS

    records = make_records("confluent", base_ts=base_timestamp())
    produce(broker.bootstrap, TOPIC, records)
    consumed = consume_all(broker.bootstrap, TOPIC, PARTITIONS, len(records))
    by_partition = check_consumed(records, consumed)
    ends = end_offsets(by_partition)

    # Watermarks and offsets_for_times through the consumer (ListOffsets from librdkafka's consumer).
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "compat-unused"})
    try:
        for p in range(PARTITIONS):
            assert c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=TIMEOUT) == (0, ends[p])
        ts = probe_timestamp(by_partition)
        want = offsets_for_time(by_partition, ts)
        got = c.offsets_for_times([TopicPartition(TOPIC, p, ts) for p in range(PARTITIONS)], timeout=TIMEOUT)
        # librdkafka reports "no such record" as OFFSET_END (-1).
        assert {tp.partition: tp.offset for tp in got} == {p: (-1 if o is None else o) for p, o in want.items()}
        late = c.offsets_for_times([TopicPartition(TOPIC, 0, max_timestamp(by_partition) + 1)], timeout=TIMEOUT)
        assert late[0].offset == -1
    finally:
        c.close()

    # The same through AdminClient.list_offsets: earliest, latest, by timestamp, max timestamp (KIP-734).
    def list_offsets(spec_for) -> dict[int, tuple[int, int]]:
        req = {TopicPartition(TOPIC, p): spec_for(p) for p in range(PARTITIONS)}
        res = admin.list_offsets(req, request_timeout=TIMEOUT)
        return {tp.partition: (f.result(TIMEOUT).offset, f.result(TIMEOUT).timestamp) for tp, f in res.items()}

    assert {p: o for p, (o, _) in list_offsets(lambda p: OffsetSpec.earliest()).items()} == dict.fromkeys(ends, 0)
    assert {p: o for p, (o, _) in list_offsets(lambda p: OffsetSpec.latest()).items()} == ends
    got_ts = list_offsets(lambda p: OffsetSpec.for_timestamp(ts))
    assert {p: o for p, (o, _) in got_ts.items()} == {p: (-1 if o is None else o) for p, o in want.items()}
    got_max = list_offsets(lambda p: OffsetSpec.max_timestamp())
    for p, rows in by_partition.items():
        newest = max(rows, key=lambda r: (r.timestamp, -r.offset))
        assert got_max[p] == (newest.offset, newest.timestamp)

    # DescribeConfigs: the value set at creation is reported as a dynamic topic config.
    resource = ConfigResource(ResourceType.TOPIC, TOPIC)
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT)
    for name, value in TOPIC_CONFIG.items():
        assert configs[name].value == value
        assert configs[name].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    admin.delete_topics([TOPIC], operation_timeout=10)[TOPIC].result(TIMEOUT)
    deadline = time.monotonic() + 10
    while TOPIC in admin.list_topics(timeout=TIMEOUT).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert TOPIC not in admin.list_topics(timeout=TIMEOUT).topics


@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4", "zstd"])
def test_confluent_kafka_compressed_roundtrip(broker, compression):
    """Compressed batches are stored as sent and come back intact (the broker never re-encodes them)."""
    records = make_records("confluent-" + compression, 500, base_ts=base_timestamp())
    produce(broker.bootstrap, TOPIC, records, extra={"compression.type": compression})
    consumed = consume_all(broker.bootstrap, TOPIC, 1, len(records))
    # Auto-created topic: num.partitions=1 in the fixture.
    check_consumed(records, consumed, partitions=1)
