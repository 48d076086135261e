"""Small writers for hand-encoded responses (protocol/produce_response.py, protocol/txn_responses.py):
unsigned varints, strings and array counts in the classic (int16/int32 lengths) and the flexible
(compact: length + 1 as a varint, 0 for null) forms of Kafka's protocol."""

from __future__ import annotations

import struct

I32 = struct.Struct(">i")


def put_uvarint(n: int, out: bytearray) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def put_string(value: str | None, flexible: bool, out: bytearray) -> None:
    if value is None:
        if flexible:
            out.append(0)
        else:
            out += b"\xff\xff"
        return
    raw = value.encode()
    if flexible:
        put_uvarint(len(raw) + 1, out)
    else:
        out += len(raw).to_bytes(2, "big")
    out += raw


def put_count(n: int, flexible: bool, out: bytearray) -> None:
    if flexible:
        put_uvarint(n + 1, out)
    else:
        out += I32.pack(n)
