"""A broker's session with etcd: the connection, its lease, keepalives, and the local fencing deadline.

``kbroker.etcd.endpoints`` is a comma-separated list of URLs (``http://host:port``, or
``https://host:port`` for TLS with the ``kbroker.etcd.ssl.*`` settings, see ``cluster.etcd_tls``; a
bare ``host:port`` means http); ``kbroker.etcd.username``/``password`` authenticate to an etcd with
auth enabled. The session connects to the first one that answers a status request and
moves on to the next after repeated keepalive failures. It grants one lease with TTL =
``broker.session.timeout.ms`` (rounded up to whole seconds, etcd's unit) and refreshes it every
``broker.heartbeat.interval.ms``. Everything the broker owns in etcd (its registration, the
controller key) is bound to that lease, so it disappears when the lease expires.

Safety rule (design.md section 6): a broker cut off from etcd cannot see its lease expire, yet the
controller will elect other leaders as soon as etcd expires it. So the session keeps a LOCAL
deadline: ``fenced()`` becomes true at ``last_ack + ttl - safety_margin``, where ``last_ack`` is the
time the last *acknowledged* keepalive was **sent** (etcd restarts the TTL when it receives the
request, which is later, so the local deadline always falls before etcd's). A leader must check
``fenced()`` before acknowledging anything. A keepalive reply with TTL <= 0 means etcd already
expired the lease: the session is then ``expired`` for good and a new one is needed.

The local clock is ``time.monotonic`` (never wall time, which can jump).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from urllib.parse import urlsplit

import aetcd

from .etcd_tls import EtcdClient, EtcdTls

log = logging.getLogger("cluster.etcd_session")

# Errors that mean "etcd did not answer this time": retried at the next heartbeat, never fatal.
TRANSIENT_ERRORS = (aetcd.ClientError, asyncio.TimeoutError, OSError)


class EtcdUnavailable(ConnectionError):
    """None of the configured etcd endpoints answered."""


class SessionExpired(RuntimeError):
    """etcd no longer knows the session's lease: everything bound to it is gone."""


def parse_endpoint_urls(endpoints: str | Sequence[str]) -> list[tuple[str, str, int]]:
    """``"https://a:2379, b:2379"`` -> ``[("https", "a", 2379), ("http", "b", 2379)]``."""
    items = endpoints.split(",") if isinstance(endpoints, str) else list(endpoints)
    out: list[tuple[str, str, int]] = []
    for raw in (i.strip() for i in items):
        if not raw:
            continue
        url = urlsplit(raw if "://" in raw else f"http://{raw}")
        if url.scheme not in ("http", "https"):
            raise ValueError(f"etcd endpoint {raw!r}: only http:// and https:// are supported")
        if not url.hostname:
            raise ValueError(f"etcd endpoint {raw!r} has no host")
        out.append((url.scheme, url.hostname, url.port or 2379))
    if not out:
        raise ValueError("kbroker.etcd.endpoints is empty")
    return out


def parse_endpoints(endpoints: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"http://a:2379, b:2379"`` -> ``[("a", 2379), ("b", 2379)]`` (the scheme dropped)."""
    return [(host, port) for _scheme, host, port in parse_endpoint_urls(endpoints)]


def default_safety_margin_ms(ttl_ms: int, heartbeat_ms: int) -> int:
    """A fifth of the TTL, at least 500 ms, and never so large that one late heartbeat fences.

    The margin covers what happens after the deadline is checked: an acknowledgement already being
    written, a stalled event loop, clock-rate differences between hosts.
    """
    margin = max(ttl_ms // 5, 500)
    return max(0, min(margin, ttl_ms - 2 * heartbeat_ms))


class EtcdSession:
    def __init__(self, endpoints: str | Sequence[str], *, session_timeout_ms: int = 9000,
                 heartbeat_interval_ms: int = 2000, safety_margin_ms: int | None = None,
                 request_timeout_ms: int | None = None, username: str | None = None,
                 password: str | None = None, tls: EtcdTls | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        urls = parse_endpoint_urls(endpoints)
        self.endpoints = [(host, port) for _scheme, host, port in urls]
        self._schemes = [scheme for scheme, _host, _port in urls]
        if tls is not None and "http" in self._schemes:
            # Never fall back to plaintext for metadata an operator asked to protect.
            raise ValueError("kbroker.etcd.ssl.* is set but an etcd endpoint is http://; use https:// endpoints")
        if tls is not None:
            try:
                tls.credentials()  # unreadable files refuse the start here, naming the setting
            except OSError as e:
                raise ValueError(str(e)) from e
        if (username is None) != (password is None):
            raise ValueError("kbroker.etcd.username and kbroker.etcd.password go together")
        self._tls = tls if tls is not None else (EtcdTls() if "https" in self._schemes else None)
        if heartbeat_interval_ms <= 0 or session_timeout_ms <= heartbeat_interval_ms:
            raise ValueError("broker.heartbeat.interval.ms must be positive and below broker.session.timeout.ms")
        self._requested_ttl_s = max(1, math.ceil(session_timeout_ms / 1000))
        self._heartbeat_s = heartbeat_interval_ms / 1000
        self._margin_ms = safety_margin_ms
        # One RPC may not outlive a heartbeat much: a hung keepalive must not delay the next one.
        self._request_timeout_s = (request_timeout_ms if request_timeout_ms is not None
                                   else max(heartbeat_interval_ms, 500)) / 1000
        self._username, self._password = username, password
        self._clock = clock
        self._client: aetcd.Client | None = None
        self._endpoint_index = 0
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._expired = asyncio.Event()
        self.lease_id: int = 0
        self.ttl_s: int = 0
        self.safety_margin_s: float = 0.0
        self.last_ack: float = -math.inf
        self.acks = 0

    @classmethod
    def from_config(cls, config: Mapping[str, object], **kw) -> EtcdSession:
        """A session from broker settings by name (values as strings or ints, e.g. a server.properties dict)."""
        def get(name: str, default: str = "") -> str:
            value = config.get(name)
            return default if value is None else str(value)

        return cls(get("kbroker.etcd.endpoints"),
                   session_timeout_ms=int(get("broker.session.timeout.ms", "9000")),
                   heartbeat_interval_ms=int(get("broker.heartbeat.interval.ms", "2000")),
                   username=get("kbroker.etcd.username") or None, password=get("kbroker.etcd.password") or None,
                   tls=EtcdTls.from_config(config), **kw)

    # -- connection ------------------------------------------------------------------------------
    @property
    def client(self) -> aetcd.Client:
        if self._client is None:
            raise RuntimeError("etcd session not open")
        return self._client

    @property
    def endpoint(self) -> str:
        host, port = self.endpoints[self._endpoint_index]
        return f"{self._schemes[self._endpoint_index]}://{host}:{port}"

    def _channel_options(self) -> dict[str, int]:
        # gRPC's default reconnect backoff grows to minutes; after an etcd restart the lease only
        # survives if a keepalive gets through within one TTL, so retry at the heartbeat pace.
        backoff_ms = max(100, int(self._heartbeat_s * 1000))
        return {"grpc.initial_reconnect_backoff_ms": backoff_ms, "grpc.min_reconnect_backoff_ms": backoff_ms,
                "grpc.max_reconnect_backoff_ms": backoff_ms}

    async def _connect(self, start: int) -> None:
        """Connect to the first endpoint, from ``start`` on (wrapping), that answers a status request."""
        errors = []
        for i in range(len(self.endpoints)):
            index = (start + i) % len(self.endpoints)
            host, port = self.endpoints[index]
            tls = self._tls if self._schemes[index] == "https" else None
            client = EtcdClient(host=host, port=port, username=self._username, password=self._password,
                                timeout=self._request_timeout_s,  # type: ignore[arg-type]
                                options=self._channel_options(), tls=tls)
            try:
                await asyncio.wait_for(client.status(), self._request_timeout_s * 2)
            except TRANSIENT_ERRORS as e:
                errors.append(f"{self._schemes[index]}://{host}:{port}: {_describe(e, tls is not None)}")
                with contextlib.suppress(Exception):
                    await client.close()
                continue
            old, self._client, self._endpoint_index = self._client, client, index
            if old is not None:
                await _close_client(old, self._request_timeout_s * 4)
            log.info("connected to etcd at %s", self.endpoint)
            return
        raise EtcdUnavailable("no etcd endpoint answered: " + "; ".join(errors))

    async def open(self) -> EtcdSession:
        """Connect, grant the lease and start the keepalives."""
        await self._connect(0)
        await self._grant()
        return self

    async def renew(self) -> None:
        """After ``expired``: grant a new lease on the same connection and keep it alive.

        Everything bound to the old lease is gone; the caller registers again (a new broker epoch).
        Holders of this session object see the new ``lease_id``. Transient errors propagate (retry).
        """
        if self._closed:
            raise RuntimeError("etcd session closed")
        if not self._expired.is_set():
            raise RuntimeError("etcd session not expired")
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.lease_id, self.last_ack = 0, -math.inf
        await self._grant()
        self._expired = asyncio.Event()

    async def _grant(self) -> None:
        sent = self._clock()
        lease = await asyncio.wait_for(self.client.lease(self._requested_ttl_s), self._request_timeout_s * 2)
        self.lease_id, self.ttl_s = lease.id, lease.ttl
        # etcd may raise a TTL below its minimum (1.5 election timeouts); the margin follows what it granted.
        ttl_ms = self.ttl_s * 1000
        margin_ms = (self._margin_ms if self._margin_ms is not None
                     else default_safety_margin_ms(ttl_ms, int(self._heartbeat_s * 1000)))
        if not 0 <= margin_ms < ttl_ms - self._heartbeat_s * 1000:
            raise ValueError(f"safety margin {margin_ms} ms leaves no room for a heartbeat in a {ttl_ms} ms TTL")
        self.safety_margin_s = margin_ms / 1000
        self._ack(sent)
        self._task = asyncio.create_task(self._keepalive_loop(), name=f"etcd-keepalive-{self.lease_id:x}")
        log.info("etcd session open: lease %x, ttl %d s, heartbeat %.3f s, fencing margin %.3f s",
                 self.lease_id, self.ttl_s, self._heartbeat_s, self.safety_margin_s)

    # -- fencing ---------------------------------------------------------------------------------
    def _ack(self, sent: float) -> None:
        self.last_ack = max(self.last_ack, sent)
        self.acks += 1

    @property
    def deadline(self) -> float:
        """The local time after which this broker must behave as if its lease had expired."""
        return self.last_ack + self.ttl_s - self.safety_margin_s

    def fenced(self, now: float | None = None) -> bool:
        """True once the local deadline has passed, or etcd said the lease is gone, or the session is closed."""
        if self._expired.is_set() or self._closed or self.lease_id == 0:
            return True
        return (self._clock() if now is None else now) > self.deadline

    @property
    def expired(self) -> bool:
        return self._expired.is_set()

    @property
    def usable(self) -> bool:
        """Open, not closed, lease not expired: keys may still be bound to this session's lease."""
        return self.lease_id != 0 and not self._closed and not self._expired.is_set()

    async def wait_expired(self) -> None:
        await self._expired.wait()

    # -- keepalives ------------------------------------------------------------------------------
    async def _keepalive_loop(self) -> None:
        failures = 0
        next_beat = self.last_ack + self._heartbeat_s
        while not self._closed:
            await asyncio.sleep(max(0.0, next_beat - self._clock()))
            sent = self._clock()
            next_beat = sent + self._heartbeat_s
            try:
                reply = await asyncio.wait_for(self.client.refresh_lease(self.lease_id), self._request_timeout_s)
            except TRANSIENT_ERRORS as e:
                failures += 1
                log.warning("etcd keepalive of lease %x failed (%d in a row, %.3f s to the fencing deadline): %r",
                            self.lease_id, failures, self.deadline - self._clock(), e)
                if failures % 2 == 0 and len(self.endpoints) > 1:
                    with contextlib.suppress(EtcdUnavailable):
                        await self._connect(self._endpoint_index + 1)
                continue
            if reply is None or reply.TTL <= 0:
                log.error("etcd lease %x expired: this broker's registration and leaderships are gone",
                          self.lease_id)
                self._expired.set()
                return
            if failures:
                log.info("etcd keepalive of lease %x acknowledged again after %d failures", self.lease_id, failures)
            failures = 0
            self._ack(sent)

    # -- shutdown --------------------------------------------------------------------------------
    async def close(self, *, revoke: bool = True) -> None:
        """Stop the keepalives; with ``revoke`` also delete the lease (and every key bound to it) now.

        ``revoke=False`` leaves the lease to expire on its own, as after a crash.
        """
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._client is not None:
            if revoke and self.lease_id and not self._expired.is_set():
                try:
                    await asyncio.wait_for(self._client.revoke_lease(self.lease_id), self._request_timeout_s * 2)
                except TRANSIENT_ERRORS as e:
                    log.warning("could not revoke etcd lease %x (it expires on its own): %r", self.lease_id, e)
            await _close_client(self._client, self._request_timeout_s * 4)

    async def __aenter__(self) -> EtcdSession:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def _close_client(client: aetcd.Client, timeout_s: float) -> None:
    """Close an aetcd client, bounded: after an etcd restart its watcher may wait forever on a full
    request queue that nothing consumes any more (aetcd 1.0), and a stop must still end."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(client.close(), timeout_s)


def _describe(error: BaseException, tls: bool) -> str:
    """The error of a failed first request, with a hint when it looks like a TLS mismatch."""
    text = f"{error!r}"
    lowered = text.lower()
    if tls and any(w in lowered for w in ("ssl", "handshake", "certificate")):
        return text + (" (TLS handshake failed: check kbroker.etcd.ssl.cafile against etcd's server certificate, "
                       "and kbroker.etcd.ssl.certfile/keyfile when etcd asks for client certificates)")
    if not tls:
        return text + " (if this etcd serves TLS, use an https:// endpoint and kbroker.etcd.ssl.cafile)"
    return text
