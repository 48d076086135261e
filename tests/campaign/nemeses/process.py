"""Process faults: kill -9 and restart (brokers by role, etcd members), and SIGSTOP/SIGCONT of a
broker for longer than its session timeout (the zombie-leader case: its lease expires while it
still believes it leads, and it must not acknowledge anything once it wakes)."""

from __future__ import annotations

import os
import signal

from .base import BROKER_TARGETS, Fault, Nemesis, pick_broker, restart_broker

ETCD_TARGETS = ("etcd-leader", "etcd-follower")


class KillNemesis(Nemesis):
    kind = "kill"

    def hold_s(self) -> float:
        return self.ctx.rng.uniform(2, 15)

    def start(self) -> Fault:
        ctx = self.ctx
        how = ctx.rng.choice(BROKER_TARGETS + ETCD_TARGETS)
        if how.startswith("etcd"):
            return self._kill_etcd(how)
        node, what = pick_broker(ctx, how)
        b = ctx.cluster.brokers[node]
        fault = self.fault(how, f"broker {node} ({what})")
        b.kill()

        def heal() -> None:
            took = restart_broker(b)
            fault.notes.append(f"restarted after {took:.1f} s of retries")
        fault.heal = heal
        return fault

    def _kill_etcd(self, how: str) -> Fault:
        etcd = self.ctx.cluster.etcd
        leader = etcd.leader()
        members = [i for i, m in enumerate(etcd.members, start=1) if m.running]
        if how == "etcd-leader" and leader in members:
            i = leader
        else:
            i = self.ctx.rng.choice([m for m in members if m != leader] or members)
        member = etcd.member(i)
        fault = self.fault(how, f"etcd member {i}" + (" (leader)" if i == leader else ""))
        member.kill()
        fault.heal = lambda: member.start(timeout=60)
        return fault


class PauseNemesis(Nemesis):
    kind = "pause"

    def session_s(self) -> float:
        return int(self.ctx.cluster.brokers[1].overrides.get("broker.session.timeout.ms", "6000")) / 1000

    def hold_s(self) -> float:
        return self.session_s() + self.ctx.rng.uniform(2, 10)

    def min_hold_s(self) -> float:
        return self.session_s() + 1.5  # past the session timeout, or it is no zombie test

    def start(self) -> Fault:
        ctx = self.ctx
        how = ctx.rng.choice(BROKER_TARGETS)
        node, what = pick_broker(ctx, how)
        b = ctx.cluster.brokers[node]
        fault = self.fault(how, f"broker {node} ({what})")
        assert b.proc is not None
        os.kill(b.proc.pid, signal.SIGSTOP)

        def heal() -> None:
            if b.running:
                os.kill(b.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
        fault.heal = heal
        return fault
