"""PartitionProxy (tests/helpers/partition_proxy.py) against a real TCP echo server on 127.0.0.1:
relays both ways, a blackhole cut holds open and new connections without losing bytes, a reset cut
aborts open connections and resets new ones, heal restores service, stop ends everything."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from tests.helpers.partition_proxy import PartitionProxy
from tests.helpers.waiting import wait_for

QUIET_S = 0.3  # how long "nothing arrives" is watched for; a negative can only be observed over time


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.server.accepted += 1  # type: ignore[attr-defined]
        while data := self.request.recv(65536):
            self.request.sendall(data)


class _EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    accepted = 0


@pytest.fixture
def echo() -> Iterator[_EchoServer]:
    server = _EchoServer(("127.0.0.1", 0), _Echo)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def proxy(echo: _EchoServer) -> Iterator[PartitionProxy]:
    p = PartitionProxy(f"127.0.0.1:{echo.server_address[1]}")
    with p:
        yield p


def connect(proxy: PartitionProxy, timeout: float = 10.0) -> socket.socket:
    return socket.create_connection((proxy.host, proxy.port), timeout=timeout)


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def assert_quiet(sock: socket.socket) -> None:
    sock.settimeout(QUIET_S)
    with pytest.raises(TimeoutError):
        sock.recv(1)
    sock.settimeout(10)


def test_relays_both_ways(proxy: PartitionProxy) -> None:
    with connect(proxy) as s:
        payload = bytes(range(256)) * 1000  # larger than one relay chunk
        s.sendall(payload)
        assert recv_exactly(s, len(payload)) == payload
    assert proxy.stats.bytes_up >= len(payload) and proxy.mode is None
    assert proxy.url == f"http://127.0.0.1:{proxy.port}"


def test_blackhole_holds_open_connection_and_heal_delivers(proxy: PartitionProxy) -> None:
    with connect(proxy) as s:
        s.sendall(b"before")
        assert recv_exactly(s, 6) == b"before"
        proxy.cut("blackhole")
        assert proxy.mode == "blackhole"
        s.sendall(b"during")
        assert_quiet(s)  # the connection stays open, nothing comes back
        proxy.heal()
        assert recv_exactly(s, 6) == b"during"  # held, not dropped
        s.sendall(b"after")
        assert recv_exactly(s, 5) == b"after"


def test_blackhole_accepts_new_connections_without_reaching_target(proxy: PartitionProxy, echo: _EchoServer) -> None:
    with connect(proxy) as s:
        s.sendall(b"x")
        recv_exactly(s, 1)
    before = echo.accepted
    proxy.cut()  # blackhole is the default
    with connect(proxy) as s:  # the TCP handshake with the proxy succeeds ...
        s.sendall(b"held")
        assert_quiet(s)
        assert echo.accepted == before  # ... but the target never saw a connection
        proxy.heal()
        assert recv_exactly(s, 4) == b"held"
    assert echo.accepted == before + 1


def test_reset_aborts_open_connections_and_refuses_new_ones(proxy: PartitionProxy) -> None:
    s = connect(proxy)
    s.sendall(b"ping")
    recv_exactly(s, 4)
    proxy.cut("reset")
    with pytest.raises(ConnectionError):
        # RST or EOF, depending on whether the reset arrived before this read.
        s.sendall(b"more")
        recv_exactly(s, 4)
    s.close()
    # The proxy resets a new connection as soon as it accepts it, so the RST
    # can already be there when connect() returns (ECONNRESET from connect).
    with pytest.raises(ConnectionError):
        with connect(proxy) as s2:
            s2.sendall(b"x")
            recv_exactly(s2, 1)
    assert proxy.stats.resets >= 2
    proxy.heal()
    with connect(proxy) as s3:
        s3.sendall(b"back")
        assert recv_exactly(s3, 4) == b"back"


def test_reset_while_blackholed_drops_held_connections(proxy: PartitionProxy) -> None:
    with connect(proxy) as s:
        proxy.cut("blackhole")
        s.sendall(b"held")
        proxy.cut("reset")
        with pytest.raises(ConnectionError):
            recv_exactly(s, 4)


def test_target_closing_closes_client(proxy: PartitionProxy, echo: _EchoServer) -> None:
    with connect(proxy) as s:
        s.sendall(b"x")
        recv_exactly(s, 1)
        s.shutdown(socket.SHUT_WR)  # echo handler sees EOF and closes its side
        assert s.recv(1) == b""


def test_stop_closes_connections_and_port(echo: _EchoServer) -> None:
    p = PartitionProxy(f"127.0.0.1:{echo.server_address[1]}").start()
    s = connect(p)
    s.sendall(b"x")
    recv_exactly(s, 1)
    p.stop()
    with pytest.raises(ConnectionError):
        recv_exactly(s, 1)
    s.close()
    with pytest.raises(OSError):
        connect(p, timeout=2).close()
    with pytest.raises(RuntimeError):
        p.cut()


def test_unknown_target_resets_client() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]  # bound, never listening: connections are refused
        # connect() itself may already see the reset on a loaded machine.
        with PartitionProxy(f"127.0.0.1:{dead}") as p, pytest.raises(ConnectionError), connect(p) as s:
            s.sendall(b"x")
            recv_exactly(s, 1)


def test_cut_rejects_unknown_mode(proxy: PartitionProxy) -> None:
    with pytest.raises(ValueError):
        proxy.cut("drop")  # type: ignore[arg-type]
    wait_for(lambda: proxy.mode is None, "proxy still relaying")
