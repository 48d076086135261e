"""Run a real kbroker as a subprocess for integration tests, compat tests and benchmarks.

The broker is started as ``<python> -m broker serve --override ...`` from the repository root, its
stderr/stdout go to a log file (appended across restarts), and it counts as started only once an
ApiVersions request over TCP gets a response: an open port alone does not mean the broker serves.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from kafka.protocol.metadata import ApiVersionsRequest

from .wire import send_request

REPO_ROOT = Path(__file__).resolve().parents[2]

# Test-friendly defaults; individual tests override what they need.
DEFAULT_OVERRIDES: dict[str, str] = {
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
    "group.initial.rebalance.delay.ms": "0",
}


class BrokerError(RuntimeError):
    """The broker did not start or stop as expected; the message carries the tail of its log."""


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_taken: set[int] = set()  # handed out by this process already


def free_port() -> int:
    """A port free a moment ago, below the kernel's ephemeral range, so that no outgoing connection
    (a client's, a broker's) can take it before the process it is meant for binds it."""
    high = _ephemeral_low() - 1
    rng = random.Random()
    for _ in range(1000):
        port = rng.randint(max(1024, high - 20000), high)
        if port in _taken:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _taken.add(port)
        return port
    raise RuntimeError("no free port below the ephemeral range")


class BrokerProcess:
    def __init__(self, data_dir: Path, *, port: int | None = None, overrides: dict[str, str] | None = None,
                 log_path: Path | None = None, python: str | None = None, env: dict[str, str] | None = None,
                 config_file: Path | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.port = port if port is not None else free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        # The log lives next to the data dir, not inside it: the broker owns every entry of log.dirs.
        self.log_path = Path(log_path) if log_path is not None else self.data_dir.with_name(
            self.data_dir.name + ".broker.log")
        self.overrides = {**DEFAULT_OVERRIDES, **(overrides or {})}
        self.config_file = config_file  # a server.properties file given to serve (the overrides win)
        self.python = python or sys.executable
        # Extra environment for the broker process (e.g. KBROKERTEST_CRASH_POINT fault injection); read at
        # every start, so a test can set it for one run and clear it before restarting.
        self.env: dict[str, str] = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        # A test that provokes an internal error on purpose sets this; the fixtures then accept a
        # traceback in the broker log instead of failing the test at teardown.
        self.expect_tracebacks = False

    # -- lifecycle -------------------------------------------------------------------------------
    def command(self) -> list[str]:
        settings = {
            **self.overrides,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.data_dir),
        }
        cmd = [self.python, "-m", "broker", "serve"]
        if self.config_file is not None:
            cmd.append(str(self.config_file))
        for key, value in settings.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 30) -> None:
        if self.running:
            raise BrokerError("broker already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        with open(self.log_path, "ab") as log:
            log.write(f"===== kbroker start #{self.starts}: {' '.join(self.command())}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.command(), cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        last_error = "none"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerError(f"broker exited with code {self.proc.returncode} during start-up\n"
                                  f"{self.log_tail()}")
            try:
                send_request(self.bootstrap, ApiVersionsRequest(version=0), 0, timeout=2)
                return
            except Exception as e:  # refused, reset or closed while the broker comes up
                # repr only: a kept traceback would pin the callers' frames (and their clients).
                last_error = repr(e)
                time.sleep(0.05)
        self.kill()
        raise BrokerError(f"broker did not answer ApiVersions on {self.bootstrap} within {timeout}s "
                          f"(last error: {last_error})\n{self.log_tail()}")

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM and wait; returns the exit code. If it hangs: SIGKILL, then raise BrokerError."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise BrokerError(f"broker did not exit within {timeout}s of SIGTERM; killed\n"
                                  f"{self.log_tail()}") from None
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self, *, kill: bool = False, timeout: float = 30) -> None:
        """Stop (SIGTERM, or SIGKILL when ``kill``) and start again on the same port and data dir."""
        if kill:
            self.kill()
        else:
            code = self.stop()
            if code != 0:
                raise BrokerError(f"broker exited with code {code} on SIGTERM\n{self.log_tail()}")
        self.start(timeout)

    # -- logs ------------------------------------------------------------------------------------
    def log_text(self) -> str:
        with contextlib.suppress(FileNotFoundError):
            return self.log_path.read_text(errors="replace")
        return ""

    def log_tail(self, lines: int = 60) -> str:
        tail = self.log_text().splitlines()[-lines:]
        return f"--- last {len(tail)} lines of {self.log_path} ---\n" + "\n".join(tail)

    def __enter__(self) -> BrokerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self.kill()

    def __repr__(self) -> str:
        return f"BrokerProcess({self.bootstrap}, data_dir={self.data_dir}, running={self.running})"
