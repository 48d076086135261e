"""A protocol-agnostic TCP proxy that a test can cut and heal: a network partition on 127.0.0.1.

Cluster fault tests put one in front of each broker's etcd connection and one in front of each
broker's replication listener (the advertised address followers fetch from), then cut a chosen
broker off. It relays raw bytes (etcd's gRPC/HTTP2 as well as Kafka frames), unlike
``fault_proxy.FaultProxy``, which understands Kafka framing to drop single requests.

Two ways to cut:

* ``mode="blackhole"`` (what a partition looks like): open connections stay open but nothing moves
  in either direction; new connections are accepted and held without reaching the target. Bytes
  already read by the proxy are kept and delivered after :meth:`heal`, as TCP retransmission
  would deliver them after a short partition, so a healed stream is never corrupted. Endpoints
  notice only through their own timeouts.
* ``mode="reset"``: every open connection is aborted (RST) at once and new ones are accepted and
  reset immediately, like a peer that went away.

:meth:`heal` lets held connections flow again and connects held new ones to the target. ``cut``
and ``heal`` return once the change is in effect on the proxy's loop, so the test can time them.
The port is bound at construction, so it can be advertised before the proxy starts. The proxy runs
its own event loop in a daemon thread, usable from sync and async tests alike; ``stop()`` ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Literal

Mode = Literal["blackhole", "reset"]
_CHUNK = 65536
_LINGER_RST = struct.pack("ii", 1, 0)  # SO_LINGER on with timeout 0: close() sends RST


@dataclass
class PartitionProxyStats:
    connections: int = 0  # accepted
    resets: int = 0  # connections aborted by a reset cut or refused while reset
    bytes_up: int = 0  # client -> target
    bytes_down: int = 0  # target -> client


class _Link:
    """One accepted connection and, once connected, its upstream twin."""

    def __init__(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.client_r, self.client_w = client_r, client_w
        self.up_w: asyncio.StreamWriter | None = None
        self.closed = False

    def abort(self) -> None:
        if self.closed:
            return
        self.closed = True
        for w in (self.client_w, self.up_w):
            if w is not None:
                with contextlib.suppress(Exception):
                    w.transport.abort()


class PartitionProxy:
    """Relay 127.0.0.1:<port> to ``target`` ("host:port"); ``cut(mode)`` / ``heal()`` from any thread."""

    def __init__(self, target: str, *, host: str = "127.0.0.1", name: str = "") -> None:
        up_host, up_port = target.rsplit(":", 1)
        self.target = (up_host, int(up_port))
        self.name = name or f"proxy->{target}"
        self.stats = PartitionProxyStats()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self.host = host
        self.port: int = self._sock.getsockname()[1]
        self._mode: Mode | None = None  # None: healthy
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._flowing: asyncio.Event | None = None  # set while not blackholed
        self._links: set[_Link] = set()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """``http://host:port``: the form ``kbroker.etcd.endpoints`` takes."""
        return f"http://{self.address}"

    @property
    def mode(self) -> Mode | None:
        """The current cut, or None while the proxy relays."""
        return self._mode

    # --- control (any thread) ------------------------------------------------------------------

    def cut(self, mode: Mode = "blackhole") -> None:
        if mode not in ("blackhole", "reset"):
            raise ValueError(f"unknown cut mode {mode!r}")
        self._call(self._set_mode, mode)

    def heal(self) -> None:
        self._call(self._set_mode, None)

    def _call(self, fn, *args) -> None:
        loop = self._loop
        if loop is None:
            raise RuntimeError(f"{self.name} is not running")

        async def run() -> None:
            fn(*args)

        asyncio.run_coroutine_threadsafe(run(), loop).result(10)

    def _set_mode(self, mode: Mode | None) -> None:
        assert self._flowing is not None
        self._mode = mode
        if mode == "reset":
            for link in list(self._links):
                self.stats.resets += 1
                link.abort()
            self._links.clear()
        if mode == "blackhole":
            self._flowing.clear()
        else:
            # Healed (or reset: nothing is held any more, new connections are refused at accept).
            self._flowing.set()

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> PartitionProxy:
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            self._flowing = asyncio.Event()
            self._flowing.set()
            self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, sock=self._sock))
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name=f"partition-proxy-{self.port}", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError(f"{self.name} did not start")
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for link in list(self._links):
                link.abort()
            self._links.clear()
            if self._flowing is not None:
                self._flowing.set()  # let held pumps run into their aborted transports and end
            await asyncio.sleep(0)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        with contextlib.suppress(Exception):
            loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> PartitionProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"PartitionProxy({self.address} -> {self.target[0]}:{self.target[1]}, mode={self._mode})"

    # --- relaying ----------------------------------------------------------------------------

    @staticmethod
    def _reset(writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
        writer.transport.abort()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.stats.connections += 1
        if self._mode == "reset":
            self.stats.resets += 1
            self._reset(client_w)
            return
        link = _Link(client_r, client_w)
        self._links.add(link)
        flowing = self._flowing
        assert flowing is not None
        try:
            # A blackholed new connection waits here: accepted, never forwarded until healed.
            await flowing.wait()
            if link.closed:
                return
            try:
                up_r, up_w = await asyncio.open_connection(*self.target)
            except OSError:
                self._reset(client_w)
                return
            link.up_w = up_w
            if link.closed:  # reset while connecting
                up_w.transport.abort()
                return
            for w in (client_w, up_w):
                sock = w.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await asyncio.gather(self._pump(link, client_r, up_w, up=True),
                                 self._pump(link, up_r, client_w, up=False), return_exceptions=True)
        finally:
            link.abort()
            self._links.discard(link)

    async def _pump(self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, up: bool) -> None:
        flowing = self._flowing
        assert flowing is not None
        try:
            while not link.closed:
                await flowing.wait()
                data = await reader.read(_CHUNK)
                if not data:
                    break
                # Cut between the read and the write: hold the bytes until healed (never drop them).
                await flowing.wait()
                if link.closed:
                    break
                writer.write(data)
                if up:
                    self.stats.bytes_up += len(data)
                else:
                    self.stats.bytes_down += len(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            # One side ended: end the other too (a half-open relay would confuse both endpoints).
            link.abort()
