"""The jobs run the way a user runs them: ``python -m spark_jobs.<job> --help`` and ``spark-submit``.

The end-to-end test runs ``uppercase`` under the venv's ``spark-submit`` as a separate process (its
own JVM, driver and Python workers) against a test broker, with ``--available-now`` so the job exits
by itself once the input present at start is processed, and checks the output with a read_committed
consumer: every input record upper-cased, exactly once. Without spark-submit or Java it is skipped
locally and fails in CI, like the other Spark tests (tests.helpers.tools.require_tool).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kafka_util import create_topic, produce, read_all

from tests.helpers.tools import require_tool

REPO_ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    env.update({"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable, "COLUMNS": "200"})
    return env


@pytest.mark.parametrize("job", ["uppercase", "aggregate", "txn_ctp", "demo"])
def test_job_help(job: str) -> None:
    res = subprocess.run([sys.executable, "-m", f"spark_jobs.{job}", "--help"], cwd=REPO_ROOT, env=_env(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage: ")
    assert re.search(r"^\s+--bootstrap BOOTSTRAP\s+kbroker\b.*\(default 127\.0\.0\.1:9092\)", res.stdout, re.M), \
        res.stdout
    if job in ("uppercase", "aggregate"):
        assert re.search(r"^\s+--available-now\s+process what is in the topic now", res.stdout, re.M), res.stdout


def test_uppercase_under_spark_submit_is_exactly_once(broker: Any, tmp_path: Path) -> None:
    spark_submit = Path(sys.executable).parent / "spark-submit"
    require_tool("spark-submit", spark_submit.exists(), f"not next to {sys.executable} (pip install -e '.[spark]')")
    require_tool("java", shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME")),
                 "Spark needs Java 17+ (java not on PATH, JAVA_HOME unset)")
    n = 2000
    create_topic(broker.bootstrap, "cli-in", partitions=2)
    produce(broker.bootstrap, "cli-in", [(i % 2, f"k{i}".encode(), f"msg-{i}".encode()) for i in range(n)])
    cmd = [str(spark_submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
           "--conf", "spark.ui.showConsoleProgress=false", str(REPO_ROOT / "spark_jobs" / "uppercase.py"),
           "--bootstrap", broker.bootstrap, "--input", "cli-in", "--output", "cli-out",
           "--checkpoint", str(tmp_path / "ck"), "--available-now", "--max-offsets-per-trigger", "1500"]
    res = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, f"stdout:\n{res.stdout[-3000:]}\nstderr:\n{res.stderr[-6000:]}"
    # The job prints one JSON summary line when the query has stopped.
    summary = json.loads(next(line for line in res.stdout.splitlines() if line.startswith('{"job"')))
    assert summary["job"] == "uppercase" and summary["input_rows"] == n
    assert summary["batches"] == 2  # 2,000 offsets at most 1,500 per micro-batch
    out = read_all(broker.bootstrap, "cli-out")
    assert len(out) == n
    assert sorted((k, v) for _, _, k, v in out) == sorted((f"k{i}".encode(), f"MSG-{i}".encode())
                                                          for i in range(n))
