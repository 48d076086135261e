"""Replays every crasher the protocol fuzzer found (tests/corpus/fuzz_crashers.txt) on every `make test`.

Each frame is sent alone on a fresh connection (an entry of several frames joined by "+" sets up
state first, e.g. a group, then sends the request that fails); the broker may answer or close the connection, but
must log no traceback, and an ApiVersions request on another connection must still be answered.
Entries still open when they were added (the bug is in broker code owned elsewhere) are strict
xfails: the test starts passing, and so fails loudly, once the fix lands; then flip the status
column to ``fixed``.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.metadata import ApiVersionsRequest

from tests.helpers.broker_proc import BrokerProcess
from tests.helpers.wire import parse_bootstrap, send_request

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "fuzz_crashers.txt"
TRACEBACK = "Traceback (most recent call last)"


def _cases() -> list:
    out = []
    for line in CORPUS.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, version, status, name, frame = line.split()
        marks = [pytest.mark.xfail(strict=True, reason="open crasher, see the corpus")] if status == "open" else []
        out.append(pytest.param(frame, id=f"api{key}-v{version}-{name}", marks=marks))
    return out


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("fuzzcorpus") / "data")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
        proc.kill()


def _send_alone(bootstrap: str, frame: bytes) -> None:
    with socket.create_connection(parse_bootstrap(bootstrap), timeout=10) as s:
        s.sendall(frame)
        s.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):
            while s.recv(65536):
                pass


@pytest.mark.parametrize("frame_hex", _cases())
def test_fuzz_crasher_is_handled(shared_broker: BrokerProcess, frame_hex: str) -> None:
    start = len(shared_broker.log_text())
    # Sent several times: the first request may only trigger the creation of an internal topic
    # (e.g. __transaction_state answers COORDINATOR_NOT_AVAILABLE until it exists).
    for _ in range(5):
        for part in frame_hex.split("+"):
            _send_alone(shared_broker.bootstrap, bytes.fromhex(part))
        # The broker serves other connections at once.
        assert send_request(shared_broker.bootstrap, ApiVersionsRequest(version=0), 0, timeout=5).error_code == 0
        deadline = time.monotonic() + 1
        while time.monotonic() < deadline and TRACEBACK not in shared_broker.log_text()[start:]:
            time.sleep(0.05)
        if TRACEBACK in shared_broker.log_text()[start:]:
            break
    new = shared_broker.log_text()[start:]
    assert TRACEBACK not in new, new[new.find(TRACEBACK) - 200:][:3000]
