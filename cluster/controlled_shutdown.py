"""Controlled shutdown: before a broker stops, it hands its leaderships over and leaves the ISRs.

Kafka (``controlled.shutdown.enable``, default true): a broker that is asked to stop first tells the
controller, which moves every leadership it holds to another ISR member and removes it from the ISRs
it follows, so clients see a leader change (retriable NOT_LEADER_OR_FOLLOWER, then the new leader)
instead of a dead leader until its session times out. kbroker's partition state is in etcd, so the
stopping broker writes the changes itself, with the same compare-and-swap on the partition epoch as
every other writer (``PartitionStateStore.update``, guarded by its live registration):

1. Mark the registration ``shutting_down`` (same lease, same broker epoch): the controller no longer
   elects this broker (``controller.leader_candidates``), whatever happens meanwhile.
2. For each partition it leads with another live ISR member (not itself shutting down): the first
   such member in replica order becomes leader, leader_epoch + 1, ISR without this broker. A
   partition with no other live ISR member keeps its leader (it goes offline when the broker's
   registration disappears, as in Kafka). For each partition it follows: leave the ISR, never
   emptying it. A lost swap is re-read and decided again on the next round: rounds are bounded by
   ``controlled.shutdown.max.retries`` with ``controlled.shutdown.retry.backoff.ms`` between them.
3. Wait (bounded) until this broker's own metadata view shows every written state, so its replica
   manager has stopped acting as leader before its listeners close.

Any etcd failure ends the attempt early: the stop goes on, and the controller moves what is left
when the registration disappears (the uncontrolled path).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field, replace

from .etcd_session import TRANSIENT_ERRORS
from .etcd_store import EtcdMetadataStore
from .membership import Membership
from .partition_state import PartitionStateStore
from .records import PartitionState

log = logging.getLogger("cluster.controlled_shutdown")


@dataclass
class ShutdownResult:
    moved: list[tuple[str, int]] = field(default_factory=list)  # leaderships handed over
    left_isr: list[tuple[str, int]] = field(default_factory=list)  # ISRs this broker left
    kept: list[tuple[str, int]] = field(default_factory=list)  # led with no other live ISR member
    failed: list[tuple[str, int]] = field(default_factory=list)  # still involving this broker after all rounds
    seen: bool = False  # the local view showed every written state before the deadline


def shutdown_state(state: PartitionState, replicas: list[int], me: int, electable: set[int]) -> PartitionState | None:
    """The state that takes broker ``me`` out of this partition, or None when nothing can change.

    ``electable``: live brokers that may lead (not in controlled shutdown, ``me`` excluded).
    """
    isr = tuple(r for r in state.isr if r != me)
    if state.leader == me:
        others = [r for r in replicas if r in isr and r in electable]
        if not others:
            return None
        return PartitionState(others[0], state.leader_epoch + 1, isr, state.partition_epoch)
    if me in state.isr and isr:
        return replace(state, isr=isr)
    return None


async def controlled_shutdown(store: EtcdMetadataStore, membership: Membership, states: PartitionStateStore, *,
                              max_retries: int = 3, retry_backoff_s: float = 5.0,
                              request_timeout_s: float = 5.0, wait_s: float = 10.0) -> ShutdownResult:
    """Steps 1-3 of the module docstring; never raises for etcd failures (logged, result says what is left)."""
    result = ShutdownResult()
    reg = membership.registration
    if reg is None:
        return result
    me = reg.node_id
    written: dict[tuple[str, int], int] = {}  # partition -> partition epoch written
    try:
        await asyncio.wait_for(membership.mark_shutting_down(), request_timeout_s)
        pending = sorted(tp for tp, st in store.partition_states().items() if st.leader == me or me in st.isr)
        for attempt in range(max_retries + 1):
            if attempt:
                await asyncio.sleep(retry_backoff_s)
            lost: list[tuple[str, int]] = []
            electable = {n for n, r in store.live_brokers().items() if n != me and not r.shutting_down}
            for topic, p in pending:
                state = await asyncio.wait_for(states.get(topic, p), request_timeout_s)
                if state is None:
                    continue
                new = shutdown_state(state, store.replicas(topic, p), me, electable)
                if new is None:
                    if state.leader == me and (topic, p) not in result.kept:
                        result.kept.append((topic, p))
                    continue
                ok = await asyncio.wait_for(
                    states.update(topic, p, state.partition_epoch, new, writer=(me, reg.epoch)), request_timeout_s)
                if not ok:
                    lost.append((topic, p))
                    continue
                written[(topic, p)] = state.partition_epoch + 1
                (result.moved if state.leader == me else result.left_isr).append((topic, p))
                if state.leader == me:
                    log.info("controlled shutdown: %s-%d leader %d -> %d (epoch %d), isr %s", topic, p, me,
                             new.leader, new.leader_epoch, list(new.isr))
            pending = lost
            if not pending:
                break
            log.info("controlled shutdown: %d partitions changed meanwhile; round %d of %d", len(pending),
                     attempt + 1, max_retries + 1)
        result.failed = pending
    except TRANSIENT_ERRORS as e:
        log.warning("controlled shutdown stopped early, etcd did not answer (%r); the controller moves the rest "
                    "when this broker's registration disappears", e)
    result.seen = await _wait_seen(store, written, wait_s)
    log.info("controlled shutdown of node %d: %d leaderships moved, %d ISRs left, %d kept (no other ISR member), "
             "%d not changed%s", me, len(result.moved), len(result.left_isr), len(result.kept), len(result.failed),
             "" if result.seen else " (not all seen back in time)")
    return result


async def _wait_seen(store: EtcdMetadataStore, written: dict[tuple[str, int], int], wait_s: float) -> bool:
    def seen() -> bool:
        for (topic, p), epoch in written.items():
            st = store.partition_state(topic, p)
            if st is not None and st.partition_epoch < epoch:
                return False
        return True

    deadline = time.monotonic() + wait_s
    while not seen():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)  # the watch applies changes on this loop; a short poll sees them
    return True
