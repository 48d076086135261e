"""Zero-copy fetch (issue 20): record ranges of 64 KiB and more are sent with os.sendfile on plaintext
listeners and copied on TLS listeners; the two must put the same response bytes on the wire.

One broker with a PLAINTEXT and an SSL listener, 1 MiB segments (so fetches cross rolls), and two
partitions holding plain records, committed and aborted transactions and a still-open transaction
(so the last stable offset is below the high watermark). The same Fetch requests (read_uncommitted,
read_committed with aborted transactions in range, follower fetches with replica_id >= 0, starts in
the middle of batches, partition_max_bytes and response max_bytes cuts, old and flexible versions)
are sent over both listeners and the response frames compared byte for byte. The broker logs each
sendfile response (KBROKERTEST_TRACE_SENDFILE=1), which shows that the plaintext side really took the
zero-copy path, and the TLS side never did.
"""

from __future__ import annotations

import os
import re
import ssl
import struct
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka.protocol.consumer import FetchRequest

from tests.helpers.broker_proc import BrokerProcess, free_port
from tests.helpers.tls_certs import make_certs
from tests.helpers.wire import RawConnection, decode_response

TOPIC = "zero-copy"
VALUE = 1000


class TwoListenerBroker(BrokerProcess):
    def __init__(self, data_dir: Path, ssl_port: int, overrides: dict[str, str]) -> None:
        super().__init__(data_dir, overrides=overrides)
        self.ssl_port = ssl_port

    def command(self) -> list[str]:
        cmd = super().command()
        i = cmd.index(f"listeners=PLAINTEXT://127.0.0.1:{self.port}")
        cmd[i] = f"listeners=PLAINTEXT://127.0.0.1:{self.port},SSL://127.0.0.1:{self.ssl_port}"
        return cmd


@pytest.fixture(scope="module")
def setup(tmp_path_factory):  # noqa: ANN201
    tmp = tmp_path_factory.mktemp("zero_copy")
    certs = make_certs(tmp / "certs")
    broker = TwoListenerBroker(tmp / "data", free_port(), {
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server_keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca),
        "log.segment.bytes": str(1 << 20), "num.partitions": "2",
        "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
    })
    broker.env["KBROKERTEST_TRACE_SENDFILE"] = "1"
    broker.start(60)
    tls = ssl.create_default_context(cafile=str(certs.ca))
    plain = txn = open_txn = None
    try:
        conf = {"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 64 * 1024}
        plain = Producer({**conf, "acks": "all"})
        txn = Producer({**conf, "transactional.id": "zc-txn"})
        txn.init_transactions(30)
        values = [os.urandom(VALUE) for _ in range(64)]

        def fill(p: Producer, n: int) -> None:
            for i in range(n):
                while True:
                    try:
                        p.produce(TOPIC, values[i % 64], partition=i % 2)
                        break
                    except BufferError:
                        p.poll(0.05)
            p.flush(60)

        fill(plain, 3000)
        for commit in (True, False, True, False):
            txn.begin_transaction()
            fill(txn, 1500)
            (txn.commit_transaction if commit else txn.abort_transaction)(30)
        fill(plain, 1000)
        # Left open while the test runs: read_committed stops at its first offset.
        open_txn = Producer({**conf, "transactional.id": "zc-open"})
        open_txn.init_transactions(30)
        open_txn.begin_transaction()
        fill(open_txn, 600)
        assert plain.flush(30) == 0 and txn.flush(30) == 0
        yield broker, tls
    finally:
        # The producers go first (the open transaction is aborted by its producer), then the broker.
        plain = txn = open_txn = None  # noqa: F841
        broker.stop()
        broker.kill()
    assert "Traceback" not in broker.log_text(), broker.log_tail()
    assert "could not be completed" not in broker.log_text(), broker.log_tail()


def _request(version: int, offsets: tuple[int, int], *, isolation: int, part_max: int, max_bytes: int,
             replica: int = -1) -> FetchRequest:
    T = FetchRequest.FetchTopic
    return FetchRequest(
        version=version, replica_id=replica, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes,
        isolation_level=isolation, session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[T(version=version, topic=TOPIC, partitions=[
            T.FetchPartition(version=version, partition=p, current_leader_epoch=-1, fetch_offset=off,
                             log_start_offset=-1, partition_max_bytes=part_max, last_fetched_epoch=-1)
            for p, off in enumerate(offsets)])])


def _frames(conn: RawConnection, req: FetchRequest, version: int) -> bytes:
    conn.send(req, version)
    frame = conn.read_raw_frame()
    return frame[4:]  # without the correlation id, which differs between the two connections


def _cases() -> list[tuple[int, tuple[int, int], int, int, int, int]]:
    cases = []
    for version in (4, 11, 12):
        for offsets in ((0, 0), (1234, 777), (2900, 3333), (4100, 5200)):
            for isolation in (0, 1):
                for part_max, max_bytes in ((1 << 20, 50 << 20), (150_000, 50 << 20), (3 << 20, 200_000),
                                            (10 << 20, 50 << 20)):
                    cases.append((version, offsets, isolation, part_max, max_bytes, -1))
        for offsets in ((0, 0), (4100, 2500)):
            cases.append((version, offsets, 0, 2 << 20, 50 << 20, 1))  # a follower: up to the log end
    return cases


def test_sendfile_and_copy_paths_answer_byte_identical(setup) -> None:  # noqa: ANN001
    broker, tls = setup
    before = len(re.findall(r"with sendfile", broker.log_text()))
    plain = RawConnection(broker.bootstrap, timeout=30)
    secure = RawConnection(f"127.0.0.1:{broker.ssl_port}", timeout=30)
    secure.sock = tls.wrap_socket(secure.sock, server_hostname="localhost")
    aborted_seen = big = 0
    try:
        for version, offsets, isolation, part_max, max_bytes, replica in _cases():
            req = _request(version, offsets, isolation=isolation, part_max=part_max, max_bytes=max_bytes,
                           replica=replica)
            a = _frames(plain, req, version)
            b = _frames(secure, req, version)
            assert a == b, (version, offsets, isolation, part_max, max_bytes, replica)
            resp = decode_response(req, version, struct.pack(">i", 0) + a)
            for p in resp.responses[0].partitions:
                assert p.error_code == 0
                aborted_seen += bool(p.aborted_transactions)
                big += len(p.records or b"") >= 64 * 1024
    finally:
        plain.close()
        secure.close()
    assert aborted_seen and big > 50
    text = broker.log_text()
    sends = len(re.findall(r"with sendfile", text)) - before
    # Every plaintext response with a 64 KiB range went out with sendfile; the TLS ones never do.
    assert sends >= big // 2 > 0, text[-3000:]


def test_pipelined_requests_mix_sendfile_and_copied_answers(setup) -> None:  # noqa: ANN001
    """Fetches sent back to back on one connection, some answered with sendfile and some copied
    (ranges under 64 KiB), come back in request order and intact: a sendfile response is written to
    its end before the next response starts."""
    broker, tls = setup
    reqs = [_request(12, (0, 100), isolation=0, part_max=1 << 20, max_bytes=50 << 20),
            _request(12, (5000, 5001), isolation=0, part_max=2000, max_bytes=50 << 20),  # small: copied
            _request(11, (2000, 0), isolation=1, part_max=3 << 20, max_bytes=50 << 20),
            _request(4, (100, 4000), isolation=0, part_max=150_000, max_bytes=50 << 20)] * 3
    versions = [12, 12, 11, 4] * 3
    plain = RawConnection(broker.bootstrap, timeout=30)
    secure = RawConnection(f"127.0.0.1:{broker.ssl_port}", timeout=30)
    secure.sock = tls.wrap_socket(secure.sock, server_hostname="localhost")
    try:
        corrs = [plain.send(r, v) for r, v in zip(reqs, versions, strict=True)]
        for corr, r, v in zip(corrs, reqs, versions, strict=True):
            frame = plain.read_raw_frame()
            assert struct.unpack_from(">i", frame)[0] == corr
            assert frame[4:] == _frames(secure, r, v)
    finally:
        plain.close()
        secure.close()
