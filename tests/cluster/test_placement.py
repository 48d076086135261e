"""Replica placement (cluster/placement.py) and the controller's leader choice (cluster/controller.py):
pure functions, no etcd."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from cluster.controller import next_state
from cluster.placement import place_replicas
from cluster.records import PartitionState
from protocol.errors import ErrorCode, KafkaError


def test_round_robin_spreads_leaders_and_replicas_evenly() -> None:
    brokers = {1: None, 2: None, 3: None}
    placed = place_replicas(brokers, 6, 3, rng=random.Random(7))
    assert sorted(placed) == list(range(6))
    assert all(sorted(r) == [1, 2, 3] for r in placed.values())
    assert Counter(r[0] for r in placed.values()) == {1: 2, 2: 2, 3: 2}


def test_rf1_gives_each_broker_its_share_and_first_partition_offsets() -> None:
    placed = place_replicas({1: None, 2: None, 3: None}, 6, 1, first_partition=4, rng=random.Random(1))
    assert sorted(placed) == list(range(4, 10))
    assert Counter(r[0] for r in placed.values()) == {1: 2, 2: 2, 3: 2}


def test_rack_aware_replicas_span_racks() -> None:
    brokers = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    for seed in range(20):
        for replicas in place_replicas(brokers, 12, 3, rng=random.Random(seed)).values():
            assert len({brokers[r] for r in replicas}) == 3, replicas
    # Fewer racks than replicas: every rack is used, then the rest.
    two_racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    for replicas in place_replicas(two_racks, 8, 3, rng=random.Random(3)).values():
        assert len(set(replicas)) == 3 and {two_racks[r] for r in replicas} == {"a", "b"}


def test_too_few_brokers_is_invalid_replication_factor() -> None:
    with pytest.raises(KafkaError) as e:
        place_replicas({1: None, 2: None}, 1, 3)
    assert e.value.code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_next_state_moves_to_live_isr_member_or_goes_offline() -> None:
    s = PartitionState(1, 4, (1, 2), 9)
    assert next_state(s, [1, 2], {1, 2}) is None
    assert next_state(s, [1, 2], {2}) == PartitionState(2, 5, (2,), 9)  # failover, epoch + 1
    assert next_state(PartitionState(1, 4, (1,), 9), [1, 2], {2}) == PartitionState(-1, 5, (1,), 9)  # offline
    assert next_state(PartitionState(-1, 5, (1,), 10), [1, 2], {2}) is None  # stays offline
    assert next_state(PartitionState(-1, 5, (1,), 10), [1, 2], {1, 2}) == PartitionState(1, 6, (1,), 10)  # back
    assert next_state(PartitionState(1, 4, (1, 2), 9), [1, 2], {1}) == PartitionState(1, 4, (1,), 9)  # ISR shrink
