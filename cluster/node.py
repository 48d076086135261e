"""Start and stop of one broker's cluster-mode machinery: session, cluster id, registration, store, controller.

``ClusterNode.start`` runs in this order, so a broker that must not run stops before it touched
anything: open the etcd session (EtcdUnavailable when no endpoint answers); read or create the
cluster id in etcd; check it against ``meta.properties`` in the log dirs (another cluster id there
refuses the start: those logs belong to another cluster); load the metadata view; register under the
session lease (a live duplicate ``node.id`` refuses the start, naming it; the registration of this
broker's previous incarnation, killed and restarted within its lease TTL, is waited out first, see
``Membership.register_waiting``); campaign for the controller. Every refusal is a
``ClusterStartError`` with a message for the operator.

etcd answering slowly while a broker joins (a request past its deadline, ``broker.heartbeat.interval.ms``,
after the session opened) is not a refusal: as Kafka's broker keeps retrying its initial registration
for ``initial.broker.registration.timeout.ms`` (60 s) before it exits, the join is given up (its
session closed, which revokes its lease and with it anything registered) and tried again with a new
session, backing off, until that timeout. Exiting at once instead made a broker in a container
restart, load its code again and wait for its own previous registration to expire, over and over
while etcd was slow: minutes for a healthcheck to pass on a loaded machine.

While running, a session that etcd *expired* (cut off longer than the lease TTL: a fenced broker
whose lease is gone) is not the end: the node grants a new lease on the same connection, registers
again (a new broker epoch; the controller meanwhile moved its leaderships away) and campaigns again,
retrying while etcd does not answer. The broker stays fenced until the new registration is in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import aetcd.exceptions

from .controlled_shutdown import ShutdownResult, controlled_shutdown
from .controller import Controller
from .controller_election import ControllerElection
from .etcd_keys import KeyLayout, get_or_create_cluster_id
from .etcd_session import TRANSIENT_ERRORS, EtcdSession, EtcdUnavailable
from .etcd_store import EtcdMetadataStore
from .membership import DuplicateBrokerError, Membership
from .partition_state import PartitionStateStore
from .producer_ids import ProducerIdAllocator
from .records import BrokerRegistration, Endpoint

log = logging.getLogger("cluster.node")

STOP_TIMEOUT_S = 10.0
JOIN_RETRY_BACKOFF_S = (0.5, 1.0, 2.0, 4.0)  # then 4 s between attempts


def registration_margin_s(session: EtcdSession) -> float:
    """Slack over the old lease's remaining TTL: etcd checks for expired leases every 500 ms, and a
    shared machine may be late; a live duplicate refreshes long before any of this runs out."""
    return max(2.0, session.ttl_s / 2)


class ClusterStartError(RuntimeError):
    """This broker must not join the cluster (message says why)."""


class _JoinTimedOut(ClusterStartError):
    """etcd was reached but did not answer a request of the join in time: tried again."""


# Slowness, not a refusal: a request past its deadline, a connection that broke or could not be made.
_SLOW_ETCD_ERRORS = (aetcd.exceptions.ConnectionTimeoutError, aetcd.exceptions.ConnectionFailedError,
                     asyncio.TimeoutError, OSError)


def stored_cluster_id(log_dirs: Sequence[Path]) -> str | None:
    """The cluster.id of the first log dir's meta.properties that has one."""
    for d in log_dirs:
        path = Path(d) / "meta.properties"
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            name, sep, value = line.partition("=")
            if sep and name.strip() == "cluster.id" and value.strip():
                return value.strip()
    return None


class ClusterNode:
    def __init__(self, session: EtcdSession, keys: KeyLayout, store: EtcdMetadataStore, membership: Membership,
                 election: ControllerElection, controller: Controller) -> None:
        self.session = session
        self.keys = keys
        self.store = store
        self.membership = membership
        self.election = election
        self.controller = controller
        self.producer_ids = ProducerIdAllocator(session, keys)
        self.registrations = 1  # how many times this node registered (1 + renewals after expiry)
        self._registration = membership.registration or BrokerRegistration(election.node_id, ())
        self._margin_s = registration_margin_s(session)
        self._renewal_task: asyncio.Task[None] | None = None

    def _start_renewals(self) -> None:
        self._renewal_task = asyncio.create_task(self._renew_after_expiry(), name="etcd-session-renewal")

    async def _renew_after_expiry(self) -> None:
        """Forever: wait for the session to expire, then rejoin under a new lease (module docstring)."""
        while True:
            await self.session.wait_expired()
            log.error("etcd session expired: node %d rejoins under a new lease", self.membership_node_id)
            await self.election.stop(resign=False)  # its key went with the old lease
            while True:
                try:
                    if self.session.expired:
                        await self.session.renew()
                    reg = await self.membership.register_waiting(self._registration, margin_s=self._margin_s)
                    break
                except DuplicateBrokerError as e:
                    # Another process took this node.id while we were cut off: it keeps it; we stay fenced.
                    log.error("cannot rejoin: %s; this broker stays fenced", e)
                    return
                except TRANSIENT_ERRORS as e:
                    log.warning("rejoining the cluster failed (%r); retrying", e)
                    await asyncio.sleep(max(0.5, self.session.ttl_s / 4))
            self.registrations += 1
            self.election.start()
            log.info("node %d registered again (broker epoch %d, lease %x)", reg.node_id, reg.epoch,
                     self.session.lease_id)

    @property
    def membership_node_id(self) -> int:
        return self._registration.node_id

    @classmethod
    async def start(cls, settings: Mapping[str, object], *, node_id: int, endpoints: Sequence[Endpoint],
                    rack: str | None, log_dirs: Sequence[Path],
                    default_replication_factor: Callable[[], int] = lambda: 1,
                    store_class: type[EtcdMetadataStore] = EtcdMetadataStore) -> ClusterNode:
        try:
            timeout_s = int(str(settings.get("initial.broker.registration.timeout.ms") or 60000)) / 1000
        except ValueError as e:
            raise ClusterStartError(f"invalid initial.broker.registration.timeout.ms: {e}") from e
        deadline = time.monotonic() + timeout_s
        attempt = 0
        while True:
            try:
                return await cls._start_once(settings, node_id=node_id, endpoints=endpoints, rack=rack,
                                             log_dirs=log_dirs, default_replication_factor=default_replication_factor,
                                             store_class=store_class, first=attempt == 0)
            except _JoinTimedOut as e:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ClusterStartError(f"{e} (still failing after initial.broker.registration.timeout.ms="
                                            f"{timeout_s * 1000:.0f})") from e
                pause = min(JOIN_RETRY_BACKOFF_S[min(attempt, len(JOIN_RETRY_BACKOFF_S) - 1)], left)
                attempt += 1
                log.warning("%s; joining again in %.1f s (attempt %d, %.0f s left of "
                            "initial.broker.registration.timeout.ms)", e, pause, attempt + 1, left)
                await asyncio.sleep(pause)

    @classmethod
    async def _start_once(cls, settings: Mapping[str, object], *, node_id: int, endpoints: Sequence[Endpoint],
                          rack: str | None, log_dirs: Sequence[Path], default_replication_factor: Callable[[], int],
                          store_class: type[EtcdMetadataStore], first: bool) -> ClusterNode:
        try:
            session = EtcdSession.from_config(settings)
        except ValueError as e:
            raise ClusterStartError(f"invalid etcd settings: {e}") from e
        try:
            await session.open()
        except (EtcdUnavailable, *TRANSIENT_ERRORS) as e:
            message = f"cannot reach etcd at {settings.get('kbroker.etcd.endpoints')}: {e}"
            # Nothing answering at all is a refusal (a wrong address or TLS setting, etcd down); once a
            # join has reached etcd, losing it again is etcd being slow, retried.
            raise (ClusterStartError if first else _JoinTimedOut)(message) from e
        store: EtcdMetadataStore | None = None
        try:
            cluster_id = await get_or_create_cluster_id(session.client)
            stored = stored_cluster_id(log_dirs)
            if stored is not None and stored != cluster_id:
                raise ClusterStartError(
                    f"the log dirs belong to cluster {stored} (meta.properties), but etcd holds cluster {cluster_id}; "
                    "refusing to start (use empty log dirs to join this cluster)")
            keys = KeyLayout(cluster_id)
            store = store_class(session, keys, node_id, default_replication_factor=default_replication_factor)
            await store.start()
            log.info("cluster %s: metadata loaded at etcd revision %d (%d topics, %d live brokers)", cluster_id,
                     store.revision, len(store.topics()), len(store.live_brokers()))
            membership = Membership(session, keys)
            registration = BrokerRegistration(node_id, tuple(endpoints), rack)
            margin_s = registration_margin_s(session)
            try:
                await membership.register_waiting(registration, margin_s=margin_s)
            except DuplicateBrokerError as e:
                log.error("refusing to start: %s", e)
                await store.stop()
                raise ClusterStartError(f"refusing to start: {e}") from e
            await store.wait_for(lambda: node_id in store.live_brokers(), "this broker's registration")
            election = ControllerElection(session, keys, node_id)
            controller = Controller(store, election, PartitionStateStore(session, keys), settings=settings)
            election.start()
            controller.start()
        except TRANSIENT_ERRORS as e:
            # The session's lease goes with it (revoked), and what was registered under it.
            with contextlib.suppress(Exception):
                if store is not None:
                    await asyncio.wait_for(store.stop(), STOP_TIMEOUT_S)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(session.close(), STOP_TIMEOUT_S)
            hint = (" (etcd has authentication enabled: set kbroker.etcd.username and kbroker.etcd.password)"
                    if any(w in str(e).lower() for w in ("user name is empty", "permission denied", "auth"))
                    else "")
            message = f"etcd at {session.endpoint} failed a request while joining: {e!r}{hint}"
            if isinstance(e, _SLOW_ETCD_ERRORS) and not hint:
                raise _JoinTimedOut(message) from e
            raise ClusterStartError(message) from e
        except BaseException:
            # Bounded: a refusal must end the process even when etcd stops answering meanwhile.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(session.close(), STOP_TIMEOUT_S)
            raise
        log.info("node %d joined cluster %s (broker epoch %d) via %s", node_id, cluster_id,
                 membership.registration.epoch if membership.registration else -1, session.endpoint)
        node = cls(session, keys, store, membership, election, controller)
        node._start_renewals()
        return node

    async def controlled_shutdown(self, *, max_retries: int, retry_backoff_s: float) -> ShutdownResult:
        """Hand leaderships over and leave the ISRs before the broker stops (cluster.controlled_shutdown)."""
        if self.session.fenced():
            return ShutdownResult()  # cut off: nothing it writes could win; the controller handles it
        return await controlled_shutdown(self.store, self.membership, PartitionStateStore(self.session, self.keys),
                                         max_retries=max_retries, retry_backoff_s=retry_backoff_s)

    async def stop(self) -> None:
        """Controlled stop: resign, deregister (the controller moves leadership now), close the session."""
        if self._renewal_task is not None:
            self._renewal_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewal_task
        await self.controller.stop()
        await self.election.stop(resign=True)
        await self.store.stop()
        with contextlib.suppress(*TRANSIENT_ERRORS):
            await self.membership.deregister()
        await self.session.close()
