"""Bad input never takes the broker down, never affects other connections, and stores nothing."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable

import pytest
from kafka.protocol.admin import CreatePartitionsRequest, CreateTopicsRequest
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest
from kafka.protocol.producer import ProduceRequest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from protocol.client import ProtocolClient
from protocol.errors import ErrorCode
from protocol.headers import encode_request
from storage.batch import build_batch
from tests.helpers.broker_proc import BrokerProcess
from tests.helpers.wire import RawConnection

pytestmark = pytest.mark.asyncio


def _addr(broker) -> tuple[str, int]:
    host, port = broker.bootstrap.rsplit(":", 1)
    return host, int(port)


async def _api_versions_ok(broker) -> None:
    async with ProtocolClient(*_addr(broker)) as c:
        resp = await c.request(ApiVersionsRequest(version=3, client_software_name="t", client_software_version="1"), 3)
        assert resp.error_code == 0
        assert any(k.api_key == 0 for k in resp.api_keys)


def _raw_exchange(broker, payload: bytes, *, read: bool = True, shutdown: bool = False) -> bytes:
    """Send raw bytes; return what the broker sends back until it closes (or 5 s pass)."""
    with socket.create_connection(_addr(broker), timeout=5) as s:
        s.sendall(payload)
        if shutdown:
            s.shutdown(socket.SHUT_WR)
        data = b""
        if read:
            try:
                while chunk := s.recv(65536):
                    data += chunk
            except TimeoutError:
                pytest.fail("broker neither answered nor closed the connection")
        return data


def _produce(topic: str, records: bytes, acks: int = 1) -> ProduceRequest:
    P = ProduceRequest.TopicProduceData
    return ProduceRequest(version=9, transactional_id=None, acks=acks, timeout_ms=5000,
                          topic_data=[P(version=9, name=topic, partition_data=[
                              P.PartitionProduceData(version=9, index=0, records=records)])])


async def _latest_offset(c: ProtocolClient, topic: str) -> int:
    T = ListOffsetsRequest.ListOffsetsTopic
    req = ListOffsetsRequest(version=7, replica_id=-1, isolation_level=0, topics=[
        T(version=7, name=topic, partitions=[T.ListOffsetsPartition(version=7, partition_index=0,
                                                                     current_leader_epoch=-1, timestamp=-1)])])
    resp = await c.request(req, 7)
    return resp.topics[0].partitions[0].offset


async def _create(c: ProtocolClient, name: str, partitions: int = 1) -> int:
    T = CreateTopicsRequest.CreatableTopic
    resp = await c.request(CreateTopicsRequest(version=7, topics=[T(version=7, name=name, num_partitions=partitions,
                                                                    replication_factor=-1, assignments=[], configs=[])],
                                               timeout_ms=5000, validate_only=False), 7)
    return resp.topics[0].error_code


async def test_truncated_frame_closes_only_that_connection(broker):
    # A frame announcing 100 bytes but delivering 10, then EOF.
    _raw_exchange(broker, struct.pack(">i", 100) + b"x" * 10, shutdown=True)
    await _api_versions_ok(broker)
    assert "truncated" in broker.log_text()


async def test_garbage_header_closes_connection(broker):
    data = _raw_exchange(broker, struct.pack(">i", 3) + b"abc")
    assert data == b""
    await _api_versions_ok(broker)


async def test_frame_larger_than_socket_request_max_bytes(broker_factory):
    broker = broker_factory(overrides={"socket.request.max.bytes": "1024"})
    data = _raw_exchange(broker, struct.pack(">i", 4096) + b"\0" * 100)
    assert data == b""
    assert "socket.request.max.bytes" in broker.log_text()
    await _api_versions_ok(broker)


async def test_unknown_api_key_closes_connection(broker):
    frame = encode_request(999, 0, 7, "t", b"", False)
    assert _raw_exchange(broker, frame) == b""
    assert "unknown or unsupported api key 999" in broker.log_text()
    await _api_versions_ok(broker)


async def test_unsupported_version_closes_connection(broker):
    frame = encode_request(0, 99, 7, "t", b"", True)  # Produce v99
    assert _raw_exchange(broker, frame) == b""
    assert "unsupported version 99 of Produce" in broker.log_text()
    await _api_versions_ok(broker)


async def test_api_versions_unknown_version_gets_v0_error_with_ranges(broker):
    frame = encode_request(18, 42, 5, "t", b"\x00", True)
    with socket.create_connection(_addr(broker), timeout=5) as s:
        s.sendall(frame)
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        body = s.recv(size, socket.MSG_WAITALL)
    corr = struct.unpack_from(">i", body)[0]
    assert corr == 5
    resp = ApiVersionsResponse[0].decode(body[4:], version=0)
    assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
    keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert keys[18] == (0, 4)
    assert keys[0][1] >= 11  # Produce
    assert keys[1][1] >= 15  # Fetch (KIP-903 replica state, no replica_id field)
    assert keys[3][1] >= 12  # Metadata (topic ids in requests)


async def test_corrupt_crc_is_rejected_and_nothing_stored(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        assert await _create(c, "crc") == 0
        batch = bytearray(build_batch([(b"k", b"v")]))
        batch[-1] ^= 0xFF  # flip a byte inside the CRC-covered part
        resp = await c.request(_produce("crc", bytes(batch)), 9)
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.CORRUPT_MESSAGE
        assert await _latest_offset(c, "crc") == 0
        good = await c.request(_produce("crc", build_batch([(b"k", b"v")])), 9)
        assert good.responses[0].partition_responses[0].error_code == 0
        assert await _latest_offset(c, "crc") == 1


async def test_truncated_batch_is_corrupt_message(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        assert await _create(c, "trunc") == 0
        batch = build_batch([(b"k", b"v" * 100)])
        resp = await c.request(_produce("trunc", batch[:-10]), 9)
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.CORRUPT_MESSAGE
        assert await _latest_offset(c, "trunc") == 0


async def test_old_magic_is_rejected_clearly(broker):
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=1, key=b"k", value=b"v")
    legacy = bytes(builder.build())
    async with ProtocolClient(*_addr(broker)) as c:
        assert await _create(c, "magic") == 0
        resp = await c.request(_produce("magic", legacy), 9)
        part = resp.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
        assert "magic" in (part.error_message or "")
        assert await _latest_offset(c, "magic") == 0


async def test_produce_to_missing_topic_without_auto_create(broker_factory):
    broker = broker_factory(overrides={"auto.create.topics.enable": "false"})
    async with ProtocolClient(*_addr(broker)) as c:
        resp = await c.request(_produce("nope", build_batch([(b"k", b"v")])), 9)
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        md = await c.request(MetadataRequest(version=12, topics=[
            MetadataRequest.MetadataRequestTopic(version=12, topic_id=None, name="nope")],
            allow_auto_topic_creation=True, include_topic_authorized_operations=False), 12)
        assert md.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("name", ["", ".", "..", "bad/name", "sp ace", "x" * 250, "ünicode"])
async def test_invalid_topic_names(broker, name):
    async with ProtocolClient(*_addr(broker)) as c:
        assert await _create(c, name) == ErrorCode.INVALID_TOPIC_EXCEPTION


async def test_colliding_topic_names(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        assert await _create(c, "a.b") == 0
        assert await _create(c, "a_b") == ErrorCode.INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("count", [0, -2, -100])
async def test_bad_partition_counts(broker, count):
    async with ProtocolClient(*_addr(broker)) as c:
        assert await _create(c, f"parts{abs(count)}", count) == ErrorCode.INVALID_PARTITIONS


async def test_create_partitions_cannot_shrink(broker):
    async with ProtocolClient(*_addr(broker)) as c:
        assert await _create(c, "grow", 2) == 0
        T = CreatePartitionsRequest.CreatePartitionsTopic
        for count, code in ((1, ErrorCode.INVALID_PARTITIONS), (-1, ErrorCode.INVALID_PARTITIONS), (4, 0)):
            resp = await c.request(CreatePartitionsRequest(version=3, topics=[
                T(version=3, name="grow", count=count, assignments=None)], timeout_ms=5000, validate_only=False), 3)
            assert resp.results[0].error_code == code


def _bad_unknown_api_key(broker, i: int) -> None:
    assert _raw_exchange(broker, encode_request(999, 0, i, "t", b"", False)) == b""


def _bad_truncated_frame(broker, i: int) -> None:
    # Announces 100 bytes, delivers 10, then EOF: the broker drops the connection without answering.
    assert _raw_exchange(broker, struct.pack(">i", 100) + b"x" * 10, shutdown=True) == b""


def _bad_oversized_frame(broker, i: int) -> None:
    assert _raw_exchange(broker, struct.pack(">i", 4096) + b"\0" * 100) == b""  # > socket.request.max.bytes


def _bad_unsupported_version(broker, i: int) -> None:
    assert _raw_exchange(broker, encode_request(0, 99, i, "t", b"", True)) == b""  # Produce v99


def _bad_corrupt_crc(broker, i: int) -> None:
    batch = bytearray(build_batch([(b"k", b"bad%d" % i)]))
    batch[-1] ^= 0xFF  # inside the CRC-covered part
    with RawConnection(broker.bootstrap, timeout=10) as conn:
        resp = conn.request(_produce("steady", bytes(batch)), 9)
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.CORRUPT_MESSAGE


# Each runs on its own new connection; _raw_exchange fails if the broker neither answers nor closes.
BAD_INPUTS: dict[str, Callable[[BrokerProcess, int], None]] = {
    "unknown_api_key": _bad_unknown_api_key,
    "truncated_frame": _bad_truncated_frame,
    "oversized_frame": _bad_oversized_frame,
    "unsupported_version": _bad_unsupported_version,
    "corrupt_crc": _bad_corrupt_crc,
}


@pytest.mark.parametrize("bad", list(BAD_INPUTS))
async def test_other_connections_unaffected_while_bad_ones_arrive(broker_factory, bad):
    """A connection opened before the bad input keeps working (Metadata, ApiVersions, Produce) after each
    kind of bad input on another connection; nothing of the bad input is stored."""
    broker = broker_factory(overrides={"socket.request.max.bytes": "1024"})
    async with ProtocolClient(*_addr(broker)) as c:
        assert await _create(c, "steady") == 0
        for i in range(3):
            await asyncio.to_thread(BAD_INPUTS[bad], broker, i)
            md = await c.request(MetadataRequest(version=12, topics=[
                MetadataRequest.MetadataRequestTopic(version=12, topic_id=None, name="steady")],
                allow_auto_topic_creation=False, include_topic_authorized_operations=False), 12)
            assert [(t.name, t.error_code, len(t.partitions)) for t in md.topics] == [("steady", 0, 1)]
            versions = await c.request(ApiVersionsRequest(version=3, client_software_name="t",
                                                          client_software_version="1"), 3)
            assert versions.error_code == 0 and any(k.api_key == 3 for k in versions.api_keys)
            resp = await c.request(_produce("steady", build_batch([(b"k", b"%d" % i)])), 9)
            assert resp.responses[0].partition_responses[0].error_code == 0
        assert await _latest_offset(c, "steady") == 3
    assert broker.running
