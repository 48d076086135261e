"""Idempotent producer at the protocol level: hand-built v2 batches sent with kafka-python structs."""

from __future__ import annotations

import pytest
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

from protocol.client import ProtocolClient
from protocol.errors import ErrorCode
from storage.batch import build_batch

pytestmark = pytest.mark.asyncio


def _addr(broker) -> tuple[str, int]:
    host, port = broker.bootstrap.rsplit(":", 1)
    return host, int(port)


async def _init_pid(c: ProtocolClient) -> tuple[int, int]:
    resp = await c.request(InitProducerIdRequest(version=4, transactional_id=None, transaction_timeout_ms=-1,
                                                 producer_id=-1, producer_epoch=-1), 4)
    assert resp.error_code == 0
    return resp.producer_id, resp.producer_epoch


async def _send(c: ProtocolClient, topic: str, pid: int, epoch: int, seq: int, n: int = 2, tag: bytes = b"") -> tuple[int, int]:
    batch = build_batch([(b"k%d" % i, b"v%d-%s" % (seq + i, tag)) for i in range(n)], producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq)
    P = ProduceRequest.TopicProduceData
    req = ProduceRequest(version=9, transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        P(version=9, name=topic, partition_data=[P.PartitionProduceData(version=9, index=0, records=batch)])])
    part = (await c.request(req, 9)).responses[0].partition_responses[0]
    return part.error_code, part.base_offset


async def _end(c: ProtocolClient, topic: str) -> int:
    T = ListOffsetsRequest.ListOffsetsTopic
    resp = await c.request(ListOffsetsRequest(version=7, replica_id=-1, isolation_level=0, topics=[
        T(version=7, name=topic, partitions=[T.ListOffsetsPartition(version=7, partition_index=0,
                                                                     current_leader_epoch=-1, timestamp=-1)])]), 7)
    return resp.topics[0].partitions[0].offset


async def _create(c: ProtocolClient, name: str) -> None:
    T = CreateTopicsRequest.CreatableTopic
    resp = await c.request(CreateTopicsRequest(version=7, topics=[T(version=7, name=name, num_partitions=1,
                                                                    replication_factor=-1, assignments=[], configs=[])],
                                               timeout_ms=5000, validate_only=False), 7)
    assert resp.topics[0].error_code == 0


async def test_duplicates_of_last_five_batches_return_original_offsets(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        await _create(c, "idem")
        pid, epoch = await _init_pid(c)
        offsets = []
        for i in range(6):
            err, base = await _send(c, "idem", pid, epoch, seq=2 * i)
            assert err == 0
            offsets.append(base)
        assert offsets == [0, 2, 4, 6, 8, 10]
        end = await _end(c, "idem")
        for i in range(1, 6):  # the last five are cached
            assert await _send(c, "idem", pid, epoch, seq=2 * i) == (0, offsets[i])
        assert await _end(c, "idem") == end
        # The oldest batch is no longer cached: out of order, nothing written.
        err, _ = await _send(c, "idem", pid, epoch, seq=0)
        assert err == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert await _end(c, "idem") == end


async def test_sequence_gap_and_epochs(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        await _create(c, "gaps")
        pid, _ = await _init_pid(c)
        assert (await _send(c, "gaps", pid, 1, seq=0))[0] == 0
        assert (await _send(c, "gaps", pid, 1, seq=5))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert (await _send(c, "gaps", pid, 0, seq=2))[0] == ErrorCode.INVALID_PRODUCER_EPOCH
        assert (await _send(c, "gaps", pid, 2, seq=0))[0] == 0  # a new epoch restarts at 0
        assert (await _send(c, "gaps", pid, 1, seq=2))[0] == ErrorCode.INVALID_PRODUCER_EPOCH
        assert await _end(c, "gaps") == 4


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "kill9"])
async def test_duplicate_recognised_after_restart(broker, kill):
    async with ProtocolClient(*_addr(broker)) as c:
        await _create(c, "restart")
        pid, epoch = await _init_pid(c)
        for i in range(3):
            assert (await _send(c, "restart", pid, epoch, seq=2 * i))[0] == 0
        end = await _end(c, "restart")
    broker.restart(kill=kill)
    async with ProtocolClient(*_addr(broker)) as c:
        assert await _send(c, "restart", pid, epoch, seq=4) == (0, 4)
        assert await _end(c, "restart") == end
        assert await _send(c, "restart", pid, epoch, seq=6) == (0, 6)


async def test_producer_ids_unique_across_restarts(broker):
    seen: set[int] = set()
    for round_ in range(3):
        async with ProtocolClient(*_addr(broker)) as c:
            for _ in range(334 if round_ < 2 else 332):
                pid, epoch = await _init_pid(c)
                assert epoch == 0
                seen.add(pid)
        if round_ == 0:
            broker.restart(kill=True)
        elif round_ == 1:
            broker.restart()
    assert len(seen) == 1000
