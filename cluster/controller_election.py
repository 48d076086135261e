"""Controller election: one broker holds the lease-bound ``controller`` key; the others wait to replace it.

aetcd has no client for etcd's election service, so the election is the classic lease-bound key: a
transaction puts ``controller`` under the candidate's lease only if the key's create revision is 0
(it does not exist). etcd serialises the transactions, so exactly one candidate wins. The key's create
revision is the controller epoch: every new controller gets a higher one. Losers watch the key and
campaign again when it is deleted (the holder resigned, or its lease was revoked or expired). A
campaign that finds the key under its own session's lease (it won before a connection error broke
its watch) is still the controller.

``is_controller()`` is also false once the session is fenced: a controller cut off from etcd stops
acting on its local deadline, before etcd can expire its lease and let another broker win.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass

from .etcd_keys import KeyLayout
from .etcd_session import TRANSIENT_ERRORS, EtcdSession

log = logging.getLogger("cluster.controller_election")

# How long stop() waits for the cancelled campaign task (see ControllerElection.stop).
STOP_WAIT_S = 5.0


def _retrieve(task: asyncio.Task[None]) -> None:
    """Consume the late end of an abandoned campaign task (no "exception never retrieved")."""
    if not task.cancelled() and task.exception() is not None:
        log.info("an abandoned controller campaign ended with %r", task.exception())


@dataclass(frozen=True, slots=True)
class ControllerInfo:
    node_id: int
    epoch: int


class ControllerElection:
    def __init__(self, session: EtcdSession, keys: KeyLayout, node_id: int, *,
                 retry_interval_s: float = 0.5, stop_wait_s: float = STOP_WAIT_S) -> None:
        self.session = session
        self.keys = keys
        self.node_id = node_id
        self.retry_interval_s = retry_interval_s
        self.stop_wait_s = stop_wait_s
        self._won_epoch: int | None = None
        self._task: asyncio.Task[None] | None = None
        self.changed = asyncio.Event()  # set on every win or loss; waiters clear it themselves

    # -- state -----------------------------------------------------------------------------------
    @property
    def epoch(self) -> int | None:
        """The controller epoch this broker won, while it believes it holds the key."""
        return self._won_epoch

    def is_controller(self) -> bool:
        return self._won_epoch is not None and not self.session.fenced()

    async def current(self) -> ControllerInfo | None:
        """The controller recorded in etcd (any broker), or None while there is none."""
        kv = await self.session.client.get(self.keys.controller)
        if kv is None:
            return None
        return ControllerInfo(json.loads(kv.value)["node_id"], kv.create_revision)

    def _set(self, epoch: int | None) -> None:
        if epoch != self._won_epoch:
            self._won_epoch = epoch
            self.changed.set()
            if epoch is None:
                log.info("node %d is no longer the controller", self.node_id)
            else:
                log.info("node %d is the controller, epoch %d", self.node_id, epoch)

    # -- campaign --------------------------------------------------------------------------------
    async def try_acquire(self) -> tuple[bool, int, int]:
        """One campaign: (won, controller epoch of the key now, its mod revision)."""
        client = self.session.client
        tx = client.transactions
        key = self.keys.controller
        value = json.dumps({"version": 1, "node_id": self.node_id}).encode()
        won, responses = await client.transaction(
            compare=[tx.create(key) == 0],
            success=[tx.put(key, value, lease=self.session.lease_id), tx.get(key)],
            failure=[tx.get(key)],
        )
        results = responses[-1]
        if not results:  # the holder's key vanished between compare and get: cannot happen in one txn
            return False, 0, 0
        (_value, kv), = results
        # The key may be this session's own, won before a connection error interrupted the watch
        # on it: still ours (its lease is ours, so nobody else can have put it), not a loss, which
        # would wait forever for a deletion our own live lease prevents.
        ours = kv.lease == self.session.lease_id != 0
        return won or ours, kv.create_revision, kv.mod_revision

    async def _wait_deleted(self, mod_revision: int) -> None:
        """Return once the controller key is deleted after ``mod_revision``."""
        watch = await self.session.client.watch(self.keys.controller, start_revision=mod_revision + 1)
        try:
            async for event in watch:
                if event.kind == "DELETE":
                    return
        finally:
            await watch.cancel()
        raise ConnectionError("controller watch ended")

    async def _run(self) -> None:
        while self.session.usable:
            try:
                won, epoch, mod_revision = await self.try_acquire()
                self._set(epoch if won else None)
                await self._wait_deleted(mod_revision)
                self._set(None)
            except TRANSIENT_ERRORS + (ConnectionError,) as e:
                # The key may still be ours; ``is_controller`` stays safe through the fencing deadline.
                log.warning("controller election for node %d: %r; retrying", self.node_id, e)
                await asyncio.sleep(self.retry_interval_s)
        self._set(None)

    def start(self) -> None:
        """Campaign in the background until ``stop``; re-campaigns whenever the key is deleted."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"controller-election-{self.node_id}")

    async def stop(self, *, resign: bool = True) -> None:
        """End the campaign (``resign``: and delete the key if this broker still holds it).

        The cancelled campaign is waited for at most ``stop_wait_s``: found by the fault campaign
        (the controller paused past its lease), a cancellation that lands in an etcd watch being
        set up or torn down can wait on aetcd's watcher for minutes; a broker whose session
        expired must not wait on it to rejoin. Such a task is left to end on its own: it was
        cancelled, so it ends without campaigning again."""
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=self.stop_wait_s)
            if not done:
                log.warning("controller election for node %d: the cancelled campaign did not end in %.1f s; "
                            "going on without it", self.node_id, self.stop_wait_s)
                task.add_done_callback(_retrieve)
            elif not task.cancelled() and task.exception() is not None:
                log.warning("controller election for node %d ended with %r", self.node_id, task.exception())
        epoch, self._won_epoch = self._won_epoch, None
        if resign and epoch is not None:
            with contextlib.suppress(*TRANSIENT_ERRORS):
                client = self.session.client
                tx = client.transactions
                await client.transaction(compare=[tx.create(self.keys.controller) == epoch],
                                         success=[tx.delete(self.keys.controller)], failure=[])
