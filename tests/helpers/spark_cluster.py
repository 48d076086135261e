"""A kbroker Spark job submitted to a standalone cluster (spark_jobs/standalone.py) from a test.

``SubmittedJob`` runs ``spark-submit`` with the shipped package (the zip and launcher built by
spark_jobs/package.py) as its own process group in a working directory outside the checkout, logs
to a file, and is always stopped by pid (its whole process tree) when the ``with`` block ends,
also when the test fails. The executors' Python is ``executor_python`` (no editable kbroker), so a
job can only import spark_jobs through ``--py-files``. ``lost_and_rerun`` reads the executors' logs
to show which tasks a killed worker lost and that the other worker ran them again.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from spark_jobs.package import build
from spark_jobs.standalone import (
    StandaloneCluster,
    executor_python,
    kill_tree,
    submit_command,
    submit_env,
)

Task = tuple[int, int, int, int]  # stage, stage attempt, task index, task attempt


class SubmittedJob:
    def __init__(self, cluster: StandaloneCluster, module: str, args: list[str], *, log: Path,
                 ship: bool = True, conf: dict[str, str] | None = None) -> None:
        work = cluster.work
        self.package = build(work / "package").parent
        cmd = submit_command(cluster.master_url, self.package, module, args,
                             python=executor_python(work / "executor-python"), extra_conf=conf)
        if not ship:  # the driver still has the zip on its PYTHONPATH; the executors get nothing
            i = cmd.index("--py-files")
            del cmd[i:i + 2]
        self.cmd, self.log = cmd, log
        self.cwd = work / "driver"
        self.cwd.mkdir(parents=True, exist_ok=True)
        self.env = submit_env(work, self.package)
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> SubmittedJob:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.cmd, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"spark-submit did not finish in {timeout}s:\n{self.tail()}") from None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            kill_tree(self.proc.pid)
            self.proc.wait(30)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self, n: int = 6000) -> str:
        return self.text()[-n:]

    def summary(self) -> dict[str, Any]:
        """The job's JSON summary line (the jobs print one when they are done)."""
        line = next((x for x in self.text().splitlines() if x.startswith('{"job"')), None)
        assert line is not None, f"no summary line in the driver output:\n{self.tail()}"
        return json.loads(line)


_TASK = re.compile(r"Executor: (Running|Finished) task (\d+)\.(\d+) in stage (\d+)\.(\d+)")


def executor_tasks(cluster: StandaloneCluster, worker: int) -> tuple[set[Task], set[Task]]:
    """Tasks (stage, stage attempt, index, attempt) that worker ``worker``'s executors started and
    finished, from the executors' stderr in the worker's work dir (executors log at INFO)."""
    started: set[Task] = set()
    finished: set[Task] = set()
    for log in (cluster.work / f"worker{worker}" / "work").glob("app-*/*/stderr"):
        for what, index, attempt, stage, stage_attempt in _TASK.findall(log.read_text(errors="replace")):
            task = (int(stage), int(stage_attempt), int(index), int(attempt))
            (started if what == "Running" else finished).add(task)
    return started, finished


def lost_and_rerun(cluster: StandaloneCluster, killed: int, survivor: int) -> tuple[set[Task], set[Task]]:
    """Tasks the killed worker started and never finished, and the survivor's later attempts of them."""
    started, finished = executor_tasks(cluster, killed)
    lost = started - finished
    _, done = executor_tasks(cluster, survivor)
    rerun = {t for t in done for s, sa, i, a in lost if t[0] == s and t[2] == i and t[3] > a}
    return lost, rerun
