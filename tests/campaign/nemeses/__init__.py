"""Fault injection for campaigns: one class per kind of fault, each applied and healed by the runner.

A nemesis chooses a target and a variant at random (seeded), applies the fault and returns a
``Fault`` whose ``heal`` undoes it; the runner holds it for ``hold_s`` and records the window.
Kinds (``KINDS``): ``kill`` (SIGKILL and restart of a broker or an etcd member), ``pause``
(SIGSTOP/SIGCONT of a broker past its session timeout), ``partition`` (nftables cuts between
namespaces), ``clock`` (libfaketime offsets of one broker's wall clock), ``disk`` (a broker's log dir
filesystem filled up) and ``membership`` (reassignments and preferred-leader elections).
"""

from __future__ import annotations

from .base import Fault, Nemesis, NemesisContext
from .clock import ClockNemesis
from .disk import DiskNemesis
from .membership import MembershipNemesis
from .partition import PartitionNemesis
from .process import KillNemesis, PauseNemesis

NEMESES: dict[str, type[Nemesis]] = {
    "kill": KillNemesis,
    "pause": PauseNemesis,
    "partition": PartitionNemesis,
    "clock": ClockNemesis,
    "disk": DiskNemesis,
    "membership": MembershipNemesis,
}
KINDS = tuple(NEMESES)

__all__ = ["KINDS", "NEMESES", "Fault", "Nemesis", "NemesisContext"]
