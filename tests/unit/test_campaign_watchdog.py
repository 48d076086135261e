"""The fault campaign's worker watchdog (tests/campaign/worker.py): an operation blocked past
``--hang-s`` ends the worker with exit code 3, after writing every thread's Python stack to its log,
so a hang shows which client call did not return (docs/fault-campaigns.md: librdkafka#5511)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_blocked_operation_ends_the_worker_with_every_threads_stack() -> None:
    script = textwrap.dedent("""
        import threading, time, types
        from tests.campaign.worker import Worker

        def blocked_client_call():
            time.sleep(60)  # stands for a librdkafka call that does not return

        w = types.SimpleNamespace(op_started=time.monotonic(), args=types.SimpleNamespace(hang_s=0.5, worker=7))
        threading.Thread(target=Worker.watchdog, args=(w,), daemon=True).start()
        blocked_client_call()
    """)
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, r.stderr
    assert "worker 7: an operation blocked for 0 s; exiting" in r.stderr
    assert "where each thread was" in r.stderr
    assert "in blocked_client_call" in r.stderr  # the main thread's stack, at the call that hung
