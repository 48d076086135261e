"""DescribeTopicPartitions (API 75, KIP-966), which Java admin clients 3.8+ use for describeTopics
(issue 21 item 6), sent raw through kbroker's protocol client.

Checked against Kafka's DescribeTopicPartitionsRequestHandler and
KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse: topics sorted by name, at most
``response_partition_limit`` partitions per answer, ``next_cursor`` pointing at the first partition
left out; an empty topic list means every topic (unknown ones skipped), named unknown topics get
UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an invalid name); a cursor whose topic is
not in the list is an INVALID_REQUEST for every topic.
"""

from __future__ import annotations

import asyncio
import uuid

from kafka.protocol.admin import CreateTopicsRequest, DescribeTopicPartitionsRequest
from kafka.protocol.metadata import ApiVersionsRequest

from protocol.client import ProtocolClient
from protocol.errors import ErrorCode as E
from tests.helpers.wire import parse_bootstrap

Q = DescribeTopicPartitionsRequest
ALL_TOPIC_OPS = sum(1 << code for code in (3, 4, 5, 6, 7, 8, 10, 11))  # READ..ALTER_CONFIGS, no CLUSTER_ACTION
ZERO_UUID = uuid.UUID(int=0)


async def _create(c: ProtocolClient, topics: dict[str, int]) -> None:
    T = CreateTopicsRequest.CreatableTopic
    resp = await c.request(CreateTopicsRequest(version=7, topics=[
        T(version=7, name=n, num_partitions=p, replication_factor=-1, assignments=[], configs=[])
        for n, p in topics.items()], timeout_ms=30000, validate_only=False), 7)
    assert all(t.error_code == 0 for t in resp.topics), resp


async def _describe(c: ProtocolClient, names: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None):
    cur = None if cursor is None else Q.Cursor(version=0, topic_name=cursor[0], partition_index=cursor[1])
    return await c.request(Q(version=0, topics=[Q.TopicRequest(version=0, name=n) for n in names],
                             response_partition_limit=limit, cursor=cur), 0)


async def _walk(c: ProtocolClient, names: list[str], limit: int) -> tuple[list[tuple[str, int]], int]:
    """Every (topic, partition) over all cursor pages, in answer order; and the number of pages."""
    seen: list[tuple[str, int]] = []
    cursor = None
    for pages in range(1, 1000):
        resp = await _describe(c, names, limit, cursor)
        count = 0
        for t in resp.topics:
            assert t.error_code == 0, t
            assert t.topic_authorized_operations == ALL_TOPIC_OPS
            assert t.topic_id not in (None, ZERO_UUID) and t.is_internal is False
            for p in t.partitions:
                assert p.error_code == 0 and p.leader_id == 1 and p.leader_epoch >= 0, p
                assert p.replica_nodes == [1] and p.isr_nodes == [1] and p.offline_replicas == []
                assert p.eligible_leader_replicas == [] and p.last_known_elr == []
                seen.append((t.name, p.partition_index))
                count += 1
        assert count <= limit
        if resp.next_cursor is None:
            return seen, pages
        assert count == limit  # a page is cut only when it is full
        cursor = (resp.next_cursor.topic_name, resp.next_cursor.partition_index)
    raise AssertionError("cursor never ended")


def test_describe_topic_partitions_pages_and_errors(broker) -> None:
    async def run() -> None:
        async with ProtocolClient(*parse_bootstrap(broker.bootstrap)) as c:
            versions = await c.request(ApiVersionsRequest(version=3, client_software_name="t",
                                                          client_software_version="1"), 3)
            assert any(k.api_key == 75 and k.min_version == 0 and k.max_version == 0 for k in versions.api_keys)

            # Created out of order: answers are sorted by name. Sizes straddle the page size.
            sizes = {"dtp-c": 7, "dtp-a": 3, "dtp-e": 1, "dtp-b": 5, "dtp-d": 4, "dtp-f": 10}
            await _create(c, sizes)
            expected = [(n, p) for n in sorted(sizes) for p in range(sizes[n])]
            names = list(sizes)

            for limit in (1, 3, 4, 2000):
                seen, pages = await _walk(c, names, limit)
                assert seen == expected, (limit, seen)
                assert pages == -(-len(expected) // limit), (limit, pages)

            # Empty list = every topic (the broker may hold internal topics too): ours appear once, in order.
            seen, _ = await _walk(c, [], 4)
            assert [tp for tp in seen if tp[0].startswith("dtp-")] == expected
            assert seen == sorted(seen)

            # Unknown and invalid names get per-topic errors, with the valid topics in the same answer.
            resp = await _describe(c, ["dtp-b", "nope-missing", "bad/name", "dtp-a"])
            by_name = {t.name: t for t in resp.topics}
            assert [t.name for t in resp.topics] == ["bad/name", "dtp-a", "dtp-b", "nope-missing"]
            assert [t.name for t in resp.topics if t.error_code == 0] == ["dtp-a", "dtp-b"]
            missing = by_name["nope-missing"]
            assert missing.error_code == E.UNKNOWN_TOPIC_OR_PARTITION and missing.partitions == []
            assert missing.topic_id in (None, ZERO_UUID)  # kafka-python decodes the zero uuid as None
            assert by_name["bad/name"].error_code == E.INVALID_TOPIC_EXCEPTION

            # A cursor into the middle of a topic starts there.
            resp = await _describe(c, names, 2000, ("dtp-c", 5))
            got = [(t.name, p.partition_index) for t in resp.topics for p in t.partitions]
            assert got == [tp for tp in expected if tp >= ("dtp-c", 5)]

            # The cursor's topic must be among the named topics.
            resp = await _describe(c, ["dtp-a", "dtp-b"], 2000, ("dtp-c", 0))
            assert [(t.name, t.error_code) for t in resp.topics] == [("dtp-a", E.INVALID_REQUEST),
                                                                        ("dtp-b", E.INVALID_REQUEST)]
            assert resp.next_cursor is None

    asyncio.run(run())


def test_broker_partition_limit_caps_the_request(broker_factory) -> None:
    """The answer holds at most min(response_partition_limit, max.request.partition.size.limit)."""
    broker = broker_factory({"max.request.partition.size.limit": "2"})

    async def run() -> None:
        async with ProtocolClient(*parse_bootstrap(broker.bootstrap)) as c:
            await _create(c, {"cap-a": 3, "cap-b": 2})
            seen, pages = await _walk(c, ["cap-b", "cap-a"], 2)
            assert seen == [("cap-a", 0), ("cap-a", 1), ("cap-a", 2), ("cap-b", 0), ("cap-b", 1)]
            assert pages == 3
            resp = await _describe(c, ["cap-a", "cap-b"], 2000)
            assert [(t.name, len(t.partitions)) for t in resp.topics] == [("cap-a", 2)]
            assert (resp.next_cursor.topic_name, resp.next_cursor.partition_index) == ("cap-a", 2)

    asyncio.run(run())
