"""Idempotent producer at the protocol level: hand-built v2 batches sent with kafka-python structs."""

from __future__ import annotations

import asyncio

import pytest
from kafka.protocol.admin import CreateTopicsRequest, DescribeProducersRequest
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


async def _create(c: ProtocolClient, name: str, configs: dict[str, str] | None = None) -> None:
    T = CreateTopicsRequest.CreatableTopic
    cfgs = [T.CreatableTopicConfig(version=7, name=k, value=v) for k, v in (configs or {}).items()]
    resp = await c.request(CreateTopicsRequest(version=7, topics=[T(version=7, name=name, num_partitions=1,
                                                                    replication_factor=-1, assignments=[],
                                                                    configs=cfgs)],
                                               timeout_ms=5000, validate_only=False), 7)
    assert resp.topics[0].error_code == 0


async def _producers(c: ProtocolClient, topic: str) -> dict[int, tuple[int, int]]:
    """DescribeProducers (API 61) of partition 0: producer id -> (epoch, last sequence)."""
    R = DescribeProducersRequest
    resp = await c.request(R(version=0, topics=[R.TopicRequest(version=0, name=topic, partition_indexes=[0])]), 0)
    part = resp.topics[0].partitions[0]
    assert part.error_code == 0
    return {p.producer_id: (p.producer_epoch, p.last_sequence) for p in part.active_producers}


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


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "kill9"])
async def test_duplicate_recognised_after_snapshots_deleted(broker, kill):
    """Without any producer snapshot the state is rebuilt by replaying the whole log (Kafka: no snapshot
    -> reload from the log start offset), so de-duplication still works after a restart."""
    # Small segments: the log rolls every couple of batches, and every roll writes a snapshot.
    async with ProtocolClient(*_addr(broker)) as c:
        await _create(c, "nosnap", {"segment.bytes": "256"})
        pid, epoch = await _init_pid(c)
        for i in range(8):
            assert await _send(c, "nosnap", pid, epoch, seq=2 * i) == (0, 2 * i)
        end = await _end(c, "nosnap")
        assert end == 16
    part_dir = broker.data_dir / "nosnap-0"
    if kill:
        broker.kill()
    else:
        assert broker.stop() == 0
    snapshots = sorted(p.name for p in part_dir.glob("*.snapshot"))
    segments = sorted(p.name for p in part_dir.glob("*.log"))
    assert len(segments) > 1, segments  # the log did roll
    # Every roll wrote one at the new segment's base offset; a clean shutdown also one at the log end.
    expected = {f"{int(name[:-4]):020d}.snapshot" for name in segments[1:]}
    if not kill:
        expected.add(f"{end:020d}.snapshot")
    assert expected <= set(snapshots), snapshots
    for name in snapshots:
        (part_dir / name).unlink()
    assert not list(part_dir.glob("*.snapshot"))
    broker.start()
    async with ProtocolClient(*_addr(broker)) as c:
        assert await _end(c, "nosnap") == end
        assert (await _producers(c, "nosnap"))[pid] == (epoch, 15)
        # The last batch again: a duplicate, answered with its original offset, nothing written.
        assert await _send(c, "nosnap", pid, epoch, seq=14) == (0, 14)
        # So is any of the last five (all rebuilt from the log, not just the newest).
        assert await _send(c, "nosnap", pid, epoch, seq=6) == (0, 6)
        assert await _end(c, "nosnap") == end
        # Older than the cached five: out of order; a fresh (stateless) producer would have been accepted.
        assert (await _send(c, "nosnap", pid, epoch, seq=4))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert await _end(c, "nosnap") == end
        # The next batch in sequence is accepted.
        assert await _send(c, "nosnap", pid, epoch, seq=16) == (0, end)
        assert await _end(c, "nosnap") == end + 2


async def test_producer_state_expires_and_unknown_producer_may_continue(broker_factory):
    """producer.id.expiration.ms end to end. After expiry the partition has no state for the producer, and
    Kafka (ProducerAppendInfo.checkSequence, KIP-360 / 2.5+) accepts any sequence from a producer whose
    epoch it does not know, so the producer's next batch is appended as a new write."""
    broker = broker_factory({"producer.id.expiration.ms": "4000",
                             "producer.id.expiration.check.interval.ms": "200"})
    async with ProtocolClient(*_addr(broker)) as c:
        await _create(c, "expire")
        pid, epoch = await _init_pid(c)
        other, other_epoch = await _init_pid(c)
        assert await _send(c, "expire", pid, epoch, seq=0) == (0, 0)
        assert await _send(c, "expire", pid, epoch, seq=2) == (0, 2)
        assert (await _producers(c, "expire"))[pid] == (epoch, 3)
        # Bounded wait for the expiration check to forget it.
        for _ in range(600):
            producers = await _producers(c, "expire")
            if pid not in producers:
                break
            await asyncio.sleep(0.1)
        assert pid not in producers, producers
        assert await _end(c, "expire") == 4
        # The next sequence (4) from a producer the partition no longer knows: accepted, appended.
        assert await _send(c, "expire", pid, epoch, seq=4) == (0, 4)
        assert await _end(c, "expire") == 6
        assert (await _producers(c, "expire"))[pid] == (epoch, 5)
        # State is tracked again from there: a retry is a duplicate, a gap is out of order.
        assert await _send(c, "expire", pid, epoch, seq=4) == (0, 4)
        assert (await _send(c, "expire", pid, epoch, seq=9))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert await _send(c, "expire", pid, epoch, seq=6) == (0, 6)
        # Any first sequence is accepted from an unknown producer, not just 0.
        assert await _send(c, "expire", other, other_epoch, seq=42) == (0, 8)
        assert (await _producers(c, "expire"))[other] == (other_epoch, 43)
        assert await _end(c, "expire") == 10


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
