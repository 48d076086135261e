"""Partition reassignment rules (KIP-455, as KRaft's PartitionReassignmentReplicas / PartitionChangeBuilder).

Pure functions; ``EtcdMetadataStore.alter_reassignments`` and the controller write their results in
one etcd transaction (topic record + partition states) guarded by the mod revisions they were
computed from.

* **Start** with target replicas T on a partition with replicas R: the replica list becomes
  T + (R - T) (target first, so the target's first replica is the preferred leader), adding =
  T - R, removing = R - T. The ISR does not change: new replicas join it once they caught up (the
  partition leader expands it). A target that adds nothing and removes nothing only reorders.
* **Completion**, as soon as every target replica is in the ISR (checked at start too, so a pure
  shrink completes at once): replicas = T, ISR = ISR ∩ T, and a leader outside T (or no longer
  eligible) is replaced by the first eligible ISR member in target order, leader_epoch + 1.
* **Cancel** (null replicas): back to the original replicas R = replicas - adding, ISR - adding;
  a leader among the added replicas is replaced the same way. If no original replica is left in the
  ISR, the first eligible original replica leads alone (KRaft's revert is unclean in that case too).
"""

from __future__ import annotations

from dataclasses import replace

from protocol.errors import ErrorCode, KafkaError

from .records import PartitionState, Reassignment


def validate_target(target: list[int], registered: set[int] | frozenset[int] | dict) -> None:
    """Kafka's validateManualPartitionAssignment: not empty, no duplicates, only registered brokers."""
    if not target:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         "The manual partition assignment includes an empty replica list.")
    seen: set[int] = set()
    for b in target:
        if b in seen:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"The manual partition assignment includes the broker {b} more than once.")
        seen.add(b)
        if b not in registered:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"The manual partition assignment includes broker {b}, but no such broker is registered.")


def plan(replicas: list[int], target: list[int]) -> tuple[list[int], Reassignment | None]:
    """(replica list while reassigning, the ongoing reassignment or None when nothing moves)."""
    merged = list(target) + [r for r in replicas if r not in target]
    adding = tuple(r for r in target if r not in replicas)
    removing = tuple(r for r in replicas if r not in target)
    return merged, (Reassignment(adding, removing) if adding or removing else None)


def target_of(replicas: list[int], ongoing: Reassignment) -> list[int]:
    return [r for r in replicas if r not in ongoing.removing]


def original_of(replicas: list[int], ongoing: Reassignment) -> list[int]:
    return [r for r in replicas if r not in ongoing.adding]


def with_isr(state: PartitionState, replicas: list[int], isr: list[int], eligible: set[int] | frozenset[int]
             ) -> PartitionState:
    """``state`` with this ISR; a leader outside it (or not eligible) replaced by the first eligible ISR
    member in replica order (-1 if none), with leader_epoch + 1."""
    if state.leader in isr and state.leader in eligible:
        return replace(state, isr=tuple(isr))
    leader = next((r for r in replicas if r in isr and r in eligible), -1)
    if leader == state.leader:
        return replace(state, isr=tuple(isr))
    return replace(state, leader=leader, leader_epoch=state.leader_epoch + 1, isr=tuple(isr))


def complete(state: PartitionState, replicas: list[int], ongoing: Reassignment,
             eligible: set[int] | frozenset[int]) -> tuple[list[int], PartitionState] | None:
    """(final replicas, new state) once every target replica is in the ISR, else None."""
    target = target_of(replicas, ongoing)
    if not target or any(r not in state.isr for r in target):
        return None
    isr = [r for r in state.isr if r in target]
    return target, with_isr(state, target, isr, eligible)


def revert(state: PartitionState, replicas: list[int], ongoing: Reassignment,
           eligible: set[int] | frozenset[int]) -> tuple[list[int], PartitionState]:
    """(original replicas, new state) of a cancelled reassignment."""
    original = original_of(replicas, ongoing)
    isr = [r for r in state.isr if r in original]
    if isr:
        return original, with_isr(state, original, isr, eligible)
    leader = next((r for r in original if r in eligible), -1)
    lone = (leader if leader != -1 else original[0],)
    if leader == state.leader:
        return original, replace(state, isr=lone)
    return original, replace(state, leader=leader, leader_epoch=state.leader_epoch + 1, isr=lone)
