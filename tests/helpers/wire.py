"""Blocking raw-protocol helpers for tests: send one request (or raw bytes) over TCP, read the answer.

Deliberately independent of kbroker's own ``protocol`` package: requests are encoded and responses
decoded with kafka-python 3.x's wire structs, so a codec bug in the broker cannot be hidden by the
same bug in the test. Tests for bad input use :func:`send_raw` to put arbitrary bytes on the wire.
"""

from __future__ import annotations

import itertools
import socket
import struct
from typing import Any

from kafka.protocol.api_header import RequestHeader, ResponseClassRegistry

_corr = itertools.count(1)
_SIZE = struct.Struct(">i")


class ConnectionClosed(ConnectionError):
    """The broker closed the connection before a complete response frame arrived."""


def parse_bootstrap(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


def encode_request(request: Any, version: int, correlation_id: int, client_id: str = "kbroker-tests") -> bytes:
    """A complete size-prefixed request frame (header + body) for ``request`` at ``version``."""
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(version=version, header=True, framed=True))


def read_frame(sock: socket.socket) -> bytes:
    """Read one size-prefixed frame; returns the payload without the size. Raises ConnectionClosed."""
    size = _SIZE.unpack(_recv_exactly(sock, 4))[0]
    return _recv_exactly(sock, size)


def decode_response(request: Any, version: int, payload: bytes) -> Any:
    """Decode a response payload (header + body, no size prefix) for ``request`` at ``version``."""
    header = RequestHeader(request_api_key=request.API_KEY, request_api_version=version, correlation_id=0,
                           client_id=None)
    response_cls = ResponseClassRegistry.get_response_class(header)
    if response_cls is None:
        raise ValueError(f"no response class for api key {request.API_KEY}")
    return response_cls.decode(payload, version=version, header=True)


class RawConnection:
    """One blocking TCP connection; several requests may be sent (and pipelined) over it."""

    def __init__(self, bootstrap: str, *, timeout: float = 10.0, client_id: str = "kbroker-tests") -> None:
        self.sock = socket.create_connection(parse_bootstrap(bootstrap), timeout=timeout)
        self.client_id = client_id

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, request: Any, version: int) -> int:
        """Send without waiting; returns the correlation id used."""
        corr = next(_corr)
        self.sock.sendall(encode_request(request, version, corr, self.client_id))
        return corr

    def receive(self, request: Any, version: int, correlation_id: int | None = None) -> Any:
        """Read the next response frame and decode it as the answer to ``request``."""
        response = decode_response(request, version, read_frame(self.sock))
        if correlation_id is not None and response.header.correlation_id != correlation_id:
            raise AssertionError(f"correlation id {response.header.correlation_id} != expected {correlation_id}")
        return response

    def request(self, request: Any, version: int) -> Any:
        corr = self.send(request, version)
        return self.receive(request, version, corr)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_raw_frame(self) -> bytes:
        return read_frame(self.sock)


def send_request(bootstrap: str, request: Any, version: int, *, timeout: float = 10.0) -> Any:
    """Open a connection, send ``request`` at ``version``, return the decoded response (header attached)."""
    with RawConnection(bootstrap, timeout=timeout) as conn:
        return conn.request(request, version)


def send_raw(bootstrap: str, data: bytes, *, timeout: float = 5.0, half_close: bool = False) -> bytes:
    """Send arbitrary bytes and return everything the broker sends back until it closes or goes quiet.

    ``half_close`` shuts down our write side after sending (the broker then sees EOF, e.g. after a
    truncated frame). Returns ``b""`` when the broker closed the connection without answering.
    """
    out = bytearray()
    with socket.create_connection(parse_bootstrap(bootstrap), timeout=timeout) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except TimeoutError:
            pass
        except ConnectionResetError:
            pass
    return bytes(out)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionClosed(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)
