"""Pure rules of the cluster controller's admin duties: preferred/unclean elections, the auto-rebalance
threshold, and partition reassignment (start, completion, cancel), as KRaft decides them."""

from __future__ import annotations

import uuid

import pytest

from cluster import reassignment as ra
from cluster.leader_election import (
    PREFERRED,
    UNCLEAN,
    elect,
    imbalanced_brokers,
    rebalance,
)
from cluster.records import PartitionState, Reassignment, TopicRecord
from protocol.errors import ErrorCode, KafkaError


def st(leader: int, isr: tuple[int, ...], epoch: int = 3) -> PartitionState:
    return PartitionState(leader, epoch, isr, 7)


# --- elections -------------------------------------------------------------------------------------
def test_preferred_election_moves_to_the_first_replica_in_the_isr() -> None:
    new = elect(st(2, (1, 2, 3)), [1, 2, 3], {1, 2, 3}, PREFERRED)
    assert new == PartitionState(1, 4, (1, 2, 3), 7)  # epoch + 1, ISR kept; partition epoch bumped by the swap


def test_preferred_election_errors() -> None:
    assert elect(st(1, (1, 2)), [1, 2], {1, 2}, PREFERRED) == ErrorCode.ELECTION_NOT_NEEDED
    # preferred replica out of the ISR, or not live: the current leader stays
    assert elect(st(2, (2, 3)), [1, 2, 3], {1, 2, 3}, PREFERRED) == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    assert elect(st(2, (1, 2)), [1, 2], {2}, PREFERRED) == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    # nobody eligible at all
    assert elect(st(-1, (2,)), [1, 2], set(), PREFERRED) == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE


def test_preferred_election_replaces_a_dead_leader_when_the_preferred_cannot_lead() -> None:
    assert elect(st(2, (2, 3)), [1, 2, 3], {1, 3}, PREFERRED) == PartitionState(3, 4, (2, 3), 7)


def test_unclean_election() -> None:
    assert elect(st(2, (2,)), [1, 2], {1, 2}, UNCLEAN) == ErrorCode.ELECTION_NOT_NEEDED
    # a live ISR member first (clean), in replica order
    assert elect(st(-1, (3, 2)), [1, 2, 3], {2, 3}, UNCLEAN) == PartitionState(2, 4, (3, 2), 7)
    # no live ISR member: the first live replica leads alone
    assert elect(st(-1, (1,)), [1, 2, 3], {3, 2}, UNCLEAN) == PartitionState(2, 4, (2,), 7)
    assert elect(st(-1, (1,)), [1, 2], {3}, UNCLEAN) == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    assert elect(st(-1, (1,)), [1], {1}, 5) == ErrorCode.INVALID_REQUEST


# --- auto rebalance ------------------------------------------------------------------------------
def _parts(*rows: tuple[int, tuple[int, ...], list[int]]) -> dict:
    return {("t", i): (st(leader, isr), replicas) for i, (leader, isr, replicas) in enumerate(rows)}


def test_imbalance_ratio_per_broker() -> None:
    # broker 1 is preferred for 4 partitions and leads 3 of them: 25 %; broker 2 leads its 1 partition
    parts = _parts((1, (1, 2), [1, 2]), (1, (1, 2), [1, 2]), (1, (1, 2), [1, 2]), (2, (1, 2), [1, 2]),
                   (2, (1, 2), [2, 1]))
    assert imbalanced_brokers(parts, 10) == {1}
    assert imbalanced_brokers(parts, 25) == set()  # the ratio must exceed the percentage
    assert imbalanced_brokers(parts, 0) == {1}


def test_rebalance_moves_only_to_eligible_in_sync_preferred_replicas() -> None:
    parts = _parts((2, (1, 2), [1, 2]),   # moves back to 1
                   (2, (2,), [1, 2]),     # 1 not in the ISR: stays
                   (3, (3, 4), [4, 3]),   # 4 is not live: stays
                   (2, (1, 2), [2, 1]))   # balanced already
    moves = rebalance(parts, {1, 2, 3}, 10)
    assert moves == [(("t", 0), PartitionState(1, 4, (1, 2), 7))]
    assert rebalance(parts, {1, 2, 3}, 10, skip=[("t", 0)]) == []  # partitions being reassigned are left alone
    assert rebalance(parts, {1, 2, 3}, 100) == []  # below the threshold


def test_rebalance_is_bounded_per_pass() -> None:
    parts = _parts(*[(2, (1, 2), [1, 2])] * 5)
    assert len(rebalance(parts, {1, 2}, 0, limit=3)) == 3


# --- reassignment --------------------------------------------------------------------------------
def test_plan_orders_target_first_and_computes_adding_removing() -> None:
    assert ra.plan([1], [1, 2, 3]) == ([1, 2, 3], Reassignment((2, 3), ()))
    assert ra.plan([1, 2, 3], [3]) == ([3, 1, 2], Reassignment((), (1, 2)))
    assert ra.plan([1, 2], [3, 4]) == ([3, 4, 1, 2], Reassignment((3, 4), (1, 2)))
    assert ra.plan([1, 2, 3], [3, 2, 1]) == ([3, 2, 1], None)  # only a new order: nothing moves


def test_completion_waits_for_every_target_replica_in_the_isr() -> None:
    replicas, moving = ra.plan([1], [1, 2, 3])
    assert ra.complete(st(1, (1, 2)), replicas, moving, {1, 2, 3}) is None
    assert ra.complete(st(1, (1, 3, 2)), replicas, moving, {1, 2, 3}) == ([1, 2, 3], st(1, (1, 3, 2)))


def test_completion_elects_from_the_target_when_the_leader_leaves() -> None:
    replicas, moving = ra.plan([1, 2, 3], [3])
    assert replicas == [3, 1, 2]
    final, new = ra.complete(st(1, (1, 2, 3)), replicas, moving, {1, 2, 3})
    assert final == [3] and new == PartitionState(3, 4, (3,), 7)
    replicas, moving = ra.plan([1, 2], [3, 4])
    final, new = ra.complete(st(1, (1, 4, 3)), replicas, moving, {1, 3, 4})
    assert final == [3, 4] and new == PartitionState(3, 4, (4, 3), 7)


def test_cancel_reverts_to_the_original_replicas() -> None:
    replicas, moving = ra.plan([1], [2, 3])
    assert replicas == [2, 3, 1]
    assert ra.revert(st(1, (1, 2)), replicas, moving, {1, 2, 3}) == ([1], st(1, (1,)))
    # the leader had moved to an added replica: back to an original one
    assert ra.revert(st(2, (2, 1)), replicas, moving, {1, 2, 3}) == ([1], PartitionState(1, 4, (1,), 7))
    # no original replica in the ISR any more: the first live original leads alone (unclean)
    assert ra.revert(st(2, (2,)), replicas, moving, {1, 2}) == ([1], PartitionState(1, 4, (1,), 7))
    assert ra.revert(st(2, (2,)), replicas, moving, {2}) == ([1], PartitionState(-1, 4, (1,), 7))


def test_validate_target() -> None:
    ra.validate_target([1, 2], {1, 2, 3})
    for bad in ([], [1, 1], [1, 9]):
        with pytest.raises(KafkaError) as e:
            ra.validate_target(bad, {1, 2, 3})
        assert e.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT


def test_topic_record_reassignments_round_trip_and_old_records_read() -> None:
    rec = TopicRecord("t", uuid.uuid4(), {0: [2, 3, 1], 1: [1]}, {"a": "b"}, {0: Reassignment((2, 3), (1,))})
    assert TopicRecord.from_json(rec.to_json()) == rec
    plain = TopicRecord("t", rec.topic_id, {0: [1]})
    assert b"reassignments" not in plain.to_json()  # records without one look as before
    assert TopicRecord.from_json(plain.to_json()).reassignments == {}


def test_automatic_unclean_election_only_when_enabled() -> None:
    from cluster.controller import next_state
    from cluster.records import PartitionState

    # Leader 1 and the rest of the ISR are dead; replica 3 is live but out of sync.
    dead_isr = PartitionState(1, 4, (1, 2), 9)
    assert next_state(dead_isr, [1, 2, 3], {3}) == PartitionState(-1, 5, (2,), 9)  # offline, as Kafka
    assert next_state(dead_isr, [1, 2, 3], {3}, unclean=True) == PartitionState(3, 5, (3,), 9)
    # A live ISR member always wins over an unclean choice.
    assert next_state(dead_isr, [1, 2, 3], {2, 3}, unclean=True) == PartitionState(2, 5, (2,), 9)
    # Brokers that may not lead (controlled shutdown) are not chosen either.
    assert next_state(dead_isr, [1, 2, 3], {3}, {1, 2}, unclean=True) == PartitionState(-1, 5, (2,), 9)
