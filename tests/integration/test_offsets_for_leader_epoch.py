"""OffsetForLeaderEpoch (API 23, v2-4) on a single node, sent raw: the end offset of an epoch as
Kafka's LeaderEpochFileCache.endOffsetFor answers it, epoch fencing, unknown partitions.
(The cluster case, after a leader change, is in tests/cluster/.)"""

from __future__ import annotations

import asyncio

from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import OffsetForLeaderEpochRequest
from kafka.protocol.producer import ProduceRequest

from protocol.client import ProtocolClient
from protocol.errors import ErrorCode as E
from storage.batch import build_batch
from tests.helpers.wire import parse_bootstrap

Q = OffsetForLeaderEpochRequest
T = Q.OffsetForLeaderTopic
P = T.OffsetForLeaderPartition


async def _ask(c: ProtocolClient, v: int, topic: str, partition: int, epoch: int, current: int = -1):
    resp = await c.request(Q(version=v, replica_id=-1, topics=[T(version=v, topic=topic, partitions=[
        P(version=v, partition=partition, current_leader_epoch=current, leader_epoch=epoch)])]), v)
    r = resp.topics[0].partitions[0]
    return r.error_code, r.leader_epoch, r.end_offset


async def _produce(c: ProtocolClient, topic: str, n: int) -> None:
    CT = CreateTopicsRequest.CreatableTopic
    created = await c.request(CreateTopicsRequest(version=7, topics=[CT(
        version=7, name=topic, num_partitions=1, replication_factor=-1, assignments=[], configs=[])],
        timeout_ms=30000, validate_only=False), 7)
    assert created.topics[0].error_code == 0
    PT = ProduceRequest.TopicProduceData
    data = bytes(build_batch([(b"k", b"v")] * n))
    resp = await c.request(ProduceRequest(version=9, transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[
        PT(version=9, name=topic, partition_data=[PT.PartitionProduceData(version=9, index=0, records=data)])]), 9)
    assert resp.responses[0].partition_responses[0].error_code == 0


def test_offsets_for_leader_epoch_single_node(broker) -> None:
    async def run() -> None:
        async with ProtocolClient(*parse_bootstrap(broker.bootstrap)) as c:
            await _produce(c, "ofle", 5)  # leader epoch 0
            for v in (2, 3, 4):
                assert await _ask(c, v, "ofle", 0, 0) == (E.NONE, 0, 5)  # the latest epoch ends at the log end
                assert await _ask(c, v, "ofle", 0, 7) == (E.NONE, -1, -1)  # above every known epoch
                assert await _ask(c, v, "ofle", 0, 0, current=0) == (E.NONE, 0, 5)
                assert (await _ask(c, v, "ofle", 0, 0, current=3))[0] == E.UNKNOWN_LEADER_EPOCH
                assert (await _ask(c, v, "ofle", 1, 0))[0] == E.UNKNOWN_TOPIC_OR_PARTITION
                assert (await _ask(c, v, "nope-topic", 0, 0))[0] == E.UNKNOWN_TOPIC_OR_PARTITION

    asyncio.run(run())
