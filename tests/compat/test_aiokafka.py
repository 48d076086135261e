"""Compatibility scenario with aiokafka 0.14: AIOKafkaAdminClient, AIOKafkaProducer, assign-consume."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

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

pytestmark = pytest.mark.asyncio

TOPIC = "compat-aiokafka"
TIMEOUT = 30
DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs config_source value


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
async def test_aiokafka_scenario(broker, idempotent):
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=TIMEOUT * 1000)
    await admin.start()
    try:
        await asyncio.wait_for(_scenario(broker.bootstrap, admin, idempotent), 120)
    finally:
        await admin.close()


async def _scenario(bootstrap: str, admin: AIOKafkaAdminClient, idempotent: bool) -> None:
    resp = await admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, topic_configs=TOPIC_CONFIG)])
    assert [t[1] for t in resp.topic_errors] == [0], resp
    assert TOPIC in await admin.list_topics()

    records = make_records("aiokafka", base_ts=base_timestamp())
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                                enable_idempotence=idempotent)
    await producer.start()
    try:
        futures = [await producer.send(TOPIC, key=r.key, value=r.value, headers=list(r.headers),
                                       timestamp_ms=r.timestamp) for r in records]
        metas = await asyncio.gather(*futures)
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest", request_timeout_ms=TIMEOUT * 1000)
    await consumer.start()
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning()
        consumed: list[Consumed] = []
        deadline = time.monotonic() + TIMEOUT
        while len(consumed) < len(records) and time.monotonic() < deadline:
            for tp, msgs in (await consumer.getmany(timeout_ms=500, max_records=5000)).items():
                for m in msgs:
                    assert m.timestamp_type == 0  # CreateTime
                    consumed.append(Consumed(tp.partition, m.offset, m.key, m.value, tuple(m.headers), m.timestamp))
        by_partition = check_consumed(records, consumed)
        found = {c.key: (c.partition, c.offset) for c in consumed}
        assert all(found[r.key] == (m.partition, m.offset) for r, m in zip(records, metas, strict=True))

        ends = end_offsets(by_partition)
        assert await consumer.beginning_offsets(tps) == {tp: 0 for tp in tps}
        assert await consumer.end_offsets(tps) == {tp: ends[tp.partition] for tp in tps}
        ts = probe_timestamp(by_partition)
        want = offsets_for_time(by_partition, ts)
        got = await consumer.offsets_for_times({tp: ts for tp in tps})
        assert {tp.partition: (None if v is None else v.offset) for tp, v in got.items()} == want
        late = await consumer.offsets_for_times({tps[0]: max_timestamp(by_partition) + 1})
        assert late[tps[0]] is None
    finally:
        await consumer.stop()

    [described] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, TOPIC)])
    [resource] = described.resources
    error_code, _msg, _rtype, name, entries = resource[:5]
    assert (error_code, name) == (0, TOPIC)
    by_name = {e[0]: e for e in entries}
    for key, value in TOPIC_CONFIG.items():
        assert by_name[key][1] == value
        if described.API_VERSION >= 1:
            assert by_name[key][3] == DYNAMIC_TOPIC_CONFIG
    assert by_name["cleanup.policy"][1] == "delete"

    resp = await admin.delete_topics([TOPIC])
    assert [t[1] for t in resp.topic_error_codes] == [0], resp
    deadline = time.monotonic() + 10
    while TOPIC in await admin.list_topics() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert TOPIC not in await admin.list_topics()
