"""A broker refuses to start rather than harm data or serve insecurely (issue 17 item 1).

* Data-directory lock: a second broker on the log dir of a running one (same port or another)
  exits non-zero at once, naming the dir and the running broker's pid, and changes nothing in
  the dir; the first broker keeps serving.
* A listener whose security protocol (through listener.security.protocol.map) cannot be served as
  configured (an SSL listener without key and certificate, a SASL mechanism kbroker does not serve)
  refuses to start, and nothing is served.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from kafka.protocol.metadata import ApiVersionsRequest

from tests.helpers.broker_proc import REPO_ROOT, BrokerProcess, free_port
from tests.helpers.wire import send_request

# Nothing in the first broker's dir may change on its own while the second one tries to start:
# no periodic checkpoint rewrites during the test.
QUIET = {"log.flush.offset.checkpoint.interval.ms": "3600000",
         "log.flush.start.offset.checkpoint.interval.ms": "3600000"}


def _snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: kind, mtime, size and (for files) the bytes."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            st = path.lstat()
            content = path.read_bytes() if path.is_file() else None
            out[str(path.relative_to(root))] = (path.is_dir(), st.st_mtime_ns, st.st_size, content)
    return out


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for v in values:
        p.produce(topic, v)
    assert p.flush(60) == 0


def _consume_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


@pytest.mark.parametrize("same_port", [False, True], ids=["other-port", "same-port"])
def test_second_broker_on_a_locked_dir_exits_and_changes_nothing(broker_factory, tmp_path, same_port):
    a = broker_factory(QUIET)
    _produce(a.bootstrap, "locked", [b"one", b"two", b"three"])
    before = _snapshot(a.data_dir)

    # Same port: it could never serve anyway, but must not touch the dir before finding that out.
    port = a.port if same_port else free_port()
    out = _run_until_exit(BrokerProcess(a.data_dir, port=port, overrides=QUIET).command(),
                          [] if same_port else [port])
    message = f"Failed to acquire lock on file .lock in {a.data_dir.resolve()}: it is held by process {a.proc.pid}"
    assert message in out, out
    # B read and wrote nothing: no recovery, no index rebuild, no producer-id block, no metadata.
    assert "Loading logs" not in out
    assert _snapshot(a.data_dir) == before
    assert (a.data_dir / ".lock").read_text().strip() == str(a.proc.pid)

    assert a.running
    _produce(a.bootstrap, "locked", [b"four"])
    assert _consume_all(a.bootstrap, "locked", 4) == [b"one", b"two", b"three", b"four"]


def test_lock_released_when_broker_stops(broker_factory):
    """The lock lives as long as the process: a restart (clean or kill -9) takes it again."""
    a = broker_factory(QUIET)
    a.restart()
    assert (a.data_dir / ".lock").read_text().strip() == str(a.proc.pid)
    a.restart(kill=True)
    assert (a.data_dir / ".lock").read_text().strip() == str(a.proc.pid)


def _run_until_exit(cmd: list[str], ports: list[int]) -> str:
    """Run a broker command that must fail: wait for it to exit non-zero, failing the test if it
    serves on any of ``ports`` first. Returns its output."""
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None:
            assert time.monotonic() < deadline, "the broker neither exited nor served"
            for port in ports:
                try:
                    send_request(f"127.0.0.1:{port}", ApiVersionsRequest(version=0), 0, timeout=1)
                except OSError:
                    continue
                pytest.fail(f"the broker served on 127.0.0.1:{port}: {cmd}")
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
        out = proc.communicate(timeout=60)[0].decode(errors="replace")
    assert proc.returncode != 0, out
    return out


def _serve_refused(tmp_path: Path, listeners: str, extra: dict[str, str] | None = None) -> str:
    """Start ``kbroker serve`` with ``listeners``; assert it exits non-zero without serving and
    without creating its log dir. Returns its output."""
    data_dir = tmp_path / "data"
    settings = {"listeners": listeners, "log.dirs": str(data_dir), **(extra or {})}
    cmd = [sys.executable, "-m", "broker", "serve"]
    for k, v in settings.items():
        cmd += ["--override", f"{k}={v}"]
    ports = [int(x.rsplit(":", 1)[1]) for x in listeners.split(",")]
    out = _run_until_exit(cmd, ports)
    assert not data_dir.exists(), "a refused broker must not touch its log dirs"
    return out


@pytest.mark.parametrize(("protocol", "message"), [
    ("SSL", "listener SSL needs a key and certificate: set ssl.keystore.type=PEM and ssl.keystore.location"),
    ("SASL_PLAINTEXT", "listener SASL_PLAINTEXT: SASL mechanism(s) GSSAPI in sasl.enabled.mechanisms are not "
                       "supported by kbroker"),
    ("SASL_SSL", "listener SASL_SSL needs a key and certificate"),
])
def test_secure_listener_without_usable_settings_refuses_to_start(tmp_path, protocol, message):
    """SSL/SASL listeners are served (issue 17 items 2-3), never as plaintext: one without a key and
    certificate, or with a SASL mechanism kbroker does not serve (Kafka's default GSSAPI), refuses
    to start before touching its log dirs."""
    port = free_port()
    out = _serve_refused(tmp_path, f"{protocol}://127.0.0.1:{port}")
    assert message in out
    assert "refusing to start" in out


def test_listener_mapped_to_an_unusable_protocol_refuses_to_start(tmp_path):
    """The protocol comes from listener.security.protocol.map; a PLAINTEXT listener next to the
    refused one is not served either."""
    plain, external = free_port(), free_port()
    out = _serve_refused(tmp_path, f"PLAINTEXT://127.0.0.1:{plain},EXTERNAL://127.0.0.1:{external}",
                         {"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
                          "sasl.enabled.mechanisms": "SCRAM-SHA-512,OAUTHBEARER"})
    assert "listener EXTERNAL: SASL mechanism(s) OAUTHBEARER in sasl.enabled.mechanisms are not supported" in out
