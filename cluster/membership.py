"""Broker membership: register this broker under its session lease; list and watch the live brokers.

A registration is the key ``brokers/<node id>`` bound to the broker's lease, so it disappears when
the broker stops heartbeating. It is created in a transaction guarded by create revision == 0: while
another live broker holds the same ``node.id`` the registration is refused (DuplicateBrokerError),
and once that broker's lease has expired the same node id can register again. The create revision of
the key is the broker epoch (it grows with every registration), as Kafka's broker epoch does.

A broker killed and restarted at once finds its previous incarnation's registration still there
until that lease expires. ``register_waiting`` then waits, bounded by the remaining TTL of the
holder's lease (etcd's LeaseTimeToLive) plus a margin, and registers once the key is gone; a holder
that is still there past that bound is renewing its lease, so it is a live duplicate and refused.
Kafka's KRaft controller does the same: it refuses a registration while the old incarnation's
session is valid, and the broker retries until it expired.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator
from dataclasses import replace

from .etcd_keys import KeyLayout
from .etcd_session import TRANSIENT_ERRORS, EtcdSession
from .records import BrokerRegistration

log = logging.getLogger("cluster.membership")


class DuplicateBrokerError(RuntimeError):
    """Another live broker is registered with this node.id."""

    def __init__(self, node_id: int, holder_lease: int) -> None:
        super().__init__(f"node.id {node_id} is already registered by a live broker (etcd lease {holder_lease:x}); "
                         "each broker of a cluster needs its own node.id")
        self.node_id = node_id
        self.holder_lease = holder_lease


class Membership:
    def __init__(self, session: EtcdSession, keys: KeyLayout) -> None:
        self.session = session
        self.keys = keys
        self.registration: BrokerRegistration | None = None

    async def register(self, registration: BrokerRegistration) -> BrokerRegistration:
        """Create this broker's registration; returns it with its epoch. Raises DuplicateBrokerError."""
        client = self.session.client
        tx = client.transactions
        key = self.keys.broker(registration.node_id)
        ok, responses = await client.transaction(
            compare=[tx.create(key) == 0],
            success=[tx.put(key, registration.to_json(), lease=self.session.lease_id), tx.get(key)],
            failure=[tx.get(key)],
        )
        (_value, kv), = responses[-1]
        if not ok:
            raise DuplicateBrokerError(registration.node_id, kv.lease)
        self.registration = BrokerRegistration(registration.node_id, registration.endpoints, registration.rack,
                                               kv.create_revision)
        return self.registration

    async def register_waiting(self, registration: BrokerRegistration, *, margin_s: float,
                               log_every_s: float = 3.0, poll_s: float = 0.2) -> BrokerRegistration:
        """``register``, waiting for a previous registration of the same node id to expire (see above)."""
        deadline: float | None = None
        last_log = -math.inf
        while True:
            try:
                return await self.register(registration)
            except DuplicateBrokerError as e:
                now = time.monotonic()
                if deadline is None:
                    ttl = await self._remaining_ttl_s(e.holder_lease)
                    deadline = now + max(ttl, 0) + margin_s
                if now > deadline:
                    raise
                if now - last_log >= log_every_s:
                    last_log = now
                    log.info("waiting for the previous registration of node %d to expire (lease %x, %.1f s left "
                             "of the wait)", registration.node_id, e.holder_lease, deadline - now)
                await asyncio.sleep(poll_s)

    async def _remaining_ttl_s(self, lease_id: int) -> float:
        """Seconds the lease has left (-1 when etcd no longer knows it)."""
        try:
            reply = await self.session.client.get_lease_info(lease_id)
        except TRANSIENT_ERRORS:
            return float(self.session.ttl_s)  # unknown: at most one full TTL of a lease like ours
        return float(reply.TTL)

    async def mark_shutting_down(self) -> bool:
        """Rewrite our registration with ``shutting_down`` (same lease, so the same broker epoch)."""
        if self.registration is None:
            return False
        client = self.session.client
        tx = client.transactions
        key = self.keys.broker(self.registration.node_id)
        marked = replace(self.registration, shutting_down=True)
        ok, _ = await client.transaction(compare=[tx.create(key) == self.registration.epoch],
                                         success=[tx.put(key, marked.to_json(), lease=self.session.lease_id)],
                                         failure=[])
        if ok:
            self.registration = marked
        return ok

    async def deregister(self) -> bool:
        """Delete our own registration (not a newer one of the same node id): controlled shutdown."""
        if self.registration is None:
            return False
        client = self.session.client
        tx = client.transactions
        key = self.keys.broker(self.registration.node_id)
        ok, _ = await client.transaction(compare=[tx.create(key) == self.registration.epoch],
                                         success=[tx.delete(key)], failure=[])
        self.registration = None
        return ok

    async def live_brokers(self) -> dict[int, BrokerRegistration]:
        brokers, _revision = await self._snapshot()
        return brokers

    async def _snapshot(self) -> tuple[dict[int, BrokerRegistration], int]:
        result = await self.session.client.get_prefix(self.keys.brokers_prefix)
        brokers = {self.keys.node_id_of(kv.key): BrokerRegistration.from_json(kv.value, epoch=kv.create_revision)
                   for kv in result}
        return brokers, result.header.revision

    async def watch(self) -> AsyncIterator[dict[int, BrokerRegistration]]:
        """The live brokers now, then again after every change (a fresh dict each time).

        The watch starts at the revision right after the listing, so no change between the two is
        missed. A lost connection ends the iteration with the client's error; call again to resume.
        """
        brokers, revision = await self._snapshot()
        yield dict(brokers)
        client = self.session.client
        watch = await client.watch_prefix(self.keys.brokers_prefix, start_revision=revision + 1)
        try:
            async for event in watch:
                node_id = self.keys.node_id_of(event.kv.key)
                if event.kind == "PUT":
                    brokers[node_id] = BrokerRegistration.from_json(event.kv.value, epoch=event.kv.create_revision)
                else:
                    brokers.pop(node_id, None)
                yield dict(brokers)
        finally:
            await watch.cancel()
