"""Connection limits (kbroker issue 22 item 4): idle expiry, request memory that follows the bytes
that arrived, and the queued.max.request.bytes pool pausing reads instead of closing connections.

Memory held by a partly read frame is measured inside the broker through a test-only trace: with
``KBROKERTEST_TRACE_REQUEST_BUFFERS=1`` and DEBUG logging, broker/connection.py logs the size of a partial
frame's buffer after every read ("request buffer holds N bytes (R received of S)"). It reports
``len()`` of the very bytearray the socket is read into, so it cannot drift from the real thing,
and costs nothing when the variable is unset.
"""

from __future__ import annotations

import re
import resource
import selectors
import socket
import struct
import threading
import time

import pytest
from kafka.protocol.metadata import ApiVersionsRequest

from tests.helpers.waiting import wait_for
from tests.helpers.wire import encode_request, parse_bootstrap, read_frame

N_IDLE = 2000



@pytest.fixture
def many_fds():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = N_IDLE * 2 + 512
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {want}")
    # Raised in this process before the broker starts, so the broker (a child) inherits it too.
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_idle_connections_are_closed_after_connections_max_idle_ms(broker_factory, many_fds):
    broker = broker_factory(overrides={"connections.max.idle.ms": "2000"})
    addr = parse_bootstrap(broker.bootstrap)
    socks = []
    try:
        for _ in range(N_IDLE):
            s = socket.create_connection(addr, timeout=30)
            s.setblocking(False)
            socks.append(s)
        # A connection that keeps talking is not idle and must survive the whole time.
        busy = socket.create_connection(addr, timeout=10)
        sel = selectors.DefaultSelector()
        for s in socks:
            sel.register(s, selectors.EVENT_READ)
        open_socks = set(socks)

        def all_closed() -> bool:
            for key, _ in sel.select(timeout=0.2):
                s = key.fileobj
                try:
                    data = s.recv(1)  # type: ignore[union-attr]
                except ConnectionResetError:
                    data = b""
                assert data == b"", "an idle connection received bytes"
                sel.unregister(s)
                open_socks.discard(s)  # type: ignore[arg-type]
            # Between checks the busy connection sends a request and must get its answer.
            busy.sendall(encode_request(ApiVersionsRequest(version=0), 0, 1))
            read_frame(busy)
            return not open_socks

        wait_for(all_closed, f"{N_IDLE} idle connections to be closed", timeout=120)
        busy.sendall(encode_request(ApiVersionsRequest(version=0), 0, 2))
        assert read_frame(busy)
        busy.close()
        sel.close()
    finally:
        for s in socks:
            s.close()
    assert "connections.max.idle.ms=2000" in broker.log_text()


def test_connection_with_traffic_is_not_closed_as_idle(broker_factory):
    # Requests spaced at less than the idle limit keep the connection open past several limits.
    broker = broker_factory(overrides={"connections.max.idle.ms": "1000"})
    with socket.create_connection(parse_bootstrap(broker.bootstrap), timeout=10) as s:
        started = time.monotonic()
        corr = 0
        while time.monotonic() - started < 4:  # bounded: about 4 s of traffic
            corr += 1
            s.sendall(encode_request(ApiVersionsRequest(version=0), 0, corr))
            assert read_frame(s)
            time.sleep(0.2)
        assert corr >= 3
    # And an idle one is closed by the same broker.
    with socket.create_connection(parse_bootstrap(broker.bootstrap), timeout=30) as s:
        assert s.recv(1) == b""


_TRACE = re.compile(r"request buffer holds (\d+) bytes \((\d+) received of (\d+)\)")


def _traced_broker(broker_factory, overrides: dict[str, str] | None = None):
    broker = broker_factory(overrides={"kbroker.log.level": "DEBUG", **(overrides or {})}, start=False)
    broker.env["KBROKERTEST_TRACE_REQUEST_BUFFERS"] = "1"
    broker.start()
    return broker


def test_trickling_100mb_frame_costs_only_the_bytes_that_arrived(broker_factory):
    broker = _traced_broker(broker_factory)
    size = 100_000_000
    header = struct.pack(">hhih", 18, 0, 1, 1) + b"t"  # an ApiVersions v0 header, then padding
    with socket.create_connection(parse_bootstrap(broker.bootstrap), timeout=10) as s:
        s.sendall(struct.pack(">i", size) + header)
        sent = len(header)
        for _ in range(8):  # a few KB, one chunk at a time, each read by the broker before the next
            s.sendall(b"\0" * 512)
            sent += 512
            wait_for(lambda n=sent: any(r == n for _, r, _ in _traces(broker.log_text())),
                      f"the broker to have read {sent} bytes")
        traces = _traces(broker.log_text())
        assert traces and all(total == size for _, _, total in traces)
        for held, received, _ in traces:
            # Held memory follows the bytes received (at least 16 KiB, at most 4x what arrived), never the prefix.
            assert received <= held <= max(16 * 1024, 4 * received), (held, received)
        # The connection is still open and waiting for the rest of its frame.
        s.setblocking(False)
        with pytest.raises(BlockingIOError):
            s.recv(1)
    assert "Traceback" not in broker.log_text()


def test_memory_pool_pauses_reading_instead_of_closing(broker_factory):
    # With a 1 MiB pool, a half-sent 2 MiB frame exhausts it: other connections stop being read
    # (their requests wait, they are not closed) until that frame has been handled.
    broker = _traced_broker(broker_factory, {"queued.max.request.bytes": "1048576"})
    addr = parse_bootstrap(broker.bootstrap)
    big = encode_request(ApiVersionsRequest(version=0), 0, 99)[4:]
    big += b"\0" * (2 * 1024 * 1024 - len(big))  # ApiVersions v0 ignores trailing bytes
    with socket.create_connection(addr, timeout=30) as a, socket.create_connection(addr, timeout=30) as b:
        a.sendall(struct.pack(">i", len(big)) + big[:1000])
        wait_for(lambda: any(r == 1000 for _, r, _ in _traces(broker.log_text())), "the start of the big frame")
        # b's first request is read (it completes in one read) and answered; then b pauses for memory.
        b.sendall(encode_request(ApiVersionsRequest(version=0), 0, 1))
        assert read_frame(b)
        wait_for(lambda: "reading paused, queued.max.request.bytes=1048576 reached" in broker.log_text(),
                  "a connection to pause reading for memory")
        b.sendall(encode_request(ApiVersionsRequest(version=0), 0, 2))
        b.setblocking(False)
        with pytest.raises(BlockingIOError):  # not answered: b is not being read (a response would be a bug)
            b.recv(1)
        b.settimeout(30)
        # The rest of the big frame: handled, its memory returned, and b is read again.
        a.sendall(big[1000:])
        assert struct.unpack_from(">i", read_frame(a))[0] == 99
        assert struct.unpack_from(">i", read_frame(b))[0] == 2
        b.sendall(encode_request(ApiVersionsRequest(version=0), 0, 3))
        assert struct.unpack_from(">i", read_frame(b))[0] == 3
    assert "closing connection" not in broker.log_text()


def _padded(frame: bytes, size: int) -> bytes:
    """A request frame padded with zeros to ``size`` bytes of payload (the decoders ignore them)."""
    body = frame[4:] + b"\0" * (size - len(frame) + 4)
    return struct.pack(">i", len(body)) + body


def test_a_frame_admitted_while_reading_is_paused_for_read_ahead_is_read_to_its_end(broker_factory):
    """A connection stops reading once 4 MiB of its requests wait for answers
    (broker.connection.READ_AHEAD_BYTES). If memory comes back while it is paused so, the frame
    whose start it had read is admitted; that frame does not count as read ahead, or the connection
    would stay paused with it half read and never answer it."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka.protocol.consumer import FetchRequest

    broker = _traced_broker(broker_factory, {"queued.max.request.bytes": str(8 << 20)})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("read-ahead", 1, 1)])["read-ahead"].result(30)
    del admin
    T = FetchRequest.FetchTopic
    fetch = FetchRequest(version=4, replica_id=-1, max_wait_ms=4000, min_bytes=1, max_bytes=1 << 20,
                         isolation_level=0, topics=[T(version=4, topic="read-ahead", partitions=[
                             T.FetchPartition(version=4, partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
    parked = _padded(encode_request(fetch, 4, 1), 9 << 19)  # 4.5 MiB: waits 4 s for records
    small = encode_request(ApiVersionsRequest(version=0), 0, 2)
    later = _padded(encode_request(ApiVersionsRequest(version=0), 0, 3), 3 << 20)
    exhaust = _padded(encode_request(ApiVersionsRequest(version=0), 0, 99), 4 << 20)
    addr = parse_bootstrap(broker.bootstrap)
    with socket.create_connection(addr, timeout=30) as a, socket.create_connection(addr, timeout=30) as b:
        b.sendall(parked)  # read whole, handled: it parks holding 4.5 MiB
        wait_for(lambda: any(r == t == 9 << 19 for _, r, t in _traces(broker.log_text())), "the parked fetch")
        a.sendall(exhaust[:1004])  # size and 1,000 bytes, admitted: 8.5 MiB of an 8 MiB pool
        wait_for(lambda: any(r == 1000 and t == 4 << 20 for _, r, t in _traces(broker.log_text())),
                 "the start of the frame that exhausts the pool")
        # b: a whole small request and the start of a 3 MiB one, no memory for it: b pauses for
        # memory, and for read-ahead (4.5 MiB + the small one wait for answers).
        b.sendall(small + later[:1000])
        wait_for(lambda: "reading paused, queued.max.request.bytes" in broker.log_text(), "b to pause for memory")
        a.sendall(exhaust[1004:])  # handled: memory returns, b's 3 MiB frame is admitted
        assert struct.unpack_from(">i", read_frame(a))[0] == 99
        sender = threading.Thread(target=b.sendall, args=(later[1000:],), daemon=True)
        sender.start()
        # The fetch answers after its 4 s; then the small request; then the 3 MiB one, once b reads again.
        assert [struct.unpack_from(">i", read_frame(b))[0] for _ in range(3)] == [1, 2, 3]
        sender.join(30)
    assert "closing connection" not in broker.log_text()


def _traces(text: str) -> list[tuple[int, int, int]]:
    return [tuple(map(int, m.groups())) for m in _TRACE.finditer(text)]  # type: ignore[misc]


def test_zero_queued_max_request_bytes_means_unbounded(broker_factory):
    # As in Kafka (a pool only when queued.max.request.bytes > 0): 0 must not pause reading forever.
    broker = broker_factory(overrides={"queued.max.request.bytes": "0"})
    frame = encode_request(ApiVersionsRequest(version=0), 0, 7)
    with socket.create_connection(parse_bootstrap(broker.bootstrap), timeout=30) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(frame[:2])  # half a size prefix: the broker stashes it and must keep reading
        # Not a wait for a result: only gives the broker a chance to read the two bytes on their own
        # (the case that hung when 0 counted as a bound); the test passes the same without it.
        time.sleep(0.3)
        s.sendall(frame[2:])
        assert struct.unpack_from(">i", read_frame(s))[0] == 7
