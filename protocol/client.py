"""A small asyncio Kafka request client: one connection, pipelined requests, kafka-python structs.

Used by kbroker's own tools (admin CLI), by tests that speak raw protocol, and between brokers
(follower fetchers, transaction markers). Optionally over TLS (``ssl_context``, with
``server_hostname`` for SNI and hostname verification; default: the host connected to) and with
SASL authentication right after connecting (``sasl``: protocol/sasl_client.py), as a client of an
SSL / SASL_PLAINTEXT / SASL_SSL listener. Not a general-purpose Kafka client.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import ssl
import struct
import time
from typing import Any

from .api_table import get_spec
from .headers import encode_request
from .sasl_client import SaslCredentials, authenticate


class ProtocolClient:
    def __init__(self, host: str, port: int, *, client_id: str = "kbroker-client",
                 ssl_context: ssl.SSLContext | None = None, server_hostname: str | None = None,
                 sasl: SaslCredentials | None = None) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self.ssl_context, self.server_hostname, self.sasl = ssl_context, server_hostname, sasl
        self.session_lifetime_ms = 0  # of the SASL session, when the server limits it (KIP-368)
        self._reauth_at: float | None = None  # monotonic time to re-authenticate (KIP-368)
        self._reauth_lock = asyncio.Lock()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._corr = itertools.count(1)
        self._pending: dict[int, tuple[asyncio.Future[Any], Any, int]] = {}
        self._reader_task: asyncio.Task[None] | None = None

    async def connect(self) -> ProtocolClient:
        """Open the connection (TLS handshake included), then authenticate when ``sasl`` is set.
        On any failure (or cancellation) the connection is closed before the error propagates."""
        tls: dict[str, Any] = {}
        if self.ssl_context is not None:
            tls = {"ssl": self.ssl_context, "server_hostname": self.server_hostname or self.host}
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port, **tls)
        self._reader_task = asyncio.create_task(self._read_loop())
        if self.sasl is not None:
            try:
                await self._authenticate()
            except BaseException:
                await self.close()
                raise
        return self

    async def _authenticate(self) -> None:
        assert self.sasl is not None
        self.session_lifetime_ms = await authenticate(self, self.sasl)
        # As Kafka's clients: re-authenticate at 85-95 % of the session lifetime (KIP-368), before
        # the server closes the connection on the first request after it ends.
        self._reauth_at = (time.monotonic() + self.session_lifetime_ms / 1000 * random.uniform(0.85, 0.95)
                           if self.session_lifetime_ms > 0 else None)

    async def _maybe_reauthenticate(self) -> None:
        """Re-authenticate on this connection when the session is about to end. Only with nothing
        in flight (as Kafka's clients): a pipelined request would otherwise race the handshake."""
        async with self._reauth_lock:
            if self._reauth_at is not None and time.monotonic() >= self._reauth_at and not self._pending:
                await self._authenticate()

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                # bounded: a TLS peer that never answers close_notify would hold us ~30 s
                await asyncio.wait_for(self._writer.wait_closed(), 5)
            except (OSError, TimeoutError):
                pass
        if self._reader_task is not None:
            self._reader_task.cancel()

    async def __aenter__(self) -> ProtocolClient:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(self, request: Any, version: int) -> Any:
        """Send ``request`` (a kafka-python ApiMessage) at ``version``; return the decoded response."""
        spec = get_spec(request.API_KEY)
        assert spec is not None
        if self._writer is None or self._reader_task is None or self._reader_task.done():
            raise ConnectionError("not connected")
        if self._reauth_at is not None and spec.api_key not in (17, 36) and time.monotonic() >= self._reauth_at:
            await self._maybe_reauthenticate()
        corr = next(self._corr)
        body = bytes(request.encode(version=version))
        frame = encode_request(spec.api_key, version, corr, self.client_id, body, spec.request_flexible(version))
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[corr] = (fut, spec, version)
        self._writer.write(frame)
        if spec.api_key == 0 and getattr(request, "acks", 1) == 0:
            del self._pending[corr]
            return None
        return await fut

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                size = struct.unpack(">i", await self._reader.readexactly(4))[0]
                data = await self._reader.readexactly(size)
                corr = struct.unpack_from(">i", data, 0)[0]
                fut, spec, version = self._pending.pop(corr)
                pos = 5 if spec.response_header_flexible(version) else 4
                fut.set_result(spec.response.decode(memoryview(data)[pos:], version=version))
        except (asyncio.IncompleteReadError, OSError) as e:  # OSError: ConnectionError and ssl.SSLError
            for fut, _, _ in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(f"connection closed: {e}"))
            self._pending.clear()
