"""Membership changes under load (AlterPartitionReassignments, ElectLeaders):

- ``shrink-grow``: a partition's replicas lose one broker (possibly its leader), and get it back at
  the heal, which then copies the partition again from scratch;
- ``reorder``: the replica order changes so another broker is preferred, then a preferred-leader
  election moves the leadership; the heal puts the old order back and elects again;
- ``elect``: a preferred-leader election over every workload partition.
"""

from __future__ import annotations

from .. import probes
from .base import Fault, Nemesis

VARIANTS = ("shrink-grow", "reorder", "elect")


class MembershipNemesis(Nemesis):
    kind = "membership"

    def hold_s(self) -> float:
        return self.ctx.rng.uniform(5, 20)

    def start(self) -> Fault:
        ctx = self.ctx
        c = ctx.cluster
        variant = ctx.rng.choice(VARIANTS)
        parts = probes.partitions(c, ctx.topics)
        if variant == "elect":
            fault = self.fault(variant, "every workload partition")
            res = probes.elect_preferred(c, sorted(parts))
            fault.notes.append(f"elected {sum(1 for e in res.values() if e == 0)} of {len(res)}")
            fault.heal = lambda: None
            return fault
        (topic, p), info = ctx.rng.choice(sorted(parts.items()))
        original = list(info.replicas)
        if variant == "shrink-grow":
            drop = ctx.rng.choice(original)
            target = [r for r in original if r != drop]
        else:
            target = original[1:] + original[:1]
        fault = self.fault(variant, f"{topic}/{p} {original} -> {target}")
        err = probes.reassign(c, topic, p, target)
        fault.notes.append(f"reassign -> error {err}")
        if variant == "reorder" and err == 0:
            fault.notes.append(f"elect -> {probes.elect_preferred(c, [(topic, p)])}")

        def heal() -> None:
            e = probes.reassign(c, topic, p, original)
            fault.notes.append(f"back to {original} -> error {e}")
            if variant == "reorder" and e == 0:
                fault.notes.append(f"elect -> {probes.elect_preferred(c, [(topic, p)])}")
        fault.heal = heal
        return fault
