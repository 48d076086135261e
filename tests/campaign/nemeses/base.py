"""What every nemesis shares: the fault record, the context it acts in, target choice, restarts."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.helpers.broker_proc import BrokerError

from .. import probes
from ..cluster import CampaignBroker, CampaignCluster

RESTART_WAIT_S = 120.0  # a killed broker's old etcd lease must expire before it may register again


@dataclass
class Fault:
    kind: str
    variant: str
    target: str
    start_s: float
    hold_s: float
    end_s: float | None = None
    recovered_s: float | None = None  # seconds after the heal until the cluster was whole again
    notes: list[str] = field(default_factory=list)
    heal: Callable[[], None] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "variant": self.variant, "target": self.target, "start_s": round(self.start_s, 3),
                "end_s": None if self.end_s is None else round(self.end_s, 3), "hold_s": round(self.hold_s, 1),
                "recovered_s": None if self.recovered_s is None else round(self.recovered_s, 1),
                "notes": self.notes}


@dataclass
class NemesisContext:
    cluster: CampaignCluster
    rng: random.Random
    topics: list[str]  # the workloads' topics
    txn_ids: list[str]
    groups: list[str]
    now_s: Callable[[], float]
    log: Callable[[str], None]
    hold_scale: float = 1.0  # every hold multiplied by this (a short campaign shortens them)


class Nemesis:
    kind = ""

    def __init__(self, ctx: NemesisContext) -> None:
        self.ctx = ctx

    def unavailable(self) -> str | None:
        """Why this kind cannot run on this cluster, or None."""
        return None

    def hold_s(self) -> float:
        return self.ctx.rng.uniform(5, 20)

    def start(self) -> Fault:
        raise NotImplementedError

    def min_hold_s(self) -> float:
        """The shortest hold that still makes the fault what it is."""
        return 1.0

    def fault(self, variant: str, target: str, hold: float | None = None) -> Fault:
        if hold is None:
            hold = max(self.min_hold_s(), self.hold_s() * self.ctx.hold_scale)
        return Fault(self.kind, variant, target, self.ctx.now_s(), hold)


BROKER_TARGETS = ("leader", "txn-coordinator", "group-coordinator", "controller", "random")


def pick_broker(ctx: NemesisContext, how: str) -> tuple[int, str]:
    """A broker chosen by role: (node id, what it was chosen as)."""
    cluster, rng = ctx.cluster, ctx.rng
    running = [n for n, b in cluster.brokers.items() if b.running]
    try:
        if how == "leader":
            parts = probes.partitions(cluster, ctx.topics)
            (t, p), info = rng.choice(sorted(parts.items()))
            if info.leader in running:
                return info.leader, f"leader of {t}/{p}"
        elif how == "txn-coordinator":
            tid = rng.choice(ctx.txn_ids)
            node = probes.coordinator(cluster, tid, probes.KEY_TXN)
            if node in running:
                return node, f"transaction coordinator of {tid}"
        elif how == "group-coordinator":
            group = rng.choice(ctx.groups)
            node = probes.coordinator(cluster, group, probes.KEY_GROUP)
            if node in running:
                return node, f"coordinator of group {group}"
        elif how == "controller":
            node = probes.controller(cluster)
            if node in running:
                return node, "controller"
    except Exception as e:  # noqa: BLE001 - no answer: fall back to a random broker
        ctx.log(f"could not find the {how}: {e!r}; a random broker instead")
    node = rng.choice(running or sorted(cluster.brokers))
    return node, "random broker"


def restart_broker(b: CampaignBroker, timeout: float = RESTART_WAIT_S) -> float:
    """Start a broker that is down; until etcd expired its old lease a start is refused (the process
    exits), so try again. Returns the seconds it took."""
    start = time.monotonic()
    while True:
        try:
            b.start(timeout=90)
            return time.monotonic() - start
        except BrokerError:
            if time.monotonic() - start > timeout:
                raise
            time.sleep(0.5)
