"""A request whose handler fails unexpectedly closes its connection, but the answers already
computed for the requests pipelined before it on that connection still go out (the fuzzer found
them dropped)."""

from __future__ import annotations

import socket
import struct

from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from tests.helpers.wire import ConnectionClosed, encode_request, parse_bootstrap, read_frame


def test_answers_before_a_failing_request_are_sent(broker_factory) -> None:
    broker = broker_factory(start=False)
    broker.env["KBROKERTEST_RAISE_API"] = "3"  # Metadata's handler raises
    broker.expect_tracebacks = True  # the unexpected error is logged with its traceback, on purpose
    broker.start()
    frames = b"".join([
        encode_request(ApiVersionsRequest(version=3, client_software_name="t", client_software_version="1"), 3, 1),
        encode_request(ApiVersionsRequest(version=3, client_software_name="t", client_software_version="1"), 3, 2),
        encode_request(MetadataRequest(version=12, topics=None, allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=False), 12, 3),
    ])
    with socket.create_connection(parse_bootstrap(broker.bootstrap), timeout=30) as sock:
        sock.sendall(frames)  # one write: the broker reads all three before answering any
        answered = []
        try:
            while True:
                answered.append(struct.unpack(">i", read_frame(sock)[:4])[0])
        except (ConnectionClosed, ConnectionResetError):
            pass
    assert answered == [1, 2]
