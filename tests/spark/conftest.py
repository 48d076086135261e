"""Fixtures for the PySpark tests: one small local SparkSession for the whole run, with kbroker registered.

The session is ``local[2,4]`` (2 threads, up to 4 attempts per task so task-retry tests retry),
loopback-bound (SPARK_LOCAL_IP=127.0.0.1), 2 shuffle partitions, no UI. When the ``spark`` extra
(pyspark, pyarrow) is not installed every module here is collected as one stand-in test instead of
being imported, and tests needing a SparkSession also need Java: locally those are skipped, in CI
(env CI set) they fail (tests.helpers.tools.require_tool). ``spark_cluster`` is a standalone cluster
(master + 2 workers) for the slow tests of test_spark_standalone.py.
"""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.tools import MissingToolModule, require_tool

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


_MISSING = [m for m in ("pyspark", "pyarrow") if not _importable(m)]


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if not _MISSING:
        return None
    return MissingToolModule.from_parent(parent, path=module_path, tool=_MISSING[0],
                                         why=f"{', '.join(_MISSING)} not installed (pip install -e '.[spark]')")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from spark_jobs.session import spark_session

    require_tool("java", shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME")),
                 "Spark needs Java 17+ (java not on PATH, JAVA_HOME unset)")
    session = spark_session("kbroker-tests", log_level="ERROR")
    yield session
    session.stop()


def pytest_configure(config: pytest.Config) -> None:
    # pandas 3 is newer than PySpark's tested range; the Arrow paths used here do not touch pandas.
    config.addinivalue_line("filterwarnings", "ignore:PySpark does not yet fully support pandas:FutureWarning")


@pytest.fixture
def spark_cluster(tmp_path: Path) -> Iterator[object]:
    """A standalone Spark cluster on 127.0.0.1: a master and two 1-core, 512 MB workers (slow tests).

    Started from the installed PySpark (spark_jobs/standalone.py) under ``tmp_path``; every JVM and
    Python process of it is stopped by pid at teardown, whatever the test did.
    """
    from spark_jobs.standalone import StandaloneCluster

    require_tool("java", shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME")),
                 "Spark needs Java 17+ (java not on PATH, JAVA_HOME unset)")
    cluster = StandaloneCluster(tmp_path / "spark-cluster", workers=2)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
