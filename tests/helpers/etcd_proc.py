"""Run a real single-member etcd server as a subprocess for cluster tests and local use.

The server listens on 127.0.0.1 only, on free client and peer ports, with its own data dir; its
output goes to a log file next to the data dir (appended across restarts). It counts as started only
once ``GET /health`` on the client URL answers ``"health": "true"``: etcd 3.4 serves that only with
an elected Raft leader and after a linearizable read went through, so an open port alone is not
enough. Faults for tests: ``kill()`` (SIGKILL), ``pause()``/``resume()`` (SIGSTOP/SIGCONT: the
process keeps its sockets but answers nothing, like a partition), ``restart()`` on the same ports
and data dir. Processes are always stopped by their own pid. With ``tls`` (EtcdTlsFiles) etcd serves
its clients over TLS only (https client URL); ``gateway`` posts to its JSON gateway (auth setup).

etcd's own files (WAL and database) live in memory, in a directory of /dev/shm made for each
EtcdProcess and removed when the object goes (or at exit), when /dev/shm is writable; ``data_dir``
still names the log file. etcd fsyncs its WAL and database on every write, and on a machine where
other tests write gigabytes at once (two test workers, ``make test``) one fsync waited behind their
writeback for seconds: leases and requests timed out. The tests need etcd's answers, not its
durability across power loss (a killed or restarted etcd keeps what the page cache holds either way).

etcd comes from the Debian package ``etcd-server`` (``make tools`` installs it); a missing binary
raises ``EtcdNotInstalled`` naming that package.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.request
import weakref
from dataclasses import dataclass
from pathlib import Path

from .broker_proc import free_port

ETCD_PACKAGE = "etcd-server"

# A short Raft heartbeat and election timeout: a single member elects itself sooner, and etcd's
# minimum lease TTL (1.5 election timeouts, rounded up to whole seconds) drops from 2 s to 1 s.
TEST_HEARTBEAT_MS = 50
TEST_ELECTION_MS = 500


class EtcdError(RuntimeError):
    """etcd did not start or stop as expected; the message carries the tail of its log."""


class EtcdNotInstalled(EtcdError):
    """The ``etcd`` binary is not on PATH."""


def etcd_binary() -> str:
    """Path of the ``etcd`` binary, or EtcdNotInstalled naming the Debian package to install."""
    path = shutil.which("etcd")
    if path is None:
        raise EtcdNotInstalled(f"etcd not on PATH: install the Debian package {ETCD_PACKAGE} "
                               f"(apt-get install {ETCD_PACKAGE}, or `make tools` as root)")
    return path


@dataclass(frozen=True)
class EtcdTlsFiles:
    """PEM files for an etcd that serves its clients over TLS (``--cert-file`` ...).

    ``client_cert_auth``: etcd asks for a client certificate signed by ``ca`` (``--client-cert-auth``).
    ``client_cert``/``client_key``: what this helper's own health checks present then.
    """
    ca: Path
    cert: Path
    key: Path
    client_cert_auth: bool = False
    client_cert: Path | None = None
    client_key: Path | None = None


class EtcdProcess:
    def __init__(self, data_dir: Path, *, name: str = "kbroker-test", client_port: int | None = None,
                 peer_port: int | None = None, log_path: Path | None = None,
                 tls: EtcdTlsFiles | None = None, extra_args: list[str] | None = None,
                 host: str = "127.0.0.1", initial_cluster: str | None = None, cluster_token: str | None = None,
                 prefix: list[str] | None = None, heartbeat_ms: int = TEST_HEARTBEAT_MS,
                 election_ms: int = TEST_ELECTION_MS) -> None:
        # A member of a multi-member cluster (etcd_cluster.EtcdCluster) gets ``initial_cluster``
        # (name=peer-url,...) and a ``cluster_token``; ``prefix`` runs it inside a network namespace.
        self.host = host
        self.initial_cluster = initial_cluster
        self.cluster_token = cluster_token
        self.prefix = list(prefix or [])
        self.heartbeat_ms, self.election_ms = heartbeat_ms, election_ms
        self.tls = tls
        self.extra_args = list(extra_args or [])  # e.g. ["--auth-token-ttl", "2"]
        self.data_dir = Path(data_dir)
        self.name = name
        self.client_port = client_port if client_port is not None else free_port()
        self.peer_port = peer_port if peer_port is not None else free_port()
        self.log_path = Path(log_path) if log_path is not None else self.data_dir.with_name(
            self.data_dir.name + ".etcd.log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._files: Path | None = None  # where etcd keeps its data (see the module docstring)

    def _files_dir(self) -> Path:
        if self._files is None:
            shm = Path("/dev/shm")
            if shm.is_dir() and os.access(shm, os.W_OK):
                self._files = Path(tempfile.mkdtemp(prefix="kbroker-etcd-", dir=shm))
                weakref.finalize(self, shutil.rmtree, str(self._files), True)
            else:
                self._files = self.data_dir
        return self._files

    @property
    def client_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://{self.host}:{self.peer_port}"

    @property
    def endpoints(self) -> str:
        """The value for ``kbroker.etcd.endpoints``."""
        return self.client_url

    def command(self) -> list[str]:
        return [
            *self.prefix,
            etcd_binary(),
            "--name", self.name,
            "--data-dir", str(self._files_dir()),
            "--listen-client-urls", self.client_url,
            "--advertise-client-urls", self.client_url,
            "--listen-peer-urls", self.peer_url,
            "--initial-advertise-peer-urls", self.peer_url,
            "--initial-cluster", self.initial_cluster or f"{self.name}={self.peer_url}",
            *(["--initial-cluster-token", self.cluster_token] if self.cluster_token else []),
            "--heartbeat-interval", str(self.heartbeat_ms),
            "--election-timeout", str(self.election_ms),
            "--log-level", "warn",
            "--logger", "zap",
            *self._tls_args(),
            *self.extra_args,
        ]

    def _tls_args(self) -> list[str]:
        if self.tls is None:
            return []
        args = ["--cert-file", str(self.tls.cert), "--key-file", str(self.tls.key),
                "--trusted-ca-file", str(self.tls.ca)]
        return args + (["--client-cert-auth"] if self.tls.client_cert_auth else [])

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client context trusting the test CA (and presenting the client certificate), for https."""
        if self.tls is None:
            return None
        ctx = ssl.create_default_context(cafile=str(self.tls.ca))
        if self.tls.client_cert is not None:
            ctx.load_cert_chain(str(self.tls.client_cert), str(self.tls.client_key))
        return ctx

    def gateway(self, path: str, body: dict, *, token: str | None = None, timeout: float = 10) -> dict:
        """POST a JSON request to etcd's gRPC gateway (``/v3/...``), e.g. ``/v3/auth/user/add``."""
        req = urllib.request.Request(f"{self.client_url}{path}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": token} if token else {})})
        with urllib.request.urlopen(req, timeout=timeout, context=self.ssl_context()) as resp:
            return json.loads(resp.read() or b"{}")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self, timeout: float = 30) -> None:
        self.launch()
        self.wait_healthy(timeout)

    def launch(self) -> None:
        """Start the process without waiting: members of a new cluster only turn healthy together."""
        if self.running:
            raise EtcdError("etcd already running")
        cmd = self.command()  # raises EtcdNotInstalled before anything is created
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"===== etcd start #{self.starts}: {' '.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

    def wait_healthy(self, timeout: float = 30) -> None:
        assert self.proc is not None, "launch() first"
        deadline = time.monotonic() + timeout
        last_error: object = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EtcdError(f"etcd exited with code {self.proc.returncode} during start-up\n{self.log_tail()}")
            try:
                if self.healthy(timeout=2):
                    return
                last_error = "health false"
            except Exception as e:  # refused while etcd binds, or no leader yet
                # repr only: a kept traceback would pin the callers' frames (and their clients).
                last_error = repr(e)
            time.sleep(0.05)
        self.kill()
        raise EtcdError(f"etcd did not report healthy on {self.client_url} within {timeout}s "
                        f"(last error: {last_error})\n{self.log_tail()}")

    def healthy(self, timeout: float = 2) -> bool:
        """One ``GET /health``: True when etcd has a leader and served a read."""
        with urllib.request.urlopen(f"{self.client_url}/health", timeout=timeout,
                                    context=self.ssl_context()) as resp:
            return json.loads(resp.read()).get("health") == "true"

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM (after SIGCONT, in case it is paused) and wait; SIGKILL if it hangs."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise EtcdError(f"etcd did not exit within {timeout}s of SIGTERM; killed\n"
                                f"{self.log_tail()}") from None
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL by pid (works on a paused process too) and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def pause(self) -> None:
        """SIGSTOP: etcd keeps its sockets open but answers nothing, as if cut off."""
        if not self.running:
            raise EtcdError("etcd not running")
        os.kill(self.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]

    def resume(self) -> None:
        if self.running:
            os.kill(self.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]

    def restart(self, *, kill: bool = False, timeout: float = 30) -> None:
        """Stop (SIGTERM, or SIGKILL when ``kill``) and start again on the same ports and data dir."""
        if kill:
            self.kill()
        else:
            self.stop()
        self.start(timeout)

    def log_text(self) -> str:
        with contextlib.suppress(FileNotFoundError):
            return self.log_path.read_text(errors="replace")
        return ""

    def log_tail(self, lines: int = 40) -> str:
        tail = self.log_text().splitlines()[-lines:]
        return f"--- last {len(tail)} lines of {self.log_path} ---\n" + "\n".join(tail)

    def __enter__(self) -> EtcdProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self.kill()

    def __repr__(self) -> str:
        return f"EtcdProcess({self.client_url}, data_dir={self.data_dir}, running={self.running})"
