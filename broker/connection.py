"""One client connection of the Kafka listener: size-prefixed frames in, responses out in request order.

Like Kafka, each connection is served one request at a time (a connection is "muted" while its
request is in flight), so pipelined requests are applied and answered in the order sent, with one
exception in cluster mode: a Produce whose appends are done and which only waits (for replication,
acks=all, or a flush.messages fsync) lets the connection's next Produce, when one is already read,
be appended meanwhile (deviation: Kafka mutes the connection until the answer is sent, so a producer
gets one request per replication round trip per connection). Answers still go out in request order,
and a request of any other API waits until the Produce requests before it are answered; the
read-ahead bound below holds the in-flight requests' bytes too. Responses ready back to back are
coalesced into one write. Bad input (oversized or truncated frames, unknown api keys or versions,
undecodable bodies, a non-nullable field sent as null) closes only that connection, with one WARN
line and no response, before any handler runs, as Kafka does; ApiVersions with a version we do not
know gets the v0 UNSUPPORTED_VERSION answer.

Memory (Kafka's Selector + MemoryPool): reads land in one scratch buffer shared by all
connections (the loop reads one socket at a time), so an idle connection holds no buffer. A frame
that does not arrive whole in one read gets its own buffer, which grows as its bytes arrive
rather than being sized from the 4-byte prefix; frames count against ``queued.max.request.bytes``
from admission until handled, and while that bound is reached connections stop reading (they are
not closed).

Zero-copy fetch: a Fetch response may name record ranges still in the segment files
(storage.log.FileSlice). On a plaintext listener whose transport has nothing queued they go out
with os.sendfile and the response is written on the socket directly, to its end, before the next
one; on TLS listeners, or behind queued bytes, they are read (pread) and written like other bytes.

Security (design.md 6b): on SSL and SASL_SSL listeners the socket is wrapped before any byte is
read; with a client certificate the principal is its mapped subject. On SASL listeners a
connection is authenticated by broker/handlers/sasl.py's ``SaslSession`` before any other request
is served. The server-wide parts (listeners, idle expiry, the shared buffers) are broker/server.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import logging
import os
import struct
import termios
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from broker import listener_security, request_dispatch
from broker.connection_quotas import ConnectionQuotas
from broker.handlers import CloseConnection
from broker.handlers.sasl import ANONYMOUS, SaslSession
from broker.memory_pool import MemoryPool
from broker.metrics.stats import RequestStats
from broker.services import BrokerServices
from security.quotas import ClientQuotaManager
from storage.log import FileSlice
from storage.log import SliceGoneError as SliceGone

log = logging.getLogger("broker.server")
request_log = logging.getLogger("kbroker.request")

_SIZE = struct.Struct(">i")
# APIs whose handling may park (long poll, waiting for a rebalance): flush earlier responses first.
_PARKING_APIS = frozenset({1, 11, 14})
_conn_ids = itertools.count(1)
# A frame that spans reads gets a buffer of _GROWTH x the bytes received so far (at least
# _MIN_PARTIAL), regrown by the same factor when full, capped at the frame size: memory held stays
# within _GROWTH x what arrived, and the copies made while growing add up to about 1/(_GROWTH-1)
# of the frame (a factor of 2 copied a whole 1 MB produce frame once more: +30% per round trip).
_MIN_PARTIAL = 16 * 1024
_GROWTH = 4
# Read-ahead of one connection: once the frames it has read and not yet answered (the one being
# handled included) hold this much, it reads no further frame until they drop below half of it;
# a frame already started is read to its end first. Kafka reads one request per connection at a
# time; reading ahead without a byte bound let one pipelining producer fill the whole
# queued.max.request.bytes pool with acks=all requests waiting for replication, and an exhausted
# pool stops reading every connection -- the followers' fetches too, which are what completes
# those requests: an RF=3 produce of 400 MB then stalled until replica.lag.time.max.ms dropped the
# followers from the ISR (1-3 MB/s instead of ~100-300, 4 runs in 5).
READ_AHEAD_BYTES = 4 << 20
# Test-only: log at DEBUG how many bytes a partly read frame holds (see tests/integration/test_connection_limits.py).
_TRACE_BUFFERS = os.environ.get("KBROKERTEST_TRACE_REQUEST_BUFFERS") == "1"
# Test-only: log each response whose record bytes went out with sendfile (tests/integration/test_zero_copy_fetch.py).
_TRACE_SENDFILE = os.environ.get("KBROKERTEST_TRACE_SENDFILE") == "1"


class Listening(Protocol):
    """What a connection uses of its server (broker.server.KafkaServer)."""

    services: BrokerServices
    connections: set[Any]
    conn_quotas: ConnectionQuotas
    loop: Any
    scratch: bytearray
    max_queued: int
    max_frame: int
    pool: MemoryPool
    quotas: ClientQuotaManager
    request_stats: RequestStats
    raise_api: int


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, server: Listening, security: listener_security.ListenerSecurity | None = None) -> None:
        self.server = server
        self.security = security
        self.principal = ANONYMOUS
        self.sasl: SaslSession | None = None
        if security is not None and security.sasl is not None:
            metadata = self.metadata
            self.sasl = SaslSession(security.sasl, lambda u, m: metadata().scram_credentials().get(u, {}).get(m))
        self.close_after: str | None = None  # set when the response being sent is the last one
        self.pool = server.pool
        self.id = next(_conn_ids)
        self.transport: asyncio.Transport | None = None
        self.peer = ("?", 0)
        # Bytes received but not placed in a frame buffer yet: an incomplete size prefix, or the
        # start of a frame waiting for the memory pool. Replayed at the front of the next read.
        self._stash = b""
        self._stash_in_scratch = 0
        # The frame being read across several reads: its buffer, bytes filled, and full size.
        self._partial: bytearray | None = None
        self._partial_len = 0
        self._need = 0
        self._held = 0  # bytes this connection has reserved in the pool
        self._frames: deque[bytearray] = deque()
        self._worker: asyncio.Task[None] | None = None
        # Produce requests appended and waiting (replication, a flush) whose answers are not out yet,
        # oldest first; and the worker's wake-up for a frame arriving meanwhile. Cluster mode only:
        # on one node a Produce waits for nothing unless flush.messages is set.
        self._inflight: deque[asyncio.Task[Any]] = deque()
        self._frame_waiter: asyncio.Future[None] | None = None
        self._pipeline_produce = bool(server.services.partitions.replicated)
        self._closed = False
        self._paused: set[str] = set()  # why reading is paused: "queue", "memory", "slot", "throttle"
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._max_frame = server.max_frame
        self.last_activity = time.monotonic()
        self._fd = -1  # the socket's descriptor, to ask the kernel how many bytes have arrived
        # Record ranges go out with os.sendfile, except through TLS, which must encrypt every byte.
        self._zero_copy = security is None or security.ssl_context is None
        self.listener_name = security.listener.name if security is not None else ""
        # KIP-219: after a response over a byte-rate quota the connection is muted this long; clients of
        # older versions get the response only after it (_throttle).
        self.throttle_s = 0.0
        self.throttle_before_response = False

    # --- transport callbacks ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = (peer[0], peer[1])
        self.server.connections.add(self)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self._fd = sock.fileno()
        if self.security is not None and self.security.ssl_context is not None:
            self._ssl_principal(transport)
        if not self._closed:
            self.server.conn_quotas.accept(self)  # may hold (max.connections) or close (per IP) it

    def hold(self) -> None:
        """max.connections reached: read nothing until ConnectionQuotas admits the connection."""
        self._pause("slot")
        # uvloop starts reading right after connection_made returns, whatever was paused in it.
        self.server.loop.call_soon(self._repause)

    def _repause(self) -> None:
        if self._paused and self.transport is not None and not self._closed:
            self.transport.pause_reading()

    def admit(self) -> None:
        if "slot" in self._paused:
            self.last_activity = time.monotonic()  # idle time counts from admission, as in Kafka
            self._resume("slot")
            if self._frames:
                self._frames_ready()

    def metadata(self) -> Any:
        return self.server.services.metadata

    def _ssl_principal(self, transport: asyncio.BaseTransport) -> None:
        """With a verified client certificate (ssl.client.auth requested/required), the principal is its
        subject mapped by ssl.principal.mapping.rules (Kafka's DefaultKafkaPrincipalBuilder)."""
        cert = transport.get_extra_info("peercert")
        if cert and self.security is not None and self.security.principal_mapper is not None:
            try:
                self.principal = "User:" + self.security.principal_mapper.name(listener_security.subject_dn(cert))
            except ValueError as e:
                log.warning("closing connection %s from %s:%s: %s", self.id, *self.peer, e)
                self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._can_write.set()
        self.server.connections.discard(self)
        self.server.conn_quotas.release(self)
        self.pool.forget(self.id)
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()
        # Nothing of this connection outlives it: buffers dropped, pool reservations returned.
        self._frames.clear()
        self._partial = None
        self._stash = b""
        held, self._held = self._held, 0
        if held:
            self.pool.release(held)
        for listener in self.server.disconnect_listeners:
            listener(self.id)

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # --- reading -----------------------------------------------------------------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._partial is not None:
            if self._partial_len == len(self._partial):
                self._grow_partial()
            return memoryview(self._partial)[self._partial_len :]
        scratch = self.server.scratch
        k = len(self._stash)
        if k:
            scratch[:k] = self._stash
            self._stash = b""
        self._stash_in_scratch = k
        return memoryview(scratch)[k:]

    def buffer_updated(self, nbytes: int) -> None:
        self.last_activity = time.monotonic()
        if self._partial is not None:
            self._partial_len += nbytes
            if _TRACE_BUFFERS:
                self._trace_partial()
            if self._partial_len == self._need:
                self._frames.append(self._partial)  # already counted in the pool since admission
                self._partial = None
                self._frames_ready()
            return
        self._parse_scratch(self._stash_in_scratch + nbytes)

    def _parse_scratch(self, n: int) -> None:
        buf = self.server.scratch
        pos = 0
        while n - pos >= 4:
            size = _SIZE.unpack_from(buf, pos)[0]
            if size < 0 or size > self._max_frame:
                log.warning("closing connection %s from %s:%s: frame of %d bytes exceeds socket.request.max.bytes=%d",
                            self.id, *self.peer, size, self._max_frame)
                self.close()
                return
            if n - pos - 4 < size:
                break
            # A bytearray slice: one copy, and writable, so produce can patch offsets in place.
            self._frames.append(buf[pos + 4 : pos + 4 + size])
            self._reserve(size)
            pos += 4 + size
        if pos < n:
            self._stash = bytes(buf[pos:n])
            if n - pos >= 4:
                self._try_admit()
        if self._frames:
            self._frames_ready()
        if self.pool.exhausted and self._partial is None:
            self._wait_for_memory()

    def _try_admit(self) -> None:
        """Start the frame whose beginning is stashed, if the pool has memory left (else wait)."""
        if self.pool.exhausted:
            self._wait_for_memory()
            return
        stash = self._stash
        size = _SIZE.unpack_from(stash, 0)[0]
        have = len(stash) - 4
        self._reserve(size)
        self._partial = bytearray(min(size, max(_MIN_PARTIAL, _GROWTH * have, have + self._arrived())))
        self._partial[:have] = memoryview(stash)[4:]
        self._partial_len = have
        self._need = size
        self._stash = b""
        if _TRACE_BUFFERS:
            self._trace_partial()

    def _trace_partial(self) -> None:
        assert self._partial is not None
        log.debug("connection %s: request buffer holds %d bytes (%d received of %d)",
                  self.id, len(self._partial), self._partial_len, self._need)

    def _grow_partial(self) -> None:
        assert self._partial is not None
        old = self._partial
        # A new buffer rather than a resize: the previous read's memoryview may still be exported.
        self._partial = bytearray(min(self._need, max(_GROWTH * len(old), self._partial_len + self._arrived())))
        self._partial[: len(old)] = old

    def _arrived(self) -> int:
        """Bytes already in the kernel's receive buffer (FIONREAD): they have arrived, so a buffer sized
        to hold them costs no more than what the client really sent, and a fast sender's frame is read
        into one buffer with no growth copies (a 1 MB produce frame otherwise grows 3 times)."""
        if self._fd < 0:
            return 0
        try:
            return int.from_bytes(fcntl.ioctl(self._fd, termios.FIONREAD, b"\0\0\0\0"), "little")
        except OSError:
            return 0

    def _read_ahead(self) -> int:
        """Bytes of frames read whole and not yet answered (the one being handled included). Not
        the frame still arriving: one admitted while reading was paused for this bound (on memory
        coming back) must not keep it paused, or that frame would never be read to its end."""
        return self._held - (self._need if self._partial is not None else 0)

    def _reserve(self, n: int) -> None:
        self._held += n
        self.pool.reserve(n)

    def _release(self, n: int) -> None:
        if self._held:
            n = min(n, self._held)
            self._held -= n
            self.pool.release(n)

    def _wait_for_memory(self) -> None:
        if self._closed:
            return
        if "memory" not in self._paused:
            log.debug("connection %s: reading paused, queued.max.request.bytes=%d reached (%d bytes queued)",
                      self.id, self.pool.limit, self.pool.used)
        self._pause("memory")
        self.pool.wait(self.id, self._memory_available)

    def _memory_available(self) -> None:
        if self._closed:
            return
        if len(self._stash) >= 4 and self._partial is None:
            self._try_admit()
            if self._partial is None:
                return  # still no memory: waiting again
        self._resume("memory")

    def _pause(self, reason: str) -> None:
        if not self._paused and self.transport is not None and not self._closed:
            self.transport.pause_reading()
        self._paused.add(reason)

    def _resume(self, reason: str) -> None:
        if reason not in self._paused:
            return
        self._paused.discard(reason)
        if not self._paused and self.transport is not None and not self._closed:
            self.transport.resume_reading()

    def _frames_ready(self) -> None:
        if "slot" in self._paused:
            return  # read before the hold took effect: handled once admitted
        if self._worker is None or self._worker.done():
            self._worker = self.server.loop.create_task(self._process())
        elif (w := self._frame_waiter) is not None and not w.done():
            w.set_result(None)  # the worker waits on a pipelined Produce: this frame may go next
        if len(self._frames) > self.server.max_queued or (self._partial is None and self._read_ahead() >= READ_AHEAD_BYTES):
            self._pause("queue")

    def eof_received(self) -> bool | None:
        pending = len(self._stash) + (self._partial_len if self._partial is not None else 0)
        if pending:
            log.warning("connection %s from %s:%s closed mid-frame (%d bytes of a truncated request dropped)",
                        self.id, *self.peer, pending)
        return None

    def close(self) -> None:
        if not self._closed and self.transport is not None:
            self._closed = True
            self.transport.close()

    @property
    def busy(self) -> bool:
        """A request is being read, queued or handled, or the connection waits for a slot (it is
        not idle: Kafka's acceptor holds such a connection before any processor can expire it)."""
        return "slot" in self._paused or bool(self._frames) or self._partial is not None or (
            self._worker is not None and not self._worker.done())

    # --- request processing ------------------------------------------------------------------

    async def _process(self) -> None:
        out: list[bytes | memoryview] = []
        inflight = self._inflight
        try:
            while not self._closed:
                # Answers of pipelined Produce requests whose waits have ended, in request order.
                while inflight and inflight[0].done():
                    chunks = inflight.popleft().result()
                    if chunks:
                        out.extend(chunks)
                    if self.throttle_s:
                        await self._throttle(out)
                        out = []
                if not self._frames:
                    if not inflight:
                        break
                    if out:
                        await self._write(out)
                        out = []
                    await self._wait_head(inflight[0], or_frame=True)
                    continue
                frame = self._frames[0]
                key = int.from_bytes(frame[:2], "big", signed=True)
                # Pipelined only when there is something to overlap: another frame already read, or
                # Produce requests in flight (then it must be, to keep the order). A lone Produce is
                # awaited directly: no task, and no extra wake-ups for one write at a time.
                pipelined = key == 0 and self._pipeline_produce and (len(self._frames) > 1 or bool(inflight)) \
                    and (self.sasl is None or not self.sasl.raw)
                if inflight and not pipelined:
                    # Any other request is handled only once the Produce requests before it are
                    # answered: requests take effect, and answers go out, in the order sent.
                    if out:
                        await self._write(out)
                        out = []
                    await self._wait_head(inflight[0], or_frame=False)
                    continue
                self._frames.popleft()
                self._resume_reading_below_half(len(frame))
                if pipelined:
                    if out:
                        await self._write(out)
                        out = []
                    await self._start_pipelined(frame)
                    del frame
                    continue
                if out and key in _PARKING_APIS:
                    await self._write(out)
                    out = []
                try:
                    chunks = await request_dispatch.dispatch(self.server, self, frame)
                finally:
                    self._release(len(frame))
                del frame
                if chunks:
                    out.extend(chunks)
                if self.throttle_s:
                    await self._throttle(out)
                    out = []
                if self.close_after is not None:
                    # Kafka answers a failed authentication, then closes the connection.
                    await self._write(out)
                    log.warning("closing connection %s from %s:%s: %s", self.id, *self.peer, self.close_after)
                    self.close()
                    return
                if out and (not self._frames or len(out) > 64):
                    await self._write(out)
                    out = []
            if out:
                await self._write(out)
        except CloseConnection as e:
            if out:
                await self._write(out)
            log.warning("closing connection %s from %s:%s: %s", self.id, *self.peer, e)
            self.close()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("closing connection %s from %s:%s after an unexpected error", self.id, *self.peer)
            # Answers already computed for earlier pipelined requests still go out, as on a CloseConnection.
            if out:
                with contextlib.suppress(Exception):
                    await self._write(out)
            self.close()
        finally:
            if self._closed:
                self._drop_inflight()

    def _resume_reading_below_half(self, handling: int) -> None:
        """Resume reading paused for the queue bound once the frames queued and the bytes held
        (less ``handling``, the frame just taken) are below half of their bounds."""
        if len(self._frames) < self.server.max_queued // 2 and self._read_ahead() - handling < READ_AHEAD_BYTES // 2:
            self._resume("queue")

    async def _start_pipelined(self, frame: bytearray) -> None:
        """Handle a Produce request until its appends are done (the handler calls ``release``
        before it waits for replication or a flush), then return, leaving the wait and the answer
        to a task, so the connection's next Produce request is appended meanwhile. Answers still go
        out in request order (_process)."""
        loop = self.server.loop
        released = loop.create_future()

        def release() -> None:
            if not released.done():
                released.set_result(None)

        task = loop.create_task(self._dispatch_held(frame, release))
        task.add_done_callback(lambda _t: release())
        self._inflight.append(task)
        await released

    async def _dispatch_held(self, frame: bytearray, release: Callable[[], None]) -> list[bytes | memoryview] | None:
        try:
            return await request_dispatch.dispatch(self.server, self, frame, release)
        finally:
            self._release(len(frame))
            # Reading may have paused on the bytes this request held, with no frame left for
            # _process to pop (where it otherwise resumes reading).
            self._resume_reading_below_half(0)

    async def _wait_head(self, head: asyncio.Task[Any], *, or_frame: bool) -> None:
        """Until the oldest pipelined Produce is answered (``or_frame``: or a new frame arrives).
        One future and a done callback: cheaper than asyncio.wait, which runs once per Produce."""
        waiter = self.server.loop.create_future()

        def wake(_t: object) -> None:
            if not waiter.done():
                waiter.set_result(None)

        head.add_done_callback(wake)
        if or_frame:
            self._frame_waiter = waiter
        try:
            await waiter
        finally:
            self._frame_waiter = None
            head.remove_done_callback(wake)

    def _drop_inflight(self) -> None:
        """The connection is closed: pipelined requests still waiting get no answer (their appends
        are done, as when a client disconnects during a Kafka acks=all wait)."""
        while self._inflight:
            t = self._inflight.popleft()
            if t.done():
                if not t.cancelled():
                    t.exception()  # retrieved: nothing is left to answer it to
            else:
                t.cancel()

    async def _throttle(self, out: list[bytes | memoryview]) -> None:
        """KIP-219 channel muting: nothing more is read or handled on this connection for the
        throttle time, which starts when the response goes out (Kafka's ThrottledChannel)."""
        delay, self.throttle_s = self.throttle_s, 0.0
        self._pause("throttle")
        try:
            if self.throttle_before_response:
                await asyncio.sleep(delay)
            if out:
                await self._write(out)
            if not self.throttle_before_response:
                await asyncio.sleep(delay)
        finally:
            self._resume("throttle")

    async def _write(self, chunks: list[Any]) -> None:
        if self._closed or self.transport is None:
            return
        if not self._can_write.is_set():
            await self._can_write.wait()
        self.last_activity = time.monotonic()
        for c in chunks:
            if c.__class__ is FileSlice:
                break
        else:
            self.transport.writelines(chunks)
            return
        # A Fetch response with record ranges left in the segment files (storage.log.FileSlice).
        if self._zero_copy and self._fd >= 0 and not self.transport.get_write_buffer_size():
            await self._send_direct(chunks)
            return
        # TLS (bytes must pass through the TLS layer) or data already queued: copy.
        try:
            data = [c.read() if c.__class__ is FileSlice else c for c in chunks]
        except OSError as e:
            self._slice_gone(e)
            return
        self.transport.writelines(data)

    async def _send_direct(self, chunks: list[Any]) -> None:
        """Write a response on the socket itself, record ranges with os.sendfile (the kernel copies
        them from the page cache to the socket: no pread into Python bytes, no copy into a write
        buffer). Only when the transport has nothing queued, so the bytes go out in order; the
        response is written to the end before the connection's next one (_process awaits this), and
        nothing else writes to this transport meanwhile. Works on a dup of the socket: if the
        transport closes its descriptor meanwhile, the number may be reused by another file."""
        loop = self.server.loop
        fd = os.dup(self._fd)
        try:
            i, off, n = 0, 0, len(chunks)
            if _TRACE_SENDFILE:
                log.info("connection %s: sending %d record bytes with sendfile", self.id,
                         sum(c.size for c in chunks if c.__class__ is FileSlice))
            while i < n:
                if self._closed or self.transport is None or self.transport.is_closing():
                    return
                c = chunks[i]
                try:
                    if c.__class__ is FileSlice:
                        left = c.size - off
                        sent = os.sendfile(fd, c.fd(), c.position + off, left) if left else 0
                        if sent == 0 and left:
                            raise SliceGone(f"{c}: the file ends before the range")
                        off += sent
                        if off >= c.size:
                            i, off = i + 1, 0
                        continue
                    # A run of byte chunks (the header pieces between record ranges): one writev.
                    j = i
                    bufs = []
                    while j < n and chunks[j].__class__ is not FileSlice:
                        bufs.append(memoryview(chunks[j])[off:] if j == i and off else chunks[j])
                        j += 1
                    sent = os.writev(fd, bufs)
                    while i < j:
                        rest = len(chunks[i]) - off
                        if sent < rest:
                            off += sent
                            break
                        sent -= rest
                        i, off = i + 1, 0
                except BlockingIOError:
                    await self._writable(loop, fd)
                    self.last_activity = time.monotonic()
                except InterruptedError:
                    continue
                except SliceGone as e:
                    self._slice_gone(e)
                    return
                except OSError as e:  # the peer went away (EPIPE, ECONNRESET)
                    log.debug("connection %s from %s:%s: write failed: %s", self.id, *self.peer, e)
                    self.close()
                    return
        finally:
            os.close(fd)

    async def _writable(self, loop: Any, fd: int) -> None:
        fut = loop.create_future()

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        loop.add_writer(fd, ready)
        try:
            await fut
        finally:
            loop.remove_writer(fd)

    def _slice_gone(self, e: Exception) -> None:
        """The records named in a response left the file before they were sent (segment deleted or
        log truncated meanwhile); the size prefix is already promised, so the connection closes and
        the client fetches again, as when Kafka's FileRecords finds its file truncated."""
        log.warning("closing connection %s from %s:%s: fetch response could not be completed: %s",
                    self.id, *self.peer, e)
        self.close()
