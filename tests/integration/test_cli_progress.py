"""`kbroker perf` shows a progress bar on stderr when stderr is a terminal, and nothing extra when
it is not (pipes and files get the summary lines alone)."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parents[2]


def _perf(bootstrap: str, topic: str, stderr: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "cli", "perf", "produce", "-b", bootstrap, "--topic", topic,
                             "--num-records", "20000", "--record-size", "100"],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=stderr)


def test_perf_progress_bar_only_on_a_terminal(broker) -> None:
    topic = f"progress-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)

    master, slave = pty.openpty()
    # A real terminal has a size; a fresh pty's is 0x0, which leaves tqdm no room to draw.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    proc = _perf(broker.bootstrap, topic, slave)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    assert proc.wait(60) == 0
    assert b"produce" in seen and b"rec" in seen, seen[-500:]

    piped = _perf(broker.bootstrap, topic, subprocess.PIPE)
    out, err = piped.communicate(timeout=120)
    assert piped.returncode == 0
    assert b"records sent" in out
    assert err == b""  # no bar, no carriage returns
