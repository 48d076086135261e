"""The Kafka listeners of a broker: one asyncio server per listener, each accepted socket a
broker.connection.KafkaConnection; what connections share (the scratch read buffer, the memory
pool bounding ``queued.max.request.bytes``, connection quotas, client quotas, request statistics);
and Kafka's idle expiry: connections with nothing in flight and no bytes in or out for
``connections.max.idle.ms`` are closed.

Security (design.md 6b): every listener's TLS context and SASL settings are built before the broker
touches its log dirs; SSL and SASL_SSL listeners speak TLS only, so a plaintext client gets no
Kafka response.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from broker import listener_security
from broker.config import BrokerConfig
from broker.connection import KafkaConnection
from broker.connection_quotas import NAMES as CONNECTION_LIMITS
from broker.connection_quotas import ConnectionQuotas
from broker.memory_pool import MemoryPool
from broker.metrics.stats import RequestStats
from broker.services import BrokerServices
from security.quotas import ClientQuotaManager

log = logging.getLogger("broker.server")

# One read buffer for the whole server: get_buffer() and buffer_updated() run back to back for one
# socket at a time on the loop thread, so connections never need their own between reads.
_SCRATCH_SIZE = 64 * 1024


class KafkaServer:
    """``quotas``: the client quotas (byte rates) the connections apply, shared with the handlers."""

    def __init__(self, config: BrokerConfig, quotas: ClientQuotaManager) -> None:
        self.config = config
        self.quotas = quotas
        self.services: BrokerServices  # set by start()
        self.connections: set[KafkaConnection] = set()
        self.servers: list[asyncio.base_events.Server] = []
        self.max_queued = max(16, int(config.get("queued.max.requests") or 500))
        # Test-only: the handler of this api key raises, to exercise the unexpected-error path.
        self.raise_api = int(os.environ.get("KBROKERTEST_RAISE_API", "-1"))
        self.pool = MemoryPool(int(config.get("queued.max.request.bytes")))
        self.max_frame = config.socket_request_max_bytes
        self.max_idle_s = int(config.get("connections.max.idle.ms")) / 1000
        self.scratch = bytearray(_SCRATCH_SIZE)
        self.loop: Any = None
        self._reaper: asyncio.Task[None] | None = None
        self.bound_ports: dict[str, int] = {}  # listener name -> the port bound (port 0: ephemeral)
        self._security: dict[str, listener_security.ListenerSecurity] | None = None
        names = [li.name for li in config.listeners]
        self.conn_quotas = ConnectionQuotas(config.get, config.originals.get, names,
                                            config.get("inter.broker.listener.name") or (names[0] if names else None))
        config.add_change_listener(lambda name, _v: self.conn_quotas.reload() if name in CONNECTION_LIMITS else None)
        self.request_stats = RequestStats()  # per-API counts, errors, latency: broker.metrics
        # Called with a connection's id when it closes (share sessions end with their connection).
        self.disconnect_listeners: list[Callable[[int], None]] = []

    async def start(self, services: BrokerServices) -> list[tuple[str, int]]:
        self.services = services
        loop = self.loop = asyncio.get_running_loop()
        bound = []
        # Built again now that the dynamic broker configs stored in the metadata are applied (the
        # early check_listeners() ran before they were loaded).
        self._security = None
        security = self.check_listeners()
        for listener in self.config.listeners:
            host = listener.host or None
            sec = security[listener.name]
            srv = await loop.create_server(lambda sec=sec: KafkaConnection(self, sec), host, listener.port,
                                           reuse_address=True, backlog=1024, ssl=sec.ssl_context)
            self.servers.append(srv)
            self.bound_ports[listener.name] = srv.sockets[0].getsockname()[1]
            for sock in srv.sockets:
                addr = sock.getsockname()
                bound.append((addr[0], addr[1]))
                log.info("listening on %s:%s (%s, %s%s)", addr[0], addr[1], listener.name, sec.protocol,
                         f" {','.join(sec.sasl.mechanisms)}" if sec.sasl is not None else "")
        self._reaper = loop.create_task(self._close_idle_connections())
        return bound

    def check_listeners(self) -> dict[str, listener_security.ListenerSecurity]:
        """Build every listener's TLS context and SASL settings (raises ListenerSecurityError, an
        OSError, when one cannot be served); the broker calls it before touching its log dirs."""
        if self._security is None:
            self._security = listener_security.build(self.config)
        return self._security

    async def _close_idle_connections(self) -> None:
        """Kafka's idle expiry: close connections with nothing in flight and no traffic for the limit."""
        interval = min(max(self.max_idle_s / 4, 0.05), 10.0)
        while True:
            await asyncio.sleep(interval)
            deadline = time.monotonic() - self.max_idle_s
            closed = 0
            for conn in list(self.connections):
                if conn.last_activity < deadline and not conn.busy:
                    log.debug("closing connection %s from %s:%s: idle for more than connections.max.idle.ms=%d",
                              conn.id, *conn.peer, int(self.max_idle_s * 1000))
                    conn.close()
                    closed += 1
            if closed:
                log.info("closed %d connections idle for more than connections.max.idle.ms=%d", closed,
                         int(self.max_idle_s * 1000))

    async def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        for srv in self.servers:
            srv.close()
        for conn in list(self.connections):
            conn.close()
        for srv in self.servers:
            try:
                await asyncio.wait_for(srv.wait_closed(), 5)
            except TimeoutError:
                pass
