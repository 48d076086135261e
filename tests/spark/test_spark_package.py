"""The shipped package (spark_jobs/package.py) works without the checkout: what an executor sees.

The zip is built into a temporary directory and imported by a Python that has the third-party
dependencies but not the editable kbroker install (spark_jobs.standalone.executor_python), in a
subprocess whose working directory and PYTHONPATH do not contain the checkout: the data source
imports from the zip and has the driver's sources; without the zip the import fails instead of
falling back to the checkout. No JVM here; the cluster runs are in test_spark_standalone.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from spark_jobs.package import build, digest, packages
from spark_jobs.standalone import executor_python

REPO_ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
import spark_jobs, spark_jobs.sink
from spark_jobs.source import KBrokerDataSource
from spark_jobs.package import digest
print(json.dumps({"file": spark_jobs.__file__, "name": KBrokerDataSource.name(), "digest": digest(),
                  "sys_path": sys.path}))
"""


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("shipped")
    zip_path = build(base / "package")
    return zip_path, executor_python(base / "executor-python")


def _run(python: Path, args: list[str], cwd: Path, pythonpath: Path | None) -> subprocess.CompletedProcess[str]:
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_zip_holds_the_data_source_and_what_it_imports(shipped: tuple[Path, Path]) -> None:
    zip_path, _ = shipped
    assert {"spark_jobs", "protocol"} <= set(packages())
    names = zipfile.ZipFile(zip_path).namelist()
    assert {"spark_jobs/__init__.py", "spark_jobs/source.py", "spark_jobs/sink.py", "spark_jobs/txn_ctp.py",
            "protocol/__init__.py"} <= set(names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc") or n.startswith("tests/")]
    assert (zip_path.parent / "run_job.py").is_file()


def test_data_source_imports_from_the_zip_without_the_checkout(shipped: tuple[Path, Path], tmp_path: Path) -> None:
    zip_path, python = shipped
    res = _run(python, ["-c", PROBE], tmp_path, zip_path)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["file"] == f"{zip_path}/spark_jobs/__init__.py"
    assert got["name"] == "kbroker"
    assert got["digest"] == digest()  # the same sources as the checkout this test runs from
    assert not [p for p in got["sys_path"] if p.startswith(str(REPO_ROOT)) and ".venv" not in p], got["sys_path"]


def test_without_the_zip_the_import_fails(shipped: tuple[Path, Path], tmp_path: Path) -> None:
    """The executors' Python does not fall back to the checkout (the editable install's finder)."""
    _, python = shipped
    res = _run(python, ["-c", PROBE], tmp_path, None)
    assert res.returncode != 0
    assert "ModuleNotFoundError: No module named 'spark_jobs'" in res.stderr


def test_launcher_runs_a_job_module_from_the_zip(shipped: tuple[Path, Path], tmp_path: Path) -> None:
    zip_path, python = shipped
    res = _run(python, [str(zip_path.parent / "run_job.py"), "spark_jobs.uppercase", "--help"], tmp_path, zip_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage: uppercase.py") and "--input INPUT" in res.stdout
