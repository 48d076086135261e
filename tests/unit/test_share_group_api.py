"""protocol.share_group_api: the KIP-932 structs encode and decode the bytes Kafka 4.2's schemas define."""

from __future__ import annotations

import struct
import uuid

from protocol import share_group_api as S
from protocol.api_table import get_spec


def test_every_share_api_is_registered_at_kafka_versions() -> None:
    expected = {76: 1, 77: 1, 78: 1, 79: 1, 83: 0, 84: 0, 85: 0, 86: 0, 87: 0, 90: 0, 91: 0, 92: 0}
    for key, max_version in expected.items():
        spec = get_spec(key)
        assert spec is not None and spec.schema_max_version == max_version
        assert spec.request_flexible(max_version)


def _compact_string(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode()
    return bytes([len(raw) + 1]) + raw


def test_share_fetch_request_as_librdkafka_writes_it() -> None:
    # Field by field as rd_kafka_ShareFetchRequest writes v1: group, member, epoch, wait, min/max bytes,
    # max records, batch size, one topic with one partition and one acknowledgement batch.
    tid = uuid.uuid4()
    body = (_compact_string("g") + _compact_string("m") + struct.pack(">iiiiii", 3, 500, 1, 52428800, 500, 500)
            + b"\x02" + tid.bytes + b"\x02" + struct.pack(">i", 4)
            + b"\x02" + struct.pack(">qq", 10, 19) + b"\x02\x01" + b"\x00"  # one batch, types [ACCEPT]
            + b"\x00" + b"\x00"  # partition tags, topic tags
            + b"\x01" + b"\x00")  # no forgotten topics, request tags
    req = S.ShareFetchRequest.decode(body, version=1)
    assert (req.group_id, req.member_id, req.share_session_epoch, req.max_records, req.batch_size) == ("g", "m", 3,
                                                                                                     500, 500)
    part = req.topics[0].partitions[0]
    assert req.topics[0].topic_id == tid and part.partition_index == 4
    batch = part.acknowledgement_batches[0]
    assert (batch.first_offset, batch.last_offset, list(batch.acknowledge_types)) == (10, 19, [1])


def test_share_fetch_response_round_trip_keeps_records_and_acquired_ranges() -> None:
    R = S.ShareFetchResponse
    T = R.ShareFetchableTopicResponse
    P = T.PartitionData
    tid = uuid.uuid4()
    resp = R(version=1, throttle_time_ms=0, error_code=0, error_message=None, acquisition_lock_timeout_ms=15000,
             responses=[T(version=1, topic_id=tid, partitions=[P(
                 version=1, partition_index=2, error_code=0, error_message=None, acknowledge_error_code=0,
                 acknowledge_error_message=None, current_leader=P.LeaderIdAndEpoch(version=1, leader_id=-1,
                                                                                   leader_epoch=-1),
                 records=b"batches", acquired_records=[P.AcquiredRecords(version=1, first_offset=5, last_offset=9,
                                                                         delivery_count=2)])])],
             node_endpoints=[])
    back = R.decode(resp.encode(version=1), version=1)
    part = back.responses[0].partitions[0]
    assert back.acquisition_lock_timeout_ms == 15000 and bytes(part.records) == b"batches"
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in part.acquired_records] == [(5, 9, 2)]


def test_heartbeat_response_assignment_is_nullable() -> None:
    H = S.ShareGroupHeartbeatResponse
    tid = uuid.uuid4()
    none = H(version=1, throttle_time_ms=0, error_code=0, error_message=None, member_id="m", member_epoch=3,
             heartbeat_interval_ms=5000, assignment=None)
    assert H.decode(none.encode(version=1), version=1).assignment is None
    some = H(version=1, throttle_time_ms=0, error_code=0, error_message=None, member_id="m", member_epoch=3,
             heartbeat_interval_ms=5000, assignment=H.Assignment(version=1, topic_partitions=[
                 H.Assignment.TopicPartitions(version=1, topic_id=tid, partitions=[0, 2])]))
    tp = H.decode(some.encode(version=1), version=1).assignment.topic_partitions[0]
    assert (tp.topic_id, list(tp.partitions)) == (tid, [0, 2])


def test_write_state_round_trip() -> None:
    W = S.WriteShareGroupStateRequest
    D = W.WriteStateData
    P = D.PartitionData
    tid = uuid.uuid4()
    req = W(version=0, group_id="g", topics=[D(version=0, topic_id=tid, partitions=[P(
        version=0, partition=1, state_epoch=2, leader_epoch=3, start_offset=40, state_batches=[
            P.StateBatch(version=0, first_offset=40, last_offset=49, delivery_state=2, delivery_count=1)])])])
    back = W.decode(req.encode(version=0), version=0)
    p = back.topics[0].partitions[0]
    assert (p.partition, p.state_epoch, p.leader_epoch, p.start_offset) == (1, 2, 3, 40)
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches] == [
        (40, 49, 2, 1)]
