"""Controller duties of cluster mode: move leadership away from brokers whose registration disappeared.

Only the elected controller (``ControllerElection.is_controller()``, false once its session is
fenced) acts. It works from the store's view, which a new controller loaded from etcd alone, and
reconciles on every change of the live brokers or of partition states, on winning the election,
and every ``interval_s`` as a backstop. For each partition (Kafka's PartitionChangeBuilder rules,
without unclean election):

* ISR members that are not live are removed from the ISR, except the last one (as KRaft keeps it,
  so that broker can lead again when it comes back);
* a leader that is not live (or no leader, -1) is replaced by the first live ISR member in replica
  order, with leader_epoch + 1; with no live ISR member the partition goes offline: leader -1,
  leader_epoch + 1.

Every change is a compare-and-swap on the partition epoch (``PartitionStateStore.update``); a lost
swap is dropped and the next reconcile decides again from the new state, never a blind retry.

Two more duties, each in its own function below:

* **Reassignments** (KIP-455, ``cluster.reassignment``): on every pass, a partition whose target
  replicas are all in the ISR gets replicas = target, ISR = ISR ∩ target and, if its leader is not in
  the target, a new leader from the target (one transaction with the topic record,
  ``EtcdMetadataStore.complete_reassignments``).
* **Preferred-leader rebalance** (``cluster.leader_election.rebalance``): with
  ``auto.leader.rebalance.enable`` (default true), every ``leader.imbalance.check.interval.seconds``
  (300) leadership goes back to preferred replicas (the first of the replica list) that are live
  and in the ISR, for brokers above ``leader.imbalance.per.broker.percentage`` (10).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping

from .controller_election import ControllerElection
from .etcd_session import TRANSIENT_ERRORS
from .etcd_store import TXN_OPS, EtcdMetadataStore
from .leader_election import rebalance
from .partition_state import PartitionStateStore
from .records import BrokerRegistration, PartitionState

log = logging.getLogger("cluster.controller")
UNCLEAN = "unclean.leader.election.enable"
# Partition-state writes of one pass in flight at once (etcd serves them side by side).
WRITE_CONCURRENCY = 64
# Partition-state swaps per etcd transaction (etcd's --max-txn-ops, 128 by default, bounds the
# compares and the puts of one transaction).
WRITE_BATCH = TXN_OPS // 2


def leader_candidates(brokers: Mapping[int, BrokerRegistration]) -> set[int]:
    """Live brokers that may be elected leader: not those in controlled shutdown."""
    return {n for n, reg in brokers.items() if not reg.shutting_down}


def next_state(state: PartitionState, replicas: list[int], live: set[int],
               electable: set[int] | None = None, *, unclean: bool = False) -> PartitionState | None:
    """The state a partition should move to with these live brokers, or None to leave it.
    ``unclean`` (unclean.leader.election.enable): with no live ISR member, the first live replica
    leads alone (ISR = [it]; records only the lost ISR had are gone), as KRaft's
    PartitionChangeBuilder."""
    isr = [r for r in state.isr if r in live] or list(state.isr[-1:])
    if state.leader in live:
        if tuple(isr) == state.isr:
            return None
        return PartitionState(state.leader, state.leader_epoch, tuple(isr), state.partition_epoch)
    candidates = [r for r in replicas if r in isr and r in live and (electable is None or r in electable)]
    if candidates:
        return PartitionState(candidates[0], state.leader_epoch + 1, tuple(isr), state.partition_epoch)
    if unclean:
        outside = [r for r in replicas if r in live and (electable is None or r in electable)]
        if outside:
            return PartitionState(outside[0], state.leader_epoch + 1, (outside[0],), state.partition_epoch)
    if state.leader == -1:
        return None
    return PartitionState(-1, state.leader_epoch + 1, tuple(isr), state.partition_epoch)


class Controller:
    def __init__(self, store: EtcdMetadataStore, election: ControllerElection, states: PartitionStateStore, *,
                 interval_s: float = 2.0, settings: Mapping[str, object] | None = None) -> None:
        self.store = store
        self.election = election
        self.states = states
        self.interval_s = interval_s
        self._init_rebalance(settings or {})
        self._task: asyncio.Task[None] | None = None
        self.changes = 0  # partition states this controller changed (tests, logs)
        # Broker epochs seen on the previous pass: a broker that registered again (restarted, or
        # its session expired) is fenced for one pass, as KRaft fences a new incarnation, so its
        # leaderships get a new leader epoch even when it came back before this pass saw it leave.
        self._seen_epochs: dict[int, int] = {}

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="controller")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            cues = [asyncio.ensure_future(self.store.cluster_changed.wait()),
                    asyncio.ensure_future(self.election.changed.wait())]
            try:
                await asyncio.wait(cues, timeout=self.interval_s, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for c in cues:
                    c.cancel()
            self.store.cluster_changed.clear()
            self.election.changed.clear()
            if not self.election.is_controller():
                continue
            try:
                await self.reconcile()
                await self.complete_reassignments()
                await self.maybe_rebalance()
            except TRANSIENT_ERRORS as e:
                log.warning("controller: etcd unavailable (%r); retrying", e)
            except Exception:
                log.exception("controller reconcile failed")

    async def reconcile(self) -> int:
        """One pass over every partition; returns how many states were changed."""
        registrations = self.store.live_brokers()
        reincarnated = {n for n, reg in registrations.items()
                        if n in self._seen_epochs and self._seen_epochs[n] != reg.epoch}
        live = set(registrations) - reincarnated
        if reincarnated:
            log.info("controller: brokers %s registered again; moving their leaderships to a new epoch",
                     sorted(reincarnated))
        changed = 0
        lost = False
        unclean_default = self._unclean_broker_default()
        electable = leader_candidates(self.store.live_brokers())
        decided = []
        for (topic, p), state in self.store.partition_states().items():
            new = next_state(state, self.store.replicas(topic, p), live, electable,
                             unclean=self._unclean(topic, unclean_default))
            if new is not None:
                decided.append((topic, p, state, new))
        if decided and not self.election.is_controller():
            return changed
        results = await self._write_all([(t, p, state.partition_epoch, new) for t, p, state, new in decided])
        for (topic, p, state, new), ok in zip(decided, results, strict=True):
            if ok:
                changed += 1
                log.info("controller: %s-%d leader %d -> %d (epoch %d), isr %s", topic, p, state.leader,
                         new.leader, new.leader_epoch, list(new.isr))
            else:
                log.info("controller: %s-%d changed meanwhile; deciding again on the next pass", topic, p)
                lost = lost or state.leader in reincarnated or bool(reincarnated & set(state.isr))
        self.changes += changed
        if not lost:
            # Remember the new incarnations once their old leaderships and ISR places were all
            # handled; after a lost swap the next pass fences them again.
            self._seen_epochs = {n: reg.epoch for n, reg in registrations.items()}
        return changed

    async def _write_all(self, changes: list[tuple[str, int, int, PartitionState]]) -> list[bool]:
        """The compare-and-swaps of one pass. A broker that led thousands of partitions must lose
        them all within the session timeout, not one etcd round trip after another: the swaps go
        WRITE_BATCH to an etcd transaction, against the mod revisions of the states the decision
        was made on (the watch cache), WRITE_CONCURRENCY transactions at a time. A batch in
        which any state moved on meanwhile is swapped one by one with fresh reads instead, so
        each partition is decided on its own as before. Stops writing (the rest count as not
        written) as soon as this broker is no longer the controller."""
        sem = asyncio.Semaphore(WRITE_CONCURRENCY)

        async def one(topic: str, p: int, epoch: int, new: PartitionState) -> bool:
            async with sem:
                if not self.election.is_controller():
                    return False
                return await self.states.update(topic, p, epoch, new)

        async def batch(chunk: list[tuple[str, int, int, PartitionState]]) -> list[bool]:
            revisions = [self.store.partition_state_revision(t, p) for t, p, _, _ in chunk]
            if len(chunk) > 1 and None not in revisions:
                async with sem:
                    if not self.election.is_controller():
                        return [False] * len(chunk)
                    if await self.states.update_batch([(t, p, epoch, rev, new) for (t, p, epoch, new), rev
                                                       in zip(chunk, revisions, strict=True)]):
                        return [True] * len(chunk)
            results = await asyncio.gather(*(one(*c) for c in chunk), return_exceptions=True)
            for r in results:
                if isinstance(r, BaseException):
                    raise r
            return [bool(r) for r in results]

        chunks = [changes[i:i + WRITE_BATCH] for i in range(0, len(changes), WRITE_BATCH)]
        done = await asyncio.gather(*(batch(c) for c in chunks), return_exceptions=True)
        out: list[bool] = []
        for r in done:
            if isinstance(r, BaseException):
                raise r  # etcd unavailable: the next pass decides again from the new state
            out.extend(r)
        return out

    # --- reassignments ----------------------------------------------------------------------
    async def complete_reassignments(self) -> int:
        """Finish every reassignment whose target replicas are all in the ISR; how many partitions."""
        done = 0
        for topic in sorted({t for t, _ in self.store.reassignments()}):
            if not self.election.is_controller():
                break
            done += await self.store.complete_reassignments(topic)
        self.changes += done
        return done

    def _unclean_broker_default(self) -> object:
        """unclean.leader.election.enable of the brokers, as KRaft's ConfigurationControlManager
        resolves it: this controller's dynamic broker config, else the cluster-wide dynamic
        default, else the controller's static config (default false). Read from the store on every
        pass, so a change applies on the next one (the store wakes the controller)."""
        for resource in (self.store.node_id, None):
            value = self.store.broker_dynamic_configs(resource).get(UNCLEAN)
            if value is not None:
                return value
        return self._unclean_default

    def _unclean(self, topic: str, broker_default: object | None = None) -> bool:
        """unclean.leader.election.enable: the topic's config, else the brokers' (above)."""
        info = self.store.get_topic(topic)
        value = (info.configs.get(UNCLEAN) if info is not None else None)
        if value is None:
            value = self._unclean_broker_default() if broker_default is None else broker_default
        return value if isinstance(value, bool) else str(value).lower() == "true"

    # --- preferred-leader rebalance ------------------------------------------------------------
    def _init_rebalance(self, settings: Mapping[str, object]) -> None:
        def setting(name: str, default: object) -> object:
            value = settings.get(name)
            return default if value is None else value

        self._unclean_default = setting(UNCLEAN, False)
        enabled = setting("auto.leader.rebalance.enable", True)
        self.rebalance_enabled = enabled if isinstance(enabled, bool) else str(enabled).lower() == "true"
        self.rebalance_interval_s = float(setting("leader.imbalance.check.interval.seconds", 300))  # type: ignore[arg-type]
        self.imbalance_percentage = int(setting("leader.imbalance.per.broker.percentage", 10))  # type: ignore[call-overload]
        # The first check comes one interval after start, as Kafka schedules it.
        self._next_rebalance = time.monotonic() + self.rebalance_interval_s

    async def maybe_rebalance(self) -> int:
        if not self.rebalance_enabled or time.monotonic() < self._next_rebalance:
            return 0
        self._next_rebalance = time.monotonic() + self.rebalance_interval_s
        return await self.rebalance_leaders()

    async def rebalance_leaders(self) -> int:
        """One preferred-leader rebalance pass; how many leaders moved."""
        store = self.store
        partitions = {key: (state, store.replicas(*key)) for key, state in store.partition_states().items()}
        moves = rebalance(partitions, store.eligible_leaders(), self.imbalance_percentage,
                          skip=store.reassignments())
        moved = 0
        changes = [(topic, p, partitions[(topic, p)][0].partition_epoch, new) for (topic, p), new in moves]
        for (topic, p, _, new), ok in zip(changes, await self._write_all(changes), strict=True):
            if ok:
                moved += 1
                log.info("controller: preferred leader of %s-%d: %d -> %d (epoch %d)", topic, p,
                         partitions[(topic, p)][0].leader, new.leader, new.leader_epoch)
        self.changes += moved
        return moved
