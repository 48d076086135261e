"""A small asyncio Kafka request client: one connection, pipelined requests, kafka-python structs.

Used by kbroker's own tools (admin CLI), by tests that speak raw protocol, and between brokers
(follower fetchers, transaction markers). Optionally over TLS (``ssl_context``, with
``server_hostname`` for SNI and hostname verification; default: the host connected to) and with
SASL authentication right after connecting (``sasl``: protocol/sasl_client.py), as a client of an
SSL / SASL_PLAINTEXT / SASL_SSL listener. Not a general-purpose Kafka client.

Responses are read by a buffered protocol: small frames are cut from one reusable read buffer,
and a large one (a follower's fetch answer) is read straight into a buffer of its own size, so its
records are copied once from the socket and, with a hand-written ``decode`` (e.g.
protocol.fast_codecs.decode_fetch_response), handed on as views into that buffer.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import ssl
import struct
import time
from collections.abc import Callable
from typing import Any

from .api_table import get_spec
from .headers import encode_request
from .sasl_client import SaslCredentials, authenticate

_SIZE = struct.Struct(">i")
_CORR = struct.Struct(">i")
_SCRATCH = 64 * 1024

Decoder = Callable[[memoryview, int], Any]


class _FrameReader(asyncio.BufferedProtocol):
    """Size-prefixed frames off the socket, each handed to ``on_frame`` as a bytearray."""

    def __init__(self, on_frame: Callable[[bytearray], None], on_lost: Callable[[Exception | None], None]) -> None:
        self.on_frame, self.on_lost = on_frame, on_lost
        self.transport: asyncio.Transport | None = None
        self._scratch = bytearray(_SCRATCH)
        self._have = 0  # bytes at the start of _scratch not yet parsed
        self._frame: bytearray | None = None  # a frame larger than what one read brings
        self._filled = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._filled:]
        return memoryview(self._scratch)[self._have:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is not None:
            self._filled += nbytes
            if self._filled == len(self._frame):
                frame, self._frame = self._frame, None
                self.on_frame(frame)
            return
        buf = self._scratch
        end = self._have + nbytes
        pos = 0
        while end - pos >= 4:
            size = _SIZE.unpack_from(buf, pos)[0]
            if size < 0:
                raise ConnectionError(f"negative frame size {size}")
            if end - pos - 4 < size:
                if size + 4 > len(buf):  # too big for the read buffer: a buffer of its own
                    self._frame = bytearray(size)
                    part = end - pos - 4
                    self._frame[:part] = buf[pos + 4:end]
                    self._filled = part
                    end = pos  # nothing left in the scratch buffer
                break
            self.on_frame(buf[pos + 4:pos + 4 + size])
            pos += 4 + size
        rest = end - pos
        if rest and pos:
            buf[:rest] = buf[pos:end]
        self._have = rest if end > pos else 0

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.on_lost(exc)


class ProtocolClient:
    def __init__(self, host: str, port: int, *, client_id: str = "kbroker-client",
                 ssl_context: ssl.SSLContext | None = None, server_hostname: str | None = None,
                 sasl: SaslCredentials | None = None) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self.ssl_context, self.server_hostname, self.sasl = ssl_context, server_hostname, sasl
        self.session_lifetime_ms = 0  # of the SASL session, when the server limits it (KIP-368)
        self._reauth_at: float | None = None  # monotonic time to re-authenticate (KIP-368)
        self._reauth_lock = asyncio.Lock()
        self._transport: asyncio.Transport | None = None
        self._closed: asyncio.Future[None] | None = None
        self._corr = itertools.count(1)
        self._pending: dict[int, tuple[asyncio.Future[Any], Any, int, Decoder | None]] = {}

    async def connect(self) -> ProtocolClient:
        """Open the connection (TLS handshake included), then authenticate when ``sasl`` is set.
        On any failure (or cancellation) the connection is closed before the error propagates."""
        tls: dict[str, Any] = {}
        if self.ssl_context is not None:
            tls = {"ssl": self.ssl_context, "server_hostname": self.server_hostname or self.host}
        loop = asyncio.get_running_loop()
        self._closed = loop.create_future()
        self._transport, _ = await loop.create_connection(
            lambda: _FrameReader(self._on_frame, self._on_lost), self.host, self.port, **tls)
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

    @property
    def connected(self) -> bool:
        """Connected and not lost or closing: a caller keeping clients by address reconnects otherwise."""
        return self._transport is not None and not self._transport.is_closing()

    async def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            if self._closed is not None:
                try:
                    # bounded: a TLS peer that never answers close_notify would hold us ~30 s
                    await asyncio.wait_for(asyncio.shield(self._closed), 5)
                except (OSError, TimeoutError):
                    self._transport.abort()

    async def __aenter__(self) -> ProtocolClient:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(self, request: Any, version: int, *, decode: Decoder | None = None,
                      timeout_s: float | None = None) -> Any:
        """Send ``request`` (a kafka-python ApiMessage) at ``version``; return the decoded response
        (by kafka-python's codec, or by ``decode(body, version)``). ``timeout_s``: raise TimeoutError
        if no answer came by then (a loop timer on the answer's future: cheaper than wrapping the
        call in asyncio.timeout, for callers that send one request after another, as followers do)."""
        spec = get_spec(request.API_KEY)
        assert spec is not None
        if self._transport is None or self._transport.is_closing():
            raise ConnectionError("not connected")
        if self._reauth_at is not None and spec.api_key not in (17, 36) and time.monotonic() >= self._reauth_at:
            if timeout_s is None:
                await self._maybe_reauthenticate()
            else:
                await asyncio.wait_for(self._maybe_reauthenticate(), timeout_s)
        corr = next(self._corr)
        body = bytes(request.encode(version=version))
        frame = encode_request(spec.api_key, version, corr, self.client_id, body, spec.request_flexible(version))
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[corr] = (fut, spec, version, decode)
        self._transport.write(frame)
        if spec.api_key == 0 and getattr(request, "acks", 1) == 0:
            del self._pending[corr]
            return None
        if timeout_s is None:
            return await fut
        timer = fut.get_loop().call_later(timeout_s, _expire, fut)
        try:
            return await fut
        finally:
            timer.cancel()
            self._pending.pop(corr, None)  # answered: already gone; expired: nothing left behind

    def _on_frame(self, frame: bytearray) -> None:
        corr = _CORR.unpack_from(frame, 0)[0]
        entry = self._pending.pop(corr, None)
        if entry is None:
            return  # an answer nobody waits for any more (acks=0 produce never gets one)
        fut, spec, version, decode = entry
        if fut.done():
            return
        pos = 5 if spec.response_header_flexible(version) else 4
        body = memoryview(frame)[pos:]
        try:
            fut.set_result(decode(body, version) if decode is not None else spec.response.decode(body, version=version))
        except Exception as e:  # noqa: BLE001 - an undecodable answer fails this request only
            fut.set_exception(e)

    def _on_lost(self, exc: Exception | None) -> None:
        for fut, _, _, _ in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError(f"connection closed: {exc or 'by the peer'}"))
        self._pending.clear()
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)


def _expire(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError("no answer in time"))
