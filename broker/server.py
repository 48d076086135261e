"""The asyncio TCP server: size-prefixed frames in, responses out in request order.

Like Kafka, each connection is served one request at a time (a connection is "muted" while its
request is in flight), so pipelined requests are applied and answered in the order sent.
Responses ready back to back are coalesced into one write. Bad input (oversized or truncated
frames, unknown api keys or versions, undecodable bodies) closes only that connection, with a
log line; ApiVersions with a version we do not know gets the v0 UNSUPPORTED_VERSION answer.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import struct
import time
from collections import deque
from typing import TYPE_CHECKING

from kafka.protocol.metadata import ApiVersionsResponse

from broker.handlers import HANDLERS, RawResponse, RequestContext
from protocol.api_table import get_spec
from protocol.errors import ErrorCode
from protocol.headers import (
    HeaderError,
    encode_response_prefix,
    parse_request_header,
    skip_tagged_fields,
)

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger("broker.server")
request_log = logging.getLogger("kbroker.request")

_SIZE = struct.Struct(">i")
# APIs whose handling may park (long poll, waiting for a rebalance): flush earlier responses first.
_PARKING_APIS = frozenset({1, 11, 14})
_conn_ids = itertools.count(1)
_SCRATCH_SIZE = 64 * 1024


class CloseConnection(Exception):
    """Protocol violation: log it and close this connection only."""


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, server: KafkaServer) -> None:
        self.server = server
        self.broker = server.broker
        self.id = next(_conn_ids)
        self.transport: asyncio.Transport | None = None
        self.peer = ("?", 0)
        self._scratch = bytearray(_SCRATCH_SIZE)
        self._scratch_len = 0
        self._big: bytearray | None = None
        self._big_pos = 0
        self._loop = asyncio.get_event_loop()
        self._frames: deque[bytearray] = deque()
        self._worker: asyncio.Task[None] | None = None
        self._closed = False
        self._paused_reading = False
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._max_frame = self.broker.config.socket_request_max_bytes

    # --- transport callbacks ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = (peer[0], peer[1])
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._can_write.set()
        self.server.connections.discard(self)
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # Reads land in a per-connection scratch buffer, from which small frames are copied out once;
    # a frame larger than the scratch buffer gets its own bytearray and the rest of it is read
    # straight into place, so big produce requests are never copied by Python.

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big is not None:
            return memoryview(self._big)[self._big_pos :]
        return memoryview(self._scratch)[self._scratch_len :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._big is not None:
            self._big_pos += nbytes
            if self._big_pos == len(self._big):
                self._frames.append(self._big)
                self._big = None
                self._frames_ready()
            return
        buf = self._scratch
        n = self._scratch_len + nbytes
        pos = 0
        while n - pos >= 4:
            size = _SIZE.unpack_from(buf, pos)[0]
            if size < 0 or size > self._max_frame:
                log.warning("closing connection %s from %s:%s: frame of %d bytes exceeds socket.request.max.bytes=%d",
                            self.id, *self.peer, size, self._max_frame)
                self.close()
                return
            if n - pos - 4 >= size:
                # A bytearray slice: one copy, and writable, so produce can patch offsets in place.
                self._frames.append(buf[pos + 4 : pos + 4 + size])
                pos += 4 + size
            elif size + 4 > len(buf):
                have = n - pos - 4
                self._big = bytearray(size)
                self._big[:have] = memoryview(buf)[pos + 4 : n]
                self._big_pos = have
                pos = n
                break
            else:
                break
        if pos:
            rest = n - pos
            if rest:
                buf[:rest] = buf[pos:n]
            n = rest
        self._scratch_len = n
        if self._frames:
            self._frames_ready()

    def _frames_ready(self) -> None:
        if self._worker is None or self._worker.done():
            self._worker = self._loop.create_task(self._process())
        if len(self._frames) > self.server.max_queued and not self._paused_reading and self.transport:
            self._paused_reading = True
            self.transport.pause_reading()

    def eof_received(self) -> bool | None:
        pending = self._scratch_len + (self._big_pos if self._big is not None else 0)
        if pending:
            log.warning("connection %s from %s:%s closed mid-frame (%d bytes of a truncated request dropped)",
                        self.id, *self.peer, pending)
        return None

    def close(self) -> None:
        if not self._closed and self.transport is not None:
            self._closed = True
            self.transport.close()

    # --- request processing ------------------------------------------------------------------

    async def _process(self) -> None:
        out: list[bytes | memoryview] = []
        try:
            while self._frames and not self._closed:
                frame = self._frames.popleft()
                if self._paused_reading and len(self._frames) < self.server.max_queued // 2 and self.transport:
                    self._paused_reading = False
                    self.transport.resume_reading()
                if out and int.from_bytes(frame[:2], "big", signed=True) in _PARKING_APIS:
                    await self._write(out)
                    out = []
                chunks = await self._handle(frame)
                if chunks:
                    out.extend(chunks)
                if out and (not self._frames or len(out) > 64):
                    await self._write(out)
                    out = []
        except CloseConnection as e:
            if out:
                await self._write(out)
            log.warning("closing connection %s from %s:%s: %s", self.id, *self.peer, e)
            self.close()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("closing connection %s from %s:%s after an unexpected error", self.id, *self.peer)
            self.close()

    async def _write(self, chunks: list[bytes | memoryview]) -> None:
        if self._closed or self.transport is None:
            return
        if not self._can_write.is_set():
            await self._can_write.wait()
        self.transport.writelines(chunks)

    async def _handle(self, frame: bytearray) -> list[bytes | memoryview] | None:
        mv = memoryview(frame)
        try:
            header = parse_request_header(mv)
        except HeaderError as e:
            raise CloseConnection(f"malformed request header ({e})") from None
        key, version = header.api_key, header.api_version
        reg = HANDLERS.get(key)
        spec = get_spec(key)
        if reg is None or spec is None:
            raise CloseConnection(f"unknown or unsupported api key {key} (version {version})")
        if not reg.min_version <= version <= reg.max_version:
            if key == 18:
                return self._api_versions_fallback(header.correlation_id)
            raise CloseConnection(
                f"unsupported version {version} of {spec.name} (supported {reg.min_version}-{reg.max_version})")
        pos = header.body_offset
        try:
            if spec.request_flexible(version):
                pos = skip_tagged_fields(mv, pos)
            if reg.decoder is not None:
                request = reg.decoder(mv[pos:], version)
            else:
                request = spec.request.decode(mv[pos:], version=version)
        except Exception as e:
            raise CloseConnection(f"could not decode {spec.name} v{version} request: {e!r}") from None
        ctx = RequestContext(self.broker, key, version, header.correlation_id, header.client_id,
                             self.peer[0], self.peer[1], self.id)
        t0 = time.perf_counter()
        response = await reg.handler(ctx, request)
        if request_log.isEnabledFor(logging.DEBUG):
            request_log.debug("%s v%d corr=%d client=%s conn=%d from=%s:%s took %.3f ms", spec.name, version,
                              header.correlation_id, header.client_id, self.id, self.peer[0], self.peer[1],
                              (time.perf_counter() - t0) * 1000)
        if response is None:
            return None
        if isinstance(response, RawResponse):
            body_len = response.size
            prefix = encode_response_prefix(header.correlation_id, body_len, spec.response_header_flexible(version))
            return [prefix, *response.chunks]
        body = response.encode(version=version)
        prefix = encode_response_prefix(header.correlation_id, len(body), spec.response_header_flexible(version))
        return [prefix, body]

    def _api_versions_fallback(self, correlation_id: int) -> list[bytes | memoryview]:
        from broker.handlers.api_versions import supported_api_keys

        resp = ApiVersionsResponse[0](error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=supported_api_keys(0))
        body = resp.encode(version=0)
        return [encode_response_prefix(correlation_id, len(body), False), body]


class KafkaServer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.connections: set[KafkaConnection] = set()
        self.servers: list[asyncio.base_events.Server] = []
        self.max_queued = max(16, int(broker.config.get("queued.max.requests") or 500))

    async def start(self) -> list[tuple[str, int]]:
        loop = asyncio.get_running_loop()
        bound = []
        for listener in self.broker.config.listeners:
            host = listener.host or None
            srv = await loop.create_server(lambda: KafkaConnection(self), host, listener.port,
                                           reuse_address=True, backlog=1024)
            self.servers.append(srv)
            for sock in srv.sockets:
                addr = sock.getsockname()
                bound.append((addr[0], addr[1]))
                log.info("listening on %s:%s (%s)", addr[0], addr[1], listener.name)
        return bound

    async def stop(self) -> None:
        for srv in self.servers:
            srv.close()
        for conn in list(self.connections):
            conn.close()
        for srv in self.servers:
            try:
                await asyncio.wait_for(srv.wait_closed(), 5)
            except TimeoutError:
                pass
