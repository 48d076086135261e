"""Request header parsing and response header encoding."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.metadata import MetadataRequest

from protocol.api_table import get_spec
from protocol.headers import (
    HeaderError,
    encode_request,
    encode_response_prefix,
    parse_request_header,
    skip_tagged_fields,
)


def test_round_trip_flexible_header():
    body = bytes(MetadataRequest(version=12, topics=None, allow_auto_topic_creation=False,
                                 include_topic_authorized_operations=False).encode(version=12))
    frame = encode_request(3, 12, 77, "client-x", body, True)
    mv = memoryview(frame)[4:]
    h = parse_request_header(mv)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (3, 12, 77, "client-x")
    pos = skip_tagged_fields(mv, h.body_offset)
    assert bytes(mv[pos:]) == body
    decoded = get_spec(3).request.decode(mv[pos:], version=12)
    assert decoded.topics is None


def test_null_client_id_and_tagged_fields_skipped():
    hdr = struct.pack(">hhih", 18, 3, 1, -1) + b"\x01\x05\x02ab"  # one tagged field (tag 5, 2 bytes)
    h = parse_request_header(hdr)
    assert h.client_id is None
    assert skip_tagged_fields(hdr, h.body_offset) == len(hdr)


@pytest.mark.parametrize("frame", [b"", b"\x00\x03\x00", struct.pack(">hhih", 3, 1, 1, 50) + b"short"])
def test_malformed_headers(frame):
    with pytest.raises(HeaderError):
        parse_request_header(frame)


def test_response_prefix():
    assert encode_response_prefix(9, 10, False) == struct.pack(">ii", 14, 9)
    assert encode_response_prefix(9, 10, True) == struct.pack(">iib", 15, 9, 0)
    assert get_spec(18).response_header_flexible(3) is False
    assert get_spec(3).response_header_flexible(12) is True
