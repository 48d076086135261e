"""`kbroker serve --from-env` and `kbroker healthcheck`, as the container image runs them, without containers.

A real broker process is configured only through KBROKER_* variables (the image's way); the
healthcheck answers 0 while it serves ApiVersions and 1 once it is stopped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.broker_proc import REPO_ROOT, free_port


def _healthcheck(env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "cli", "healthcheck", "--from-env", "--timeout", "3"],
                          cwd=REPO_ROOT, env=env, capture_output=True, timeout=60)


def test_serve_from_env_and_healthcheck(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "KBROKER_NODE_ID": "7",
           "KBROKER_LISTENERS": f"EXTERNAL://127.0.0.1:{port}",
           "KBROKER_ADVERTISED_LISTENERS": f"EXTERNAL://127.0.0.1:{port}",
           "KBROKER_LISTENER_SECURITY_PROTOCOL_MAP": "EXTERNAL:PLAINTEXT",
           "KBROKER_LOG_DIRS": str(tmp_path / "data"),
           "KBROKER_NUM_PARTITIONS": "3"}
    log = open(tmp_path / "broker.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "broker", "serve", "--from-env"], cwd=REPO_ROOT, env=env,
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "broker.log").read_text()
            result = _healthcheck(env)
            if result.returncode == 0:
                break
            assert time.monotonic() < deadline, result.stderr.decode()
            time.sleep(0.2)
        # The node id came from KBROKER_NODE_ID: meta.properties records it.
        assert "node.id=7" in (tmp_path / "data" / "meta.properties").read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        log.close()
    result = _healthcheck(env)
    assert result.returncode == 1
    assert f"127.0.0.1:{port}" in result.stderr.decode()
