"""Clock faults on one broker's wall clock (libfaketime; its monotonic clock stays real):

- ``bump-forward`` / ``bump-back``: the wall clock jumps 30 s to 10 min ahead or back, and jumps
  back to the real time at the heal;
- ``strobe``: the wall clock flips between real time and an offset every 1-3 s while the fault lasts.

Leases, fencing, session and ISR timeouts must not notice (they run on the monotonic clock); what
does use wall time in Kafka too (transaction timeouts, record timestamps, retention) may act on it.
"""

from __future__ import annotations

import threading

from .base import BROKER_TARGETS, Fault, Nemesis, pick_broker

VARIANTS = ("bump-forward", "bump-back", "strobe")


class ClockNemesis(Nemesis):
    kind = "clock"

    def unavailable(self) -> str | None:
        if any(b.clock is None for b in self.ctx.cluster.brokers.values()):
            return "brokers started without libfaketime (Debian package faketime)"
        return None

    def hold_s(self) -> float:
        return self.ctx.rng.uniform(10, 40)

    def start(self) -> Fault:
        ctx = self.ctx
        variant = ctx.rng.choice(VARIANTS)
        node, what = pick_broker(ctx, ctx.rng.choice(BROKER_TARGETS))
        b = ctx.cluster.brokers[node]
        seconds = int(ctx.rng.uniform(30, 600))
        offset = f"-{seconds}" if variant == "bump-back" else f"+{seconds}"
        fault = self.fault(variant, f"broker {node} ({what}), {offset} s")
        if variant != "strobe":
            b.set_clock(offset)
            fault.heal = lambda: b.set_clock("+0")
            return fault
        stop = threading.Event()
        period = ctx.rng.uniform(1, 3)

        def strobe() -> None:
            on = True
            while not stop.wait(period):
                b.set_clock(offset if on else "+0")
                on = not on
        t = threading.Thread(target=strobe, daemon=True, name="clock-strobe")
        b.set_clock(offset)
        t.start()

        def heal() -> None:
            stop.set()
            t.join(10)
            b.set_clock("+0")
        fault.heal = heal
        return fault
