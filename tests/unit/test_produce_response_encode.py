"""protocol.produce_response writes the same bytes as kafka-python's ProduceResponse encoder, for
every version the broker serves and every optional part (record errors, messages, KIP-951's
CurrentLeader and NodeEndpoints)."""

from __future__ import annotations

import random

import pytest
from kafka.protocol.producer import ProduceResponse

from protocol.produce_response import ProducePartitionResult, ProduceResult, ProduceTopicResult

TopicResp = ProduceResponse.TopicProduceResponse
PartResp = TopicResp.PartitionProduceResponse


def _both(version: int, rng: random.Random) -> tuple[ProduceResult, ProduceResponse]:
    ours_topics, theirs_topics = [], []
    leaders: set[int] = set()
    for t in range(rng.randint(0, 3)):
        ours_parts, theirs_parts = [], []
        for _ in range(rng.randint(0, 3)):
            index, code = rng.randint(0, 99), rng.choice((0, 0, 6, 87))
            base, lat, lso = rng.randint(-1, 2**40), rng.choice((-1, 1_700_000_000_000)), rng.randint(-1, 2**30)
            errors = [(rng.randint(0, 9), rng.choice((None, "bad record", "é"))) for _ in range(rng.randint(0, 2))]
            message = rng.choice((None, "", "Flushing t-0 failed"))
            leader = (rng.randint(1, 3), rng.randint(0, 9)) if code == 6 else None
            ours_parts.append(ProducePartitionResult(index, code, base, lat, lso, errors, message, leader))
            kw = {}
            if leader is not None and version >= 10:
                leaders.add(leader[0])
                kw["current_leader"] = PartResp.LeaderIdAndEpoch(version=version, leader_id=leader[0],
                                                                  leader_epoch=leader[1])
            theirs_parts.append(PartResp(
                version=version, index=index, error_code=code, base_offset=base, log_append_time_ms=lat,
                log_start_offset=lso, error_message=message,
                record_errors=[PartResp.BatchIndexAndErrorMessage(version=version, batch_index=i,
                                                                  batch_index_error_message=m)
                               for i, m in (errors if version >= 8 else [])],
                **kw))
        name = f"topic-{t}-ü"
        ours_topics.append(ProduceTopicResult(name, ours_parts))
        theirs_topics.append(TopicResp(version=version, name=name, partition_responses=theirs_parts))
    throttle = rng.choice((0, 250))
    endpoints = [(n, f"host-{n}", 9090 + n, rng.choice((None, "rack-a"))) for n in sorted(leaders)]
    kw = {}
    if endpoints:
        kw["node_endpoints"] = [ProduceResponse.NodeEndpoint(version=version, node_id=n, host=h, port=p, rack=r)
                                for n, h, p, r in endpoints]
    return (ProduceResult(ours_topics, throttle, endpoints),
            ProduceResponse(version=version, responses=theirs_topics, throttle_time_ms=throttle, **kw))


@pytest.mark.parametrize("version", range(3, 13))
@pytest.mark.parametrize("seed", range(6))
def test_encode_matches_kafka_python(version: int, seed: int) -> None:
    ours, theirs = _both(version, random.Random(version * 31 + seed))
    assert ours.encode(version=version) == theirs.encode(version=version)


def test_one_partition_written_as_kafka_python_writes_it() -> None:
    ours = ProduceResult([ProduceTopicResult("t", [ProducePartitionResult(0, 0, 42, -1, 0)])])
    theirs = ProduceResponse(version=10, throttle_time_ms=0, responses=[TopicResp(version=10, name="t", partition_responses=[
        PartResp(version=10, index=0, error_code=0, base_offset=42, log_append_time_ms=-1, log_start_offset=0,
                 record_errors=[], error_message=None)])])
    assert ours.encode(version=10) == theirs.encode(version=10)
    decoded = ProduceResponse.decode(ours.encode(version=10), version=10)
    assert decoded.responses[0].partition_responses[0].base_offset == 42


def test_unserved_versions_refused() -> None:
    with pytest.raises(ValueError):
        ProduceResult([]).encode(version=13)
