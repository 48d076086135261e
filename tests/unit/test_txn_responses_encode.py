"""protocol.txn_responses writes the same bytes as kafka-python's encoders for AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn and TxnOffsetCommit answers, every version the broker serves."""

from __future__ import annotations

import random

import pytest
from kafka.protocol.producer import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    TxnOffsetCommitResponse,
)

from protocol.txn_responses import (
    AddOffsetsToTxnResult,
    AddPartitionsToTxnResult,
    EndTxnResult,
    TransactionResult,
    TxnOffsetCommitResult,
    topic_errors,
)


def _codes(rng: random.Random) -> list[tuple[tuple[str, int], int]]:
    return [((f"t{rng.randint(0, 2)}-é", rng.randint(0, 40)), rng.choice((0, 0, 47, 53, 90)))
            for _ in range(rng.randint(0, 6))]


@pytest.mark.parametrize("version", range(0, 4))
def test_add_offsets(version: int) -> None:
    for code in (0, 51):
        theirs = AddOffsetsToTxnResponse(version=version, throttle_time_ms=7, error_code=code)
        assert AddOffsetsToTxnResult(code, 7).encode(version) == theirs.encode(version=version)


@pytest.mark.parametrize("version", range(0, 6))
def test_end_txn(version: int) -> None:
    for code, pid, epoch in ((0, 4242, 3), (90, -1, -1)):
        theirs = EndTxnResponse(version=version, throttle_time_ms=0, error_code=code, producer_id=pid,
                                producer_epoch=epoch)
        assert EndTxnResult(code, pid, epoch).encode(version) == theirs.encode(version=version)


@pytest.mark.parametrize("version", range(0, 6))
@pytest.mark.parametrize("seed", range(4))
def test_txn_offset_commit(version: int, seed: int) -> None:
    T = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
    P = T.TxnOffsetCommitResponsePartition
    codes = _codes(random.Random(seed))
    topics = topic_errors(codes)
    theirs = TxnOffsetCommitResponse(version=version, throttle_time_ms=0, topics=[
        T(version=version, name=t.name, partitions=[P(version=version, partition_index=p.partition_index,
                                                      error_code=p.error_code) for p in t.partitions])
        for t in topics])
    assert TxnOffsetCommitResult(topics).encode(version) == theirs.encode(version=version)


@pytest.mark.parametrize("version", range(0, 6))
@pytest.mark.parametrize("seed", range(4))
def test_add_partitions(version: int, seed: int) -> None:
    rng = random.Random(seed)
    R = AddPartitionsToTxnResponse.AddPartitionsToTxnResult

    def theirs_topics(topics, topic_cls):  # noqa: ANN001, ANN202 - kafka-python classes
        part_cls = topic_cls.AddPartitionsToTxnPartitionResult
        return [topic_cls(version=version, name=t.name, results_by_partition=[
            part_cls(version=version, partition_index=p.partition_index, partition_error_code=p.error_code)
            for p in t.partitions]) for t in topics]

    if version <= 3:
        topics = topic_errors(_codes(rng))
        theirs = AddPartitionsToTxnResponse(version=version, throttle_time_ms=0, results_by_topic_v3_and_below=
                                            theirs_topics(topics, AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult))
        ours = AddPartitionsToTxnResult(results_by_topic_v3_and_below=topics)
    else:
        txns = [TransactionResult(f"tx-{i}", topic_errors(_codes(rng))) for i in range(rng.randint(0, 3))]
        code = rng.choice((0, 31))
        theirs = AddPartitionsToTxnResponse(version=version, throttle_time_ms=0, error_code=code, results_by_transaction=[
            R(version=version, transactional_id=t.transactional_id,
              topic_results=theirs_topics(t.topic_results, R.AddPartitionsToTxnTopicResult)) for t in txns])
        ours = AddPartitionsToTxnResult(results_by_transaction=txns, error_code=code)
    assert ours.encode(version) == theirs.encode(version=version)


def test_topic_errors_group_in_first_seen_order() -> None:
    topics = topic_errors([(("b", 1), 0), (("a", 0), 3), (("b", 0), 0)])
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in topics] == [
        ("b", [(1, 0), (0, 0)]), ("a", [(0, 3)])]
