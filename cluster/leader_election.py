"""Leader elections other than failover: preferred (ElectLeaders type 0, auto rebalance) and unclean (type 1).

Pure functions over a partition's state, its replica list and the brokers that may lead (live and
not shutting down); the callers (``EtcdMetadataStore.elect_leaders``, ``cluster.controller``) write
the result by compare-and-swap. The rules are KRaft's (ReplicationControlManager.electLeader with
PartitionChangeBuilder):

* PREFERRED: not needed when the first replica already leads; the first replica is elected when it
  is in the ISR and eligible; otherwise, when the current leader is still eligible nothing changes
  (PREFERRED_LEADER_NOT_AVAILABLE), and when it is not, the first eligible ISR member in replica
  order takes over;
* UNCLEAN: not needed while the partition has a leader; the first eligible ISR member in replica
  order, else the first eligible replica, whose ISR then is itself alone (data outside the old ISR
  may be lost: that is what "unclean" means); none: ELIGIBLE_LEADERS_NOT_AVAILABLE.

Every elected leader gets leader_epoch + 1.

Auto rebalance (``auto.leader.rebalance.enable``): every ``leader.imbalance.check.interval.seconds``
the controller moves leadership back to preferred replicas. KRaft's controller does it for every
partition whose preferred replica can lead (its maybeBalancePartitionLeaders has no threshold); the
ZooKeeper controller only for brokers whose share of lost preferred leaderships exceeds
``leader.imbalance.per.broker.percentage``. kbroker keeps that per-broker threshold (default 10 %),
since the setting exists; 0 gives KRaft's behaviour. Partitions under reassignment are left alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from protocol.errors import ErrorCode

from .records import PartitionState

PREFERRED, UNCLEAN = 0, 1
# KRaft's controller bounds one rebalance pass (maxElectionsPerImbalance); the rest waits for the next.
MAX_ELECTIONS_PER_PASS = 1000


def _elected(state: PartitionState, leader: int, isr: tuple[int, ...] | None = None) -> PartitionState:
    return replace(state, leader=leader, leader_epoch=state.leader_epoch + 1,
                   isr=state.isr if isr is None else isr)


def elect(state: PartitionState, replicas: list[int], eligible: set[int] | frozenset[int],
          election_type: int) -> PartitionState | ErrorCode:
    """The new state of an ElectLeaders election, or the per-partition error code."""
    if election_type == PREFERRED:
        return elect_preferred(state, replicas, eligible)
    if election_type == UNCLEAN:
        return elect_unclean(state, replicas, eligible)
    return ErrorCode.INVALID_REQUEST


def elect_preferred(state: PartitionState, replicas: list[int], eligible: set[int] | frozenset[int]
                    ) -> PartitionState | ErrorCode:
    if not replicas or state.leader == replicas[0]:
        return ErrorCode.ELECTION_NOT_NEEDED
    preferred = replicas[0]
    if preferred in state.isr and preferred in eligible:
        return _elected(state, preferred)
    if state.leader in eligible and state.leader in state.isr:
        return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    other = next((r for r in replicas[1:] if r in state.isr and r in eligible and r != state.leader), None)
    return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE if other is None else _elected(state, other)


def elect_unclean(state: PartitionState, replicas: list[int], eligible: set[int] | frozenset[int]
                  ) -> PartitionState | ErrorCode:
    if state.leader != -1:
        return ErrorCode.ELECTION_NOT_NEEDED
    clean = next((r for r in replicas if r in state.isr and r in eligible), None)
    if clean is not None:
        return _elected(state, clean)
    anyone = next((r for r in replicas if r in eligible), None)
    if anyone is None:
        return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    return _elected(state, anyone, (anyone,))


def imbalanced_brokers(partitions: Mapping[object, tuple[PartitionState, list[int]]], percentage: int) -> set[int]:
    """Brokers whose share of partitions they are preferred for but do not lead exceeds ``percentage``
    (the ZooKeeper controller's checkAndTriggerAutoLeaderRebalance ratio)."""
    preferred: dict[int, int] = {}
    lost: dict[int, int] = {}
    for state, replicas in partitions.values():
        if not replicas:
            continue
        b = replicas[0]
        preferred[b] = preferred.get(b, 0) + 1
        if state.leader != b:
            lost[b] = lost.get(b, 0) + 1
    return {b for b, n in preferred.items() if lost.get(b, 0) / n > percentage / 100}


def rebalance(partitions: Mapping[object, tuple[PartitionState, list[int]]], eligible: set[int] | frozenset[int],
              percentage: int, *, skip: Iterable[object] = (), limit: int = MAX_ELECTIONS_PER_PASS
              ) -> list[tuple[object, PartitionState]]:
    """The preferred-leader elections of one auto-rebalance pass: (partition key, new state), at most
    ``limit``; only moves to a preferred replica that is eligible and in the ISR."""
    brokers = imbalanced_brokers(partitions, percentage)
    skipped = set(skip)
    moves: list[tuple[object, PartitionState]] = []
    for key, (state, replicas) in partitions.items():
        if len(moves) >= limit:
            break
        if key in skipped or not replicas or replicas[0] not in brokers or state.leader == replicas[0]:
            continue
        preferred = replicas[0]
        if preferred in state.isr and preferred in eligible:
            moves.append((key, _elected(state, preferred)))
    return moves
