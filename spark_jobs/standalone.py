"""Start and stop a small Spark standalone cluster on 127.0.0.1, and submit the kbroker jobs to it.

The pip package of PySpark has no ``start-master.sh``, so the master and the workers are started
directly with ``bin/spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``, each
as its own process group, bound to loopback (SPARK_LOCAL_IP=127.0.0.1, explicit ports), with
working directories under the cluster directory and no PYTHONPATH: nothing of the checkout is
visible to the executors, which get the code only from the application's ``--py-files`` zip
(spark_jobs/package.py). Every process is stopped by pid (the recorded pids and their descendants),
never by name.

``executor_python(dir)`` makes the Python a worker host would have: a venv with the third-party
dependencies (it points at this interpreter's site-packages) but without the editable kbroker
install, so ``import spark_jobs`` works there only through the shipped zip.

    python -m spark_jobs.standalone start --dir /tmp/kbroker-spark       # prints the master URL
    python -m spark_jobs.standalone submit --dir /tmp/kbroker-spark -- spark_jobs.uppercase \\
        --bootstrap 127.0.0.1:9092 --checkpoint /tmp/uc-ck --available-now
    python -m spark_jobs.standalone stop --dir /tmp/kbroker-spark
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pyspark

SPARK_BIN = Path(pyspark.__file__).parent / "bin"
STATE_FILE = "cluster.json"
# Small JVMs: the cluster shares a laptop (or a 2-core CI box) with the broker and the driver.
DAEMON_MEMORY = "256m"
EXECUTOR_MEMORY = "512m"


class ClusterError(RuntimeError):
    """A master or worker did not start; the message carries the tail of its log."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def process_tree(pid: int) -> list[int]:
    """pid and all its descendants (Linux /proc). PySpark's daemon leaves the worker's process
    group (setpgid), so a process group kill would miss the Python workers."""
    kids, out, todo = _children(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def _signal_all(pids: list[int], sig: int) -> None:
    for p in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, sig)


def kill_tree(pid: int) -> None:
    """SIGKILL pid and its descendants, as a crashed host would lose them: freeze the tree first
    (SIGSTOP until no new process appears), so nothing forks or reacts in between, then kill."""
    seen: list[int] = []
    for _ in range(10):
        tree = [p for p in process_tree(pid) if p not in seen]
        if not tree:
            break
        _signal_all(tree, signal.SIGSTOP)
        seen += tree
    _signal_all(seen, signal.SIGKILL)


def terminate_tree(pid: int, timeout: float = 30) -> None:
    """SIGTERM pid and its descendants, SIGKILL whatever is left after ``timeout``."""
    tree = process_tree(pid)
    _signal_all(tree, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(p) for p in tree):
        time.sleep(0.2)
    _signal_all([p for p in tree if _alive(p)], signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"


def daemon_env(work: Path) -> dict[str, str]:
    """Environment of the master and workers (and so of the executors): loopback, small heaps, no
    Python path, nothing that points at the checkout."""
    keep = ("PATH", "JAVA_HOME", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    conf_dir = work / "conf"
    conf_dir.mkdir(parents=True, exist_ok=True)
    # Only this file, no spark-env/spark-defaults from elsewhere. The master's REST submission server
    # would listen on the fixed port 6066: off, so clusters can run side by side.
    (conf_dir / "spark-defaults.conf").write_text("spark.master.rest.enabled false\n")
    env.update({"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
                "SPARK_CONF_DIR": str(conf_dir), "SPARK_LOG_DIR": str(work / "logs")})
    return env


def executor_python(directory: Path) -> Path:
    """A Python for the executors: a venv reaching this interpreter's third-party packages through
    a .pth line (whose own .pth files, among them the editable kbroker finder, are not processed)."""
    python = directory / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True,
                       capture_output=True, timeout=120)
        site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                   check=True, capture_output=True, text=True, timeout=60).stdout.strip())
        deps = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
        (site / "kbroker-deps.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))
    return python


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    ready_line: str

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready_line in self.log.read_text(errors="replace"):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise ClusterError(f"{self.name} not ready (exit {self.proc.poll()}):\n"
                           f"{self.log.read_text(errors='replace')[-4000:]}")


@dataclass
class StandaloneCluster:
    """A master and ``workers`` workers (``cores`` cores, ``memory`` each) under ``work``."""

    work: Path
    workers: int = 2
    cores: int = 1
    memory: str = EXECUTOR_MEMORY
    master_port: int = field(default_factory=free_port)
    daemons: list[Daemon] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def _spawn(self, name: str, args: list[str], ready_line: str) -> Daemon:
        cwd = self.work / name
        cwd.mkdir(parents=True, exist_ok=True)
        log = self.work / f"{name}.log"
        out: IO[bytes]
        with open(log, "ab") as out:
            proc = subprocess.Popen([str(SPARK_BIN / "spark-class"), *args], cwd=cwd, env=daemon_env(self.work),
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        daemon = Daemon(name, proc, log, ready_line)
        self.daemons.append(daemon)
        return daemon

    def start(self, timeout: float = 180) -> str:
        self.work.mkdir(parents=True, exist_ok=True)
        try:
            master = self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                            "--port", str(self.master_port), "--webui-port", str(free_port())],
                                 "I have been elected leader")
            master.wait_ready(timeout)
            for i in range(self.workers):
                self._spawn(f"worker{i}", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                           "--port", str(free_port()), "--webui-port", str(free_port()),
                                           "--cores", str(self.cores), "--memory", self.memory,
                                           "--work-dir", str(self.work / f"worker{i}" / "work"), self.master_url],
                            "Successfully registered with master")
            for d in self.daemons[1:]:
                d.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        self._save()
        return self.master_url

    def worker(self, i: int) -> Daemon:
        return next(d for d in self.daemons if d.name == f"worker{i}")

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker i with its executor JVM and Python workers, as if its host died."""
        w = self.worker(i)
        kill_tree(w.proc.pid)
        w.proc.wait(30)

    def stop(self) -> None:
        """Stop every process started here (workers first), by pid; safe to call twice."""
        for d in reversed(self.daemons):
            if d.proc.poll() is None:
                terminate_tree(d.proc.pid)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    d.proc.wait(30)
        with contextlib.suppress(FileNotFoundError):
            (self.work / STATE_FILE).unlink()

    def _save(self) -> None:
        state = {"master_url": self.master_url, "pids": {d.name: d.proc.pid for d in self.daemons}}
        (self.work / STATE_FILE).write_text(json.dumps(state))

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def submit_command(master_url: str, package_dir: Path, module: str, job_args: list[str], *,
                   python: Path | str, extra_conf: dict[str, str] | None = None) -> list[str]:
    """spark-submit argv running ``module`` (e.g. spark_jobs.uppercase) from the shipped package on
    ``master_url``: the zip as --py-files, the launcher as primary resource, ``python`` for the
    driver and the executors, one 1-core small executor per worker."""
    conf = {
        "spark.pyspark.python": str(python),
        "spark.pyspark.driver.python": str(python),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.memory": "512m",
        "spark.executor.memory": EXECUTOR_MEMORY,
        "spark.executor.cores": "1",
        "spark.cores.max": "2",
        "spark.task.maxFailures": "4",
        # Start the jobs only once every worker's executor is there (or after 2 min), so that the
        # tasks spread over the workers instead of all landing on the first executor up.
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.python.worker.reuse": "true",
        "spark.sql.shuffle.partitions": "2",
        **(extra_conf or {}),
    }
    cmd = [str(SPARK_BIN / "spark-submit"), "--master", master_url, "--deploy-mode", "client",
           "--py-files", str(package_dir / "kbroker_spark.zip")]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, str(package_dir / "run_job.py"), module, *job_args]


def submit_env(work: Path, package_dir: Path) -> dict[str, str]:
    """spark-submit's environment: the daemons' (nothing pointing at the checkout) plus the zip on
    PYTHONPATH. Spark hands --py-files to executors and to the driver's Python, but the Python
    processes the driver JVM starts itself to plan a Python data source (a streaming source's
    offsets, for one) see only the JVM's PYTHONPATH; the zip is a local file on the driver host."""
    env = daemon_env(work)
    env.pop("SPARK_LOG_DIR", None)
    env["PYTHONPATH"] = str(package_dir / "kbroker_spark.zip")
    return env


def _load(work: Path) -> dict[str, object]:
    return json.loads((work / STATE_FILE).read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    start = sub.add_parser("start", help="start a master and workers; print the master URL")
    start.add_argument("--workers", type=int, default=2)
    stop = sub.add_parser("stop", help="stop the cluster recorded in --dir")
    submit = sub.add_parser("submit", help="build the package and spark-submit a job module to the cluster")
    submit.add_argument("job", nargs=argparse.REMAINDER, help="-- <module> [job arguments]")
    for q in (start, stop, submit):
        q.add_argument("--dir", required=True, type=Path, help="cluster directory (logs, work dirs, pids)")
    args = p.parse_args(argv)
    work: Path = args.dir.resolve()
    if args.cmd == "start":
        cluster = StandaloneCluster(work, workers=args.workers)
        print(cluster.start(), flush=True)
        return 0
    if args.cmd == "stop":
        pids = _load(work)["pids"]
        assert isinstance(pids, dict)
        for pid in reversed(list(pids.values())):
            if _alive(pid):
                terminate_tree(pid)
        (work / STATE_FILE).unlink()
        return 0
    from spark_jobs.package import build

    job = [a for a in args.job if a != "--"] if args.job[:1] == ["--"] else args.job
    if not job:
        p.error("submit needs -- <module> [job arguments]")
    package = build(work / "package").parent
    cmd = submit_command(str(_load(work)["master_url"]), package, job[0], job[1:],
                         python=executor_python(work / "executor-python"))
    run_dir = work / "driver"
    run_dir.mkdir(exist_ok=True)
    return subprocess.run(cmd, cwd=run_dir, env=submit_env(work, package)).returncode


if __name__ == "__main__":
    sys.exit(main())
