"""Request header (v1/v2) parsing and response header (v0/v1) encoding.

Parsed by hand rather than through kafka-python's generic codec: the header is read on every
request, and the generic decoder copies the whole remaining frame. The body is handed on as a
memoryview of the frame.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_HDR = struct.Struct(">hhih")
_CORR = struct.Struct(">i")


class HeaderError(ValueError):
    """The request header is malformed."""


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int  # where the request body starts inside the frame


def read_uvarint(buf: memoryview | bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise HeaderError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise HeaderError("varint too long")


def parse_request_header(frame: memoryview | bytes) -> RequestHeader:
    """Parse the fixed part of a request header (api key, version, correlation id, client id).

    Tagged fields of header v2 are skipped by :func:`skip_tagged_fields` once the caller
    knows whether this api version is flexible.
    """
    if len(frame) < 10:
        raise HeaderError(f"request header needs at least 10 bytes, got {len(frame)}")
    api_key, api_version, correlation_id, client_len = _HDR.unpack_from(frame, 0)
    pos = 10
    client_id = None
    if client_len >= 0:
        if pos + client_len > len(frame):
            raise HeaderError("truncated client id")
        client_id = bytes(frame[pos : pos + client_len]).decode("utf-8", "replace")
        pos += client_len
    elif client_len != -1:
        raise HeaderError(f"invalid client id length {client_len}")
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def peek_correlation_id(frame: memoryview | bytes) -> int | None:
    return _CORR.unpack_from(frame, 4)[0] if len(frame) >= 8 else None


def skip_tagged_fields(frame: memoryview | bytes, pos: int) -> int:
    count, pos = read_uvarint(frame, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(frame, pos)
        size, pos = read_uvarint(frame, pos)
        pos += size
        if pos > len(frame):
            raise HeaderError("truncated tagged field")
    return pos


def encode_response_prefix(correlation_id: int, body_len: int, flexible: bool) -> bytes:
    """Frame size + response header; the body follows."""
    if flexible:
        return struct.pack(">iib", body_len + 5, correlation_id, 0)
    return struct.pack(">ii", body_len + 4, correlation_id)


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                   body: bytes, flexible: bool) -> bytes:
    """A whole framed request (used by the async client and tests)."""
    cid = b"" if client_id is None else client_id.encode()
    hdr = _HDR.pack(api_key, api_version, correlation_id, len(cid) if client_id is not None else -1) + cid
    if flexible:
        hdr += b"\x00"
    return struct.pack(">i", len(hdr) + len(body)) + hdr + body
