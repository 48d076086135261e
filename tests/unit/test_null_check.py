"""protocol.null_check: which fields may not be null comes from the schema (nullableVersions)."""

from __future__ import annotations

import pytest
from kafka.protocol.consumer import OffsetFetchRequest
from kafka.protocol.metadata import MetadataRequest

import protocol.consumer_group_api  # noqa: F401
from protocol.api_table import all_specs, get_spec
from protocol.fast_codecs import DecodeError, decode_produce_request
from protocol.null_check import NullFieldError, check_request, checker_for
from protocol.response_summary import error_summary


def test_every_request_schema_compiles():
    for spec in all_specs().values():
        for v in range(spec.schema_max_version + 1):
            checker_for(spec.request, v)


def test_nullable_fields_pass_and_non_nullable_fail():
    # Metadata topics are nullable from v1: null topics pass (only string lengths are checked there).
    md = MetadataRequest(version=12, topics=None, allow_auto_topic_creation=False,
                         include_topic_authorized_operations=False)
    assert checker_for(MetadataRequest, 12)(md) is None
    ok = OffsetFetchRequest(version=7, group_id="g", topics=None, require_stable=False)
    check_request(OffsetFetchRequest, 7, ok)  # topics null = all topics (nullable since v2)
    bad = OffsetFetchRequest(version=7, group_id=None, topics=None, require_stable=False)
    with pytest.raises(NullFieldError, match="GroupId"):
        check_request(OffsetFetchRequest, 7, bad)
    # v1 topics are not nullable.
    with pytest.raises(NullFieldError, match="Topics"):
        check_request(OffsetFetchRequest, 1, OffsetFetchRequest(version=1, group_id="g", topics=None))


def test_nested_and_element_nulls():
    spec = get_spec(42)  # DeleteGroups: []string groups_names
    req = spec.request(version=2, groups_names=["a", None])
    with pytest.raises(NullFieldError, match=r"GroupsNames\[\]"):
        check_request(spec.request, 2, req)
    spec = get_spec(35)  # DescribeLogDirs: topics nullable, topics[].topic not
    T = spec.request.DescribableLogDirTopic
    check_request(spec.request, 4, spec.request(version=4, topics=None))
    with pytest.raises(NullFieldError, match=r"Topics\[\].Topic"):
        check_request(spec.request, 4, spec.request(version=4, topics=[T(version=4, topic=None, partitions=[])]))


def test_produce_decoder_rejects_null_arrays():
    # ProduceRequest v3: transactional_id null (nullable), acks, timeout, topic_data null (not nullable).
    body = b"\xff\xff" + b"\x00\x01" + b"\x00\x00\x13\x88" + b"\xff\xff\xff\xff"
    with pytest.raises(DecodeError, match="TopicData"):
        decode_produce_request(memoryview(body), 3)


def test_error_summary_for_the_request_log():
    from kafka.protocol.consumer import OffsetCommitResponse as R
    T = R.OffsetCommitResponseTopic
    P = T.OffsetCommitResponsePartition
    resp = R(version=8, throttle_time_ms=0, topics=[T(version=8, name="a", partitions=[
        P(version=8, partition_index=0, error_code=0), P(version=8, partition_index=1, error_code=3)])])
    assert error_summary(8, 8, resp) == "3@topics[].partitions[]"
    assert error_summary(0, 9, None) == "none"
    # The Produce answer is a plain dataclass (protocol.produce_response), walked the same way.
    from protocol.produce_response import ProducePartitionResult, ProduceResult, ProduceTopicResult
    produce = ProduceResult([ProduceTopicResult("t", [ProducePartitionResult(0, 0, 5), ProducePartitionResult(1, 6),
                                                      ProducePartitionResult(2, 6)])])
    assert error_summary(0, 9, produce) == "6@responses[].partition_responses[]x2"
    assert error_summary(0, 9, ProduceResult([ProduceTopicResult("t", [ProducePartitionResult(0, 0, 5)])])) == "0"


def test_strings_longer_than_a_short_are_refused_in_flexible_versions():
    """Kafka's readers: "string field X had invalid length N" (a fuzzer found 40,000-byte group and
    transactional ids accepted, then failing every later encoding of them)."""
    spec = get_spec(22)  # InitProducerId
    ok = spec.request(version=4, transactional_id="t" * 32767, transaction_timeout_ms=1000, producer_id=-1,
                      producer_epoch=-1)
    check_request(spec.request, 4, ok)
    long = spec.request(version=4, transactional_id="t" * 32768, transaction_timeout_ms=1000, producer_id=-1,
                        producer_epoch=-1)
    with pytest.raises(NullFieldError, match="string field TransactionalId had invalid length 32768"):
        check_request(spec.request, 4, long)
    wide = spec.request(version=4, transactional_id="\u00e9" * 20000, transaction_timeout_ms=1000, producer_id=-1,
                        producer_epoch=-1)  # 20,000 characters, 40,000 UTF-8 bytes
    with pytest.raises(NullFieldError, match="invalid length 40000"):
        check_request(spec.request, 4, wide)
    groups = get_spec(15)  # DescribeGroups v5 (flexible): []string groups
    with pytest.raises(NullFieldError, match=r"string field Groups\[\] had invalid length"):
        check_request(groups.request, 5, groups.request(version=5, groups=["g", "x" * 40000],
                                                        include_authorized_operations=False))
