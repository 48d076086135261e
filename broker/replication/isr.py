"""ISR changes made by a partition leader (Kafka's AlterPartition, written straight to etcd).

The leader shrinks the ISR when a follower has not caught up for ``replica.lag.time.max.ms``
(checked every half of it, as Kafka's isr-expiration task) and expands it when a follower reaches
the high watermark and the start of the leader's epoch. A change is a compare-and-swap on the
partition epoch that also requires this broker's registration to be the live one (Kafka's
STALE_BROKER_EPOCH), written only while this broker still leads that epoch and its etcd session
is not fenced. At most one change per partition is in flight; a lost swap is dropped and decided
again from the new state (never a blind retry). The change counts once the watch brought it back
into the view, so the high watermark is computed on the "maximal ISR" meanwhile: additions count
at once, removals only once written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from broker.partition import Partition
from broker.replication.env import ReplicaEnv
from broker.replication.high_watermark import HighWatermarks
from broker.replication.leader import LeaderState, lag_clock_ms

log = logging.getLogger("broker.replication.isr")

VIEW_WAIT_S = 10.0


class IsrManager:
    """``partitions()``: the partitions this broker holds now."""

    def __init__(self, env: ReplicaEnv, partitions: Callable[[], Iterable[Partition]], hw: HighWatermarks) -> None:
        self.env = env
        self.partitions = partitions
        self.hw = hw
        self._task: asyncio.Task[None] | None = None
        self._states = None

    @property
    def lag_max_ms(self) -> int:
        return int(self.env.config.get("replica.lag.time.max.ms") or 30000)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._expire_loop(), name="isr-expiration")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        tasks = [p.leader_state.isr_change for p in self.partitions()
                 if p.leader_state is not None and p.leader_state.isr_change is not None]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(max(self.lag_max_ms / 2000, 0.05))
            try:
                self.shrink_lagging()
            except Exception:
                log.exception("ISR expiration check failed")

    def shrink_lagging(self) -> None:
        md = self.env.metadata
        me = self.env.node_id
        now = lag_clock_ms()
        lag = self.lag_max_ms
        for part in list(self.partitions()):
            ls = part.leader_state
            if ls is None or ls.isr_change is not None:
                continue
            isr = md.isr(part.topic, part.index)
            out = ls.out_of_sync(isr, me, part.log.log_end_offset, now, lag)
            if out:
                log.info("%s-%d: followers %s out of sync for over %d ms; shrinking the ISR", part.topic,
                         part.index, out, lag)
                self.change(part, remove=out)

    def maybe_expand(self, part: Partition, replica: int) -> None:
        ls = part.leader_state
        if ls is None or ls.isr_change is not None:
            return
        md = self.env.metadata
        if replica in md.isr(part.topic, part.index) or replica not in md.replicas(part.topic, part.index):
            return
        if not ls.may_join_isr(replica, part.high_watermark):
            return
        live = getattr(md, "live_brokers", None)
        if live is not None and replica not in (brokers := live()):
            return
        # KIP-841: a broker in controlled shutdown left the ISRs on purpose and must not rejoin them.
        if live is not None and getattr(brokers[replica], "shutting_down", False):
            return
        log.info("%s-%d: follower %d caught up (log end %d, high watermark %d); expanding the ISR",
                 part.topic, part.index, replica, ls.followers[replica].leo, part.high_watermark)
        self.change(part, add=[replica])

    def change(self, part: Partition, *, add: Iterable[int] = (), remove: Iterable[int] = ()) -> None:
        ls = part.leader_state
        if ls is None or ls.isr_change is not None:
            return
        add, remove = list(add), list(remove)
        ls.pending_isr_adds = set(add)
        # The task gets the leader state it was decided under: leadership can be lost before the
        # task first runs (part.leader_state is then None or a newer epoch's), and the write must
        # then be dropped, not read the partition's current state.
        ls.isr_change = asyncio.create_task(self._write(part, ls, add, remove),
                                            name=f"isr-{part.topic}-{part.index}")

    async def _write(self, part: Partition, ls: LeaderState, add: list[int], remove: list[int]) -> None:
        from cluster.etcd_session import TRANSIENT_ERRORS
        from cluster.partition_state import PartitionStateStore
        from cluster.records import PartitionState

        md = self.env.metadata
        me = self.env.node_id
        cluster = self.env.cluster
        try:
            state = md.partition_state(part.topic, part.index)
            if (state is None or state.leader != me or state.leader_epoch != ls.epoch or md.fenced()
                    or part.leader_state is not ls):
                return
            isr = [r for r in state.isr if r not in remove or r == me]
            isr += [r for r in add if r not in isr]
            if tuple(isr) == state.isr:
                return
            if self._states is None:
                self._states = PartitionStateStore(cluster.session, cluster.keys)
            reg = getattr(cluster.membership, "registration", None)
            writer = (me, reg.epoch) if reg is not None else None
            new = PartitionState(me, state.leader_epoch, tuple(isr), state.partition_epoch)
            ok = await self._states.update(part.topic, part.index, state.partition_epoch, new, writer=writer)
            if not ok:
                log.info("%s-%d: ISR change %s lost to another writer; deciding again", part.topic, part.index, isr)
                return
            log.info("%s-%d: ISR %s -> %s (leader epoch %d)", part.topic, part.index, list(state.isr), isr,
                     state.leader_epoch)
            with contextlib.suppress(Exception):
                await md.wait_for(lambda: (s := md.partition_state(part.topic, part.index)) is None
                                  or s.partition_epoch > state.partition_epoch, "the ISR change")
        except TRANSIENT_ERRORS as e:
            log.warning("%s-%d: ISR change not written, etcd unavailable (%r)", part.topic, part.index, e)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s-%d: ISR change failed", part.topic, part.index)
        finally:
            ls.isr_change = None
            ls.pending_isr_adds = set()
            if part.leader_state is ls:
                self.hw.maybe_advance(part)
