"""Replica placement for new partitions: round-robin over the live brokers from a random start, rack-aware.

Kafka's classic placement (AdminUtils.assignReplicasToBrokers, which KRaft's StripedReplicaPlacer
refines): the first replica of partition ``i`` is broker ``(start + i) % n``; the followers come after
it at a shift that grows by one every ``n`` partitions, so leaders and followers both spread evenly.
With ``broker.rack`` set on the brokers, the broker list is first interleaved by rack (rack A's first
broker, rack B's first, ..., rack A's second, ...), so consecutive brokers sit in different racks and
a partition's replicas land in as many racks as possible; a follower whose rack is already used is
skipped while an unused rack remains (Kafka's rule). Brokers without a rack form their own group.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

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
