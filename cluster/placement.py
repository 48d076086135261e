"""Replica placement for new partitions: round-robin over the live brokers from a random start, rack-aware;
and the checks of a manual assignment (CreateTopics / CreatePartitions ``assignments``).

Kafka's classic placement (AdminUtils.assignReplicasToBrokers, which KRaft's StripedReplicaPlacer
refines): the first replica of partition ``i`` is broker ``(start + i) % n``; the followers come after
it at a shift that grows by one every ``n`` partitions, so leaders and followers both spread evenly.
With ``broker.rack`` set on the brokers, the broker list is first interleaved by rack (rack A's first
broker, rack B's first, ..., rack A's second, ...), so consecutive brokers sit in different racks and
a partition's replicas land in as many racks as possible; a follower whose rack is already used is
skipped while an unused rack remains (Kafka's rule). Brokers without a rack form their own group.

A manual assignment is used as given once it passes Kafka's checks (ReplicationControlManager, with
its INVALID_REPLICA_ASSIGNMENT messages): every replica list non-empty, of registered brokers each
listed once, as long as the topic's other partitions', with at least one broker neither fenced nor
in controlled shutdown; CreateTopics' partition indexes unique and 0..n-1, CreatePartitions' one
list per added partition.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence

from protocol.errors import ErrorCode, KafkaError


def _rack_interleaved(brokers: Mapping[int, str | None]) -> list[int]:
    by_rack: dict[str | None, list[int]] = {}
    for node in sorted(brokers):
        by_rack.setdefault(brokers[node], []).append(node)
    racks = [by_rack[r] for r in sorted(by_rack, key=lambda r: (r is None, r or ""))]
    out: list[int] = []
    for i in range(max(len(r) for r in racks)):
        out.extend(r[i] for r in racks if i < len(r))
    return out


def place_replicas(brokers: Mapping[int, str | None], num_partitions: int, replication_factor: int, *,
                   first_partition: int = 0, rng: random.Random | None = None) -> dict[int, list[int]]:
    """Replicas of partitions ``first_partition .. first_partition + num_partitions - 1``.

    ``brokers``: live node id -> rack (or None). INVALID_REPLICATION_FACTOR when there are fewer live
    brokers than ``replication_factor``, as Kafka's controller answers.
    """
    if replication_factor <= 0:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    n = len(brokers)
    if replication_factor > n:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"Unable to replicate the partition {replication_factor} time(s): The target replication "
                         f"factor of {replication_factor} cannot be reached because only {n} broker(s) are registered.")
    rng = rng or random.Random()
    order = _rack_interleaved(brokers) if any(brokers.values()) else sorted(brokers)
    start = rng.randrange(n)
    shift = rng.randrange(n)
    out: dict[int, list[int]] = {}
    for i in range(num_partitions):
        if i > 0 and i % n == 0:
            shift += 1
        first = (start + i) % n
        replicas = [order[first]]
        racks = {brokers[order[first]]}
        candidates = [order[(first + 1 + (shift + j) % max(n - 1, 1)) % n] for j in range(n - 1)]
        # Prefer followers in racks not used yet; then any remaining broker (fewer racks than RF).
        for pick_new_rack in (True, False):
            for c in candidates:
                if len(replicas) == replication_factor:
                    break
                if c in replicas or (pick_new_rack and brokers[c] in racks and len(racks) < len(set(brokers.values()))):
                    continue
                replicas.append(c)
                racks.add(brokers[c])
        out[first_partition + i] = replicas
    return out


# --- manual assignments (CreateTopics / CreatePartitions ``assignments``) ----------------------------
def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)


def check_replicas(replicas: Sequence[int], registered: Collection[int], replication_factor: int | None) -> None:
    """One partition's manual replica list, as Kafka's ReplicationControlManager.
    validateManualPartitionAssignment: not empty, every broker registered and listed once, as many
    replicas as ``replication_factor`` (that of the other partitions) when given."""
    if not replicas:
        raise _invalid("The manual partition assignment includes an empty replica list.")
    previous = None
    for broker in sorted(replicas):
        if broker not in registered:
            raise _invalid(f"The manual partition assignment includes broker {broker}, but no such broker is "
                           "registered.")
        if broker == previous:
            raise _invalid(f"The manual partition assignment includes the broker {previous} more than once.")
        previous = broker
    if replication_factor is not None and len(replicas) != replication_factor:
        raise _invalid(f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but "
                       f"this is not consistent with previous partitions, which have {replication_factor} replica(s).")


def _check_active(partition: int, replicas: Sequence[int], active: Collection[int]) -> None:
    if not any(r in active for r in replicas):
        raise _invalid(f"All brokers specified in the manual partition assignment for partition {partition} are "
                       "fenced or in controlled shutdown.")


def check_new_topic_assignment(assignments: Sequence[tuple[int, Sequence[int]]], registered: Collection[int],
                               active: Collection[int]) -> dict[int, list[int]]:
    """CreateTopics' manual assignment (partition index, replicas) checked as Kafka's controller
    does (ReplicationControlManager.createTopic): each index once, every replica list valid and as
    long as the first, at least one active (not fenced, not shutting down) broker in each, indexes
    0..n-1. Returns partition -> replicas."""
    parts: dict[int, list[int]] = {}
    replication_factor: int | None = None
    for index, replicas in assignments:
        if index in parts:
            raise _invalid(f"Found multiple manual partition assignments for partition {index}")
        check_replicas(replicas, registered, replication_factor)
        replication_factor = len(replicas)
        _check_active(index, replicas, active)
        parts[index] = list(replicas)
    if any(i not in parts for i in range(len(parts))):
        raise _invalid("partitions should be a consecutive 0-based integer sequence")
    return parts


def check_added_partitions_assignment(assignments: Sequence[Sequence[int]], added: int, first_partition: int,
                                      replication_factor: int | None, registered: Collection[int],
                                      active: Collection[int]) -> list[list[int]]:
    """CreatePartitions' ``assignments`` for the ``added`` new partitions (numbered from
    ``first_partition``), checked as Kafka's ReplicationControlManager.createPartitions: one per
    new partition, each valid with the topic's replication factor and one active broker."""
    if len(assignments) != added:
        raise _invalid(f"Attempted to add {added} additional partition(s), but only {len(assignments)} "
                       "assignment(s) were specified.")
    for i, replicas in enumerate(assignments):
        check_replicas(replicas, registered, replication_factor)
        _check_active(first_partition + i, replicas, active)
    return [list(r) for r in assignments]
