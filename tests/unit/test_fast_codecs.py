"""The hand-written Produce/Fetch codecs agree byte for byte with kafka-python's generic codec."""

from __future__ import annotations

import random
import uuid

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceRequest

from protocol.fast_codecs import (
    DecodeError,
    FetchPartitionOut,
    decode_fetch_response,
    decode_produce_request,
    encode_fetch_request_v12,
    encode_fetch_response,
)
from storage.batch import build_batch

BATCH = build_batch([(b"k", b"v" * 50)])


@pytest.mark.parametrize("version", range(3, 13))
def test_produce_decode_matches_kafka_python(version):
    P = ProduceRequest.TopicProduceData
    req = ProduceRequest(version=version, transactional_id="tx" if version % 2 else None, acks=-1, timeout_ms=1234,
                         topic_data=[P(version=version, name=f"t{i}", partition_data=[
                             P.PartitionProduceData(version=version, index=j, records=BATCH if j != 2 else None)
                             for j in range(3)]) for i in range(2)])
    body = bytearray(req.encode(version=version))
    ours = decode_produce_request(memoryview(body), version)
    theirs = ProduceRequest.decode(bytes(body), version=version)
    assert (ours.transactional_id, ours.acks, ours.timeout_ms) == (theirs.transactional_id, theirs.acks,
                                                                    theirs.timeout_ms)
    for t_ours, t_theirs in zip(ours.topic_data, theirs.topic_data, strict=True):
        assert t_ours.name == t_theirs.name
        for p_ours, p_theirs in zip(t_ours.partition_data, t_theirs.partition_data, strict=True):
            assert p_ours.index == p_theirs.index
            assert (None if p_ours.records is None else bytes(p_ours.records)) == p_theirs.records
    # Records are views into the frame: patching them patches the frame.
    rec = ours.topic_data[0].partition_data[0].records
    rec[0] = 0x7F
    assert 0x7F in body


def test_truncated_produce_request_raises():
    P = ProduceRequest.TopicProduceData
    req = ProduceRequest(version=9, transactional_id=None, acks=1, timeout_ms=1, topic_data=[
        P(version=9, name="t", partition_data=[P.PartitionProduceData(version=9, index=0, records=BATCH)])])
    body = bytes(req.encode(version=9))
    with pytest.raises(DecodeError):
        decode_produce_request(memoryview(body[:-20]), 9)


@pytest.mark.parametrize("version", range(4, 18))
def test_fetch_encode_matches_kafka_python(version):
    tid = uuid.uuid4()
    parts = [FetchPartitionOut(0, 0, 10, 8, 0, None, BATCH), FetchPartitionOut(1, 1, -1, -1, -1, None, b""),
             FetchPartitionOut(2, 0, 5, 5, 2, [(7, 3), (9, 4)], BATCH + BATCH)]
    chunks = encode_fetch_response(version, 0, 0, [("topic-a", tid, parts)])
    ours = b"".join(bytes(c) for c in chunks)
    T = FetchResponse.FetchableTopicResponse
    PD = T.PartitionData
    resp = FetchResponse(version=version, throttle_time_ms=0, error_code=0, session_id=0, responses=[
        T(version=version, topic="topic-a", topic_id=tid, partitions=[
            PD(version=version, partition_index=p.index, error_code=p.error_code, high_watermark=p.high_watermark,
               last_stable_offset=p.last_stable_offset, log_start_offset=p.log_start_offset,
               aborted_transactions=None if p.aborted is None else [
                   PD.AbortedTransaction(version=version, producer_id=a, first_offset=b) for a, b in p.aborted],
               preferred_read_replica=-1, records=bytes(p.records)) for p in parts])])
    assert ours == bytes(resp.encode(version=version))
    # The record bytes are passed through, not copied.
    assert any(c is BATCH for c in chunks)


def test_fetch_v12_decode_agrees_with_kafka_python_and_keeps_records_in_place():
    """A follower's fetch answer: decode_fetch_response reads what kafka-python reads, with the
    records as views into the response buffer (not copies), and the tagged DivergingEpoch and
    CurrentLeader fields."""
    parts = [FetchPartitionOut(0, 0, 10, 8, 0, None, BATCH),
             FetchPartitionOut(1, 6, -1, -1, -1, None, b"", current_leader=(3, 9)),
             FetchPartitionOut(2, 0, 5, 5, 2, [(7, 3), (9, 4)], BATCH + BATCH, diverging_epoch=(4, 77))]
    body = bytearray(b"".join(bytes(c) for c in encode_fetch_response(12, 0, 1234, [("topic-a", None, parts),
                                                                                   ("b", None, parts[:1])])))
    ours = decode_fetch_response(memoryview(body), 12)
    theirs = FetchResponse.decode(bytes(body), version=12)
    assert (ours.error_code, ours.session_id) == (theirs.error_code, theirs.session_id) == (0, 1234)
    assert [t.topic for t in ours.responses] == [t.topic for t in theirs.responses] == ["topic-a", "b"]
    for t_ours, t_theirs in zip(ours.responses, theirs.responses, strict=True):
        for p, q in zip(t_ours.partitions, t_theirs.partitions, strict=True):
            assert (p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset) == \
                (q.partition_index, q.error_code, q.high_watermark, q.last_stable_offset, q.log_start_offset)
            assert bytes(p.records or b"") == bytes(q.records or b"")
            assert (p.aborted_transactions or []) == [(a.producer_id, a.first_offset)
                                                      for a in q.aborted_transactions or []]
    p0, p1, p2 = ours.responses[0].partitions
    assert p0.records.obj is body  # a view into the frame
    assert p1.current_leader == (3, 9) and p1.diverging_epoch is None
    assert (p2.diverging_epoch.epoch, p2.diverging_epoch.end_offset) == (4, 77)
    with pytest.raises(DecodeError):
        decode_fetch_response(memoryview(body[:40]), 12)


def _bits(value: int) -> set[int] | None:
    """kafka-python's "bitfield": a set of bit positions, None for INT32_MIN ("not requested")."""
    return None if value == -2147483648 else {i for i in range(32) if value >> i & 1}


@pytest.mark.parametrize("version", range(0, 13))
def test_metadata_encode_matches_kafka_python(version):
    from kafka.protocol.metadata import MetadataResponse

    from protocol.fast_codecs import encode_metadata_response

    tid = uuid.uuid4()
    brokers = [(1, "127.0.0.1", 9092, None), (2, "h2", 9093, "rack-b")]
    parts = [(0, 0, 1, 3, [1, 2], [1, 2], []), (5, 1, -1, 4, [2, 1], [2], [1])]
    topics = [(0, "orders", tid, False, parts, -2147483648), (3, "gone", None, False, [], 1234),
              (0, "__consumer_offsets", uuid.uuid4(), True, parts[:1], 8)]
    if version >= 12:
        topics.append((100, None, uuid.uuid4(), False, [], -2147483648))  # an unknown topic id
    ours = encode_metadata_response(version, brokers, "cid", 2, topics, 77 if 8 <= version <= 10 else -2147483648)
    T = MetadataResponse.MetadataResponseTopic
    P = T.MetadataResponsePartition
    resp = MetadataResponse(version=version, throttle_time_ms=0, brokers=[
        MetadataResponse.MetadataResponseBroker(version=version, node_id=n, host=h, port=p, rack=r)
        for n, h, p, r in brokers], cluster_id="cid", controller_id=2, topics=[
        T(version=version, error_code=e, name=name, topic_id=t_id, is_internal=internal, partitions=[
            P(version=version, error_code=pe, partition_index=i, leader_id=leader, leader_epoch=epoch,
              replica_nodes=r, isr_nodes=isr, offline_replicas=off) for pe, i, leader, epoch, r, isr, off in ps],
          authorized_operations=_bits(ops))
        for e, name, t_id, internal, ps, ops in topics],
        authorized_operations=_bits(77) if 8 <= version <= 10 else None, error_code=0)
    assert ours == bytes(resp.encode(version=version))


def _kafka_python_fetch_request_v12(head, topics, forgotten, rack_id):
    T = FetchRequest.FetchTopic
    return FetchRequest(
        version=12, replica_id=head[0], max_wait_ms=head[1], min_bytes=head[2], max_bytes=head[3],
        isolation_level=head[4], session_id=head[5], session_epoch=head[6],
        topics=[T(version=12, topic=name, partitions=[T.FetchPartition(
            version=12, partition=p, current_leader_epoch=cle, fetch_offset=fo, last_fetched_epoch=lfe,
            log_start_offset=lso, partition_max_bytes=mb) for p, cle, fo, lfe, lso, mb in parts])
            for name, parts in topics],
        forgotten_topics_data=[FetchRequest.ForgottenTopic(version=12, topic=name, partitions=idx)
                               for name, idx in forgotten],
        rack_id=rack_id).encode(version=12)


@pytest.mark.parametrize("shape", ["empty", "one", "many", "forgotten-only", "long-names"])
def test_follower_fetch_request_encode_matches_kafka_python(shape):
    """The follower's hand-encoded FetchRequest v12 is byte for byte kafka-python's encoding
    (itself checked against Kafka's schema), for every shape a session sends: an incremental fetch
    naming nothing, one or many partitions of several topics, only forgotten partitions, and names
    long enough for a two-byte length varint."""
    rng = random.Random(shape)
    head = (rng.randrange(0, 1000), 500, 1, 10485760, 0, rng.randrange(0, 2**31), rng.randrange(-1, 2**31))

    def parts(n):
        return [(rng.randrange(0, 10000), rng.randrange(-1, 500), rng.randrange(0, 2**62), rng.randrange(-1, 500),
                 rng.randrange(-1, 2**40), rng.randrange(0, 2**31)) for _ in range(n)]

    topics, forgotten, rack = [], [], ""
    if shape == "one":
        topics = [("__transaction_state", parts(1))]
    elif shape == "many":
        topics = [(f"topic-{i}-é", parts(rng.randrange(1, 40))) for i in range(7)]
        forgotten = [("gone", [3, 1, 2]), ("x", [0])]
    elif shape == "forgotten-only":
        forgotten = [(f"t{i}", list(range(rng.randrange(1, 200)))) for i in range(3)]
    elif shape == "long-names":
        topics = [("n" * 249, parts(130))]
        forgotten = [("m" * 200, list(range(300)))]
        rack = "rack-" * 30
    ours = encode_fetch_request_v12(*head, topics, forgotten, rack)
    assert ours.API_KEY == 1 and ours.encode(12) == bytes(_kafka_python_fetch_request_v12(head, topics, forgotten, rack))
    with pytest.raises(ValueError):
        ours.encode(13)
