"""A fault-injecting TCP proxy for the Kafka protocol, used by the chaos tests.

It listens on 127.0.0.1 in front of one broker and relays whole size-prefixed frames both ways.
When armed, every request frame may (seeded RNG, so a run is reproducible up to thread timing):

* **drop** the connection: the frame is not forwarded, both sides are closed at once;
* **swallow** the response: the frame is forwarded, the broker's answer to it (and everything after
  it on that connection) is discarded, and the connection is closed a moment later. The broker has
  applied the request but the client never learns it: exactly the case idempotence exists for;
* **stall** the connection: like swallow, but the proxy keeps the connection open (up to
  ``stall_timeout`` seconds), so the client has to notice through its own request timeout.

Clients learn broker addresses from Metadata, so the broker must advertise the proxy
(``advertised.listeners=PLAINTEXT://127.0.0.1:<proxy.port>``); the port is bound when the proxy is
constructed, so it can be passed to the broker before either starts. The proxy runs its own event
loop in a daemon thread, so blocking clients (confluent-kafka, kafka-python) and asyncio clients in
the test's loop (aiokafka) can use it alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field

_SIZE = struct.Struct(">i")
_REQ_HEAD = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_CORR = struct.Struct(">i")
MAX_FRAME = 200 * 1024 * 1024


@dataclass
class ProxyStats:
    connections: int = 0
    requests: int = 0
    responses: int = 0
    drops: int = 0
    swallows: int = 0
    stalls: int = 0
    swallowed_responses: int = 0
    requests_by_api: Counter[int] = field(default_factory=Counter)
    max_in_flight: int = 0  # most requests awaiting a response on one connection at a time
    # (fault kind, api key of the request it hit) -> count
    by_api: Counter[tuple[str, int]] = field(default_factory=Counter)

    @property
    def faults(self) -> int:
        return self.drops + self.swallows + self.stalls


class _Conn:
    """One client connection and its upstream twin."""

    def __init__(self, proxy: FaultProxy, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter,
                 up_r: asyncio.StreamReader, up_w: asyncio.StreamWriter) -> None:
        self.proxy = proxy
        self.client_r, self.client_w, self.up_r, self.up_w = client_r, client_w, up_r, up_w
        self.swallow_from: int | None = None  # correlation id whose response starts the swallowing
        self.close_after: tuple[float, float] = (0.0, 0.0)  # delay range before closing, once swallowing
        self.swallowing = False
        self.closed = False
        self.in_flight = 0
        self.tasks: list[asyncio.Task[None]] = []

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for w in (self.client_w, self.up_w):
            with contextlib.suppress(Exception):
                # abort, not close: a dropped connection must not flush what is still buffered.
                w.transport.abort()
        for t in self.tasks:
            if t is not asyncio.current_task():
                t.cancel()

    async def client_to_broker(self) -> None:
        proxy = self.proxy
        try:
            while not self.closed:
                size_b = await self.client_r.readexactly(4)
                size = _SIZE.unpack(size_b)[0]
                if size < 0 or size > MAX_FRAME:
                    break
                payload = await self.client_r.readexactly(size)
                api_key, _version, corr = _REQ_HEAD.unpack_from(payload, 0) if size >= 8 else (-1, -1, -1)
                proxy.stats.requests += 1
                proxy.stats.requests_by_api[api_key] += 1
                if proxy.arm_after_api is not None and not proxy.armed:
                    proxy._pending_api[(id(self), corr)] = api_key
                fault = None if self.swallow_from is not None else proxy._decide(api_key)
                if fault is not None:
                    proxy.stats.by_api[(fault, api_key)] += 1
                if fault == "drop":
                    proxy.stats.drops += 1
                    break
                if fault == "swallow":
                    proxy.stats.swallows += 1
                    self.swallow_from, self.close_after = corr, proxy.close_delay
                elif fault == "stall":
                    proxy.stats.stalls += 1
                    self.swallow_from, self.close_after = corr, (proxy.stall_timeout, proxy.stall_timeout)
                self.in_flight += 1
                if self.in_flight > proxy.stats.max_in_flight:
                    proxy.stats.max_in_flight = self.in_flight
                self.up_w.write(size_b + payload)
                await self.up_w.drain()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            self.close()

    async def broker_to_client(self) -> None:
        proxy = self.proxy
        try:
            while not self.closed:
                size_b = await self.up_r.readexactly(4)
                size = _SIZE.unpack(size_b)[0]
                payload = await self.up_r.readexactly(size)
                corr = _CORR.unpack_from(payload, 0)[0] if size >= 4 else -1
                self.in_flight -= 1
                if not self.swallowing and self.swallow_from is not None and corr == self.swallow_from:
                    self.swallowing = True
                    lo, hi = self.close_after
                    asyncio.get_running_loop().call_later(proxy._rng.uniform(lo, hi), self.close)
                if self.swallowing:
                    proxy.stats.swallowed_responses += 1
                    continue
                proxy.stats.responses += 1
                self.client_w.write(size_b + payload)
                await self.client_w.drain()
                proxy._saw_response(payload, corr, self)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            if not self.swallowing:  # a swallowing connection closes on its timer
                self.close()


class FaultProxy:
    """Kafka-framing-aware TCP proxy that injects connection drops and lost responses.

    ``drop_rate`` / ``swallow_rate`` / ``stall_rate``: per-request probabilities once armed. Faults are armed by
    :meth:`enable_faults`, automatically after ``faults_after_requests`` request frames, or
    (``arm_after_api``) once a response to that api key has reached a client (22: InitProducerId,
    so the producer has its id first). ``fault_api_keys`` restricts faults to those request kinds;
    ``max_faults`` caps their number so a run always terminates.
    """

    def __init__(self, upstream: str, *, seed: int = 0, drop_rate: float = 0.0, swallow_rate: float = 0.0,
                 stall_rate: float = 0.0, stall_timeout: float = 60.0,
                 faults_after_requests: int | None = None, arm_after_api: int | None = None,
                 fault_api_keys: Collection[int] | None = None, max_faults: int | None = None,
                 close_delay: tuple[float, float] = (0.005, 0.05), host: str = "127.0.0.1") -> None:
        up_host, up_port = upstream.rsplit(":", 1)
        self.upstream = (up_host, int(up_port))
        self.drop_rate = drop_rate
        self.swallow_rate = swallow_rate
        self.stall_rate = stall_rate
        self.stall_timeout = stall_timeout
        self.faults_after_requests = faults_after_requests
        self.arm_after_api = arm_after_api
        self.fault_api_keys = frozenset(fault_api_keys) if fault_api_keys is not None else None
        self.max_faults = max_faults
        self.close_delay = close_delay
        self.stats = ProxyStats()
        self._rng = random.Random(seed)
        self._armed = False
        # Bind now so the port can be advertised by a broker started before the proxy runs.
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self.host = host
        self.port: int = self._sock.getsockname()[1]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[_Conn] = set()
        # Pending request api keys by (connection, correlation id), only while watching for arm_after_api.
        self._pending_api: dict[tuple[int, int], int] = {}

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # --- fault control (called from any thread; plain attribute writes) ---------------------

    def enable_faults(self) -> None:
        self._armed = True

    def disable_faults(self) -> None:
        self._armed = False
        self.arm_after_api = None
        self.faults_after_requests = None

    @property
    def armed(self) -> bool:
        return self._armed

    def _decide(self, api_key: int) -> str | None:
        if not self._armed and self.faults_after_requests is not None \
                and self.stats.requests > self.faults_after_requests:
            self._armed = True
        if not self._armed:
            return None
        if self.max_faults is not None and self.stats.faults >= self.max_faults:
            return None
        if self.fault_api_keys is not None and api_key not in self.fault_api_keys:
            return None
        r = self._rng.random()
        if r < self.drop_rate:
            return "drop"
        r -= self.drop_rate
        if r < self.swallow_rate:
            return "swallow"
        if r - self.swallow_rate < self.stall_rate:
            return "stall"
        return None

    def _saw_response(self, payload: bytes, corr: int, conn: _Conn) -> None:
        # Responses carry only the correlation id: the request's api key was remembered by
        # client_to_broker while arming on an api key was pending.
        if self.arm_after_api is None or self._armed:
            return
        if self._pending_api.pop((id(conn), corr), None) == self.arm_after_api:
            self._armed = True
            self._pending_api.clear()

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._serve, sock=self._sock))
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name=f"fault-proxy-{self.port}", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fault proxy did not start")
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is None or self._thread is None:
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for conn in list(self._conns):
                conn.close()
            await asyncio.sleep(0)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(10)
        with contextlib.suppress(Exception):
            loop.close()
        self._loop = None
        self._thread = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.transport.abort()
            return
        for w in (client_w, up_w):
            sock = w.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.stats.connections += 1
        conn = _Conn(self, client_r, client_w, up_r, up_w)
        self._conns.add(conn)
        conn.tasks = [asyncio.create_task(conn.client_to_broker()), asyncio.create_task(conn.broker_to_client())]
        try:
            await asyncio.gather(*conn.tasks, return_exceptions=True)
        finally:
            conn.close()
            self._conns.discard(conn)

