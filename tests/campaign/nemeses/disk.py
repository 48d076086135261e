"""A full disk: one broker's log dir filesystem (a small tmpfs) filled up by a file beside it.

Kafka halts a broker whose every log dir failed (LogManager.handleLogDirFailure); kbroker's one log
dir per broker does the same, so the broker's partitions move to the others. The heal deletes the
filler and starts the broker again if it stopped; its recovery must keep every acknowledged record.
"""

from __future__ import annotations

from .base import BROKER_TARGETS, Fault, Nemesis, pick_broker, restart_broker


class DiskNemesis(Nemesis):
    kind = "disk"

    def unavailable(self) -> str | None:
        return None if self.ctx.cluster.disks else "brokers' log dirs are not on small filesystems (--disk-mb)"

    def hold_s(self) -> float:
        return self.ctx.rng.uniform(5, 20)

    def start(self) -> Fault:
        ctx = self.ctx
        node, what = pick_broker(ctx, ctx.rng.choice(BROKER_TARGETS))
        b = ctx.cluster.brokers[node]
        disk = ctx.cluster.disks[node]
        fault = self.fault("fill", f"broker {node} ({what})")
        taken = disk.fill()
        fault.notes.append(f"filled {taken / 1e6:.1f} MB")

        def heal() -> None:
            disk.free()
            if not b.running:
                fault.notes.append(f"broker stopped while the disk was full (exit code {b.proc.returncode})"
                                   if b.proc is not None else "broker stopped")
                took = restart_broker(b)
                fault.notes.append(f"restarted after {took:.1f} s")
            else:
                fault.notes.append("broker kept running")
        fault.heal = heal
        return fault
