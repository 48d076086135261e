"""Nullable request fields keep Kafka's meaning (kbroker issue 22 item 3).

Where a request schema lists a field in ``nullableVersions``, null is a value with a meaning, not
an error: OffsetFetch ``topics`` null = every partition the group has offsets for, DescribeConfigs
``configuration_keys`` null = every config, DescribeLogDirs ``topics`` null = every partition,
Metadata ``topics`` null = every topic, OffsetCommit ``committed_metadata`` null = "" (Kafka's
NO_METADATA), CreatePartitions ``assignments`` null = placed by the broker. Each is answered with
an error code of 0 and no traceback.
"""

from __future__ import annotations

import asyncio

import pytest
from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DescribeConfigsRequest,
    DescribeLogDirsRequest,
)
from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from protocol.client import ProtocolClient
from tests.helpers.wire import parse_bootstrap

pytestmark = pytest.mark.asyncio


async def _create(c: ProtocolClient, name: str, partitions: int) -> None:
    T = CreateTopicsRequest.CreatableTopic
    resp = await c.request(CreateTopicsRequest(version=7, topics=[T(version=7, name=name, num_partitions=partitions,
                                                                    replication_factor=-1, assignments=[], configs=[])],
                                               timeout_ms=5000, validate_only=False), 7)
    assert resp.topics[0].error_code == 0


async def test_null_means_all_or_default(broker):
    async with ProtocolClient(*parse_bootstrap(broker.bootstrap)) as c:
        await _create(c, "n1", 2)
        await _create(c, "n2", 1)

        # Metadata topics null (v1+) = every topic.
        md = await c.request(MetadataRequest(version=12, topics=None, allow_auto_topic_creation=False,
                                             include_topic_authorized_operations=False), 12)
        assert {"n1", "n2"} <= {t.name for t in md.topics}

        # OffsetCommit with null metadata, then OffsetFetch v7 with topics null = all of the group's offsets.
        T = OffsetCommitRequest.OffsetCommitRequestTopic
        P = T.OffsetCommitRequestPartition
        commit = OffsetCommitRequest(version=7, group_id="g-null", generation_id_or_member_epoch=-1, member_id="",
                                     group_instance_id=None, topics=[
                                         T(version=7, name="n1", partitions=[
                                             P(version=7, partition_index=i, committed_offset=5 + i,
                                               committed_leader_epoch=-1, committed_metadata=None) for i in (0, 1)]),
                                         T(version=7, name="n2", partitions=[
                                             P(version=7, partition_index=0, committed_offset=9,
                                               committed_leader_epoch=-1, committed_metadata=None)])])
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            await c.request(FindCoordinatorRequest(version=4, key_type=0, coordinator_keys=["g-null"]), 4)  # the first commit may find the offsets topic still loading (COORDINATOR_NOT_AVAILABLE)
            resp = await c.request(commit, 7)
            codes = [p.error_code for t in resp.topics for p in t.partitions]
            if codes != [15, 15, 15] or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.1)
        assert codes == [0, 0, 0]
        fetched = await c.request(OffsetFetchRequest(version=7, group_id="g-null", topics=None,
                                                     require_stable=False), 7)
        assert fetched.error_code == 0
        got = {(t.name, p.partition_index): (p.committed_offset, p.metadata) for t in fetched.topics
               for p in t.partitions}
        assert got == {("n1", 0): (5, ""), ("n1", 1): (6, ""), ("n2", 0): (9, "")}

        # DescribeConfigs configuration_keys null = every config of the topic.
        R = DescribeConfigsRequest.DescribeConfigsResource
        dc = await c.request(DescribeConfigsRequest(version=4, resources=[
            R(version=4, resource_type=2, resource_name="n1", configuration_keys=None)],
            include_synonyms=False, include_documentation=False), 4)
        assert dc.results[0].error_code == 0
        assert {"cleanup.policy", "retention.ms"} <= {e.name for e in dc.results[0].configs}

        # DescribeLogDirs topics null = every partition.
        dl = await c.request(DescribeLogDirsRequest(version=4, topics=None), 4)
        assert dl.error_code == 0
        parts = {(t.name, p.partition_index) for r in dl.results for t in r.topics for p in t.partitions}
        assert {("n1", 0), ("n1", 1), ("n2", 0)} <= parts

        # CreatePartitions assignments null = the broker places the new partitions.
        CT = CreatePartitionsRequest.CreatePartitionsTopic
        cp = await c.request(CreatePartitionsRequest(version=3, topics=[CT(version=3, name="n2", count=3,
                                                                           assignments=None)],
                                                     timeout_ms=5000, validate_only=False), 3)
        assert cp.results[0].error_code == 0
