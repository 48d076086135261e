"""Fixtures for the PySpark tests: one small local SparkSession for the whole run, with kbroker registered.

The session is ``local[2,4]`` (2 threads, up to 4 attempts per task so task-retry tests retry),
loopback-bound (SPARK_LOCAL_IP=127.0.0.1), 2 shuffle partitions, no UI. The whole directory is
skipped when the ``spark`` extra (pyspark, pyarrow) is not installed, Spark tests also without Java.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from spark_jobs.session import spark_session

    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java 17+ (java not on PATH, JAVA_HOME unset)")
    session = spark_session("kbroker-tests", log_level="ERROR")
    yield session
    session.stop()


def pytest_configure(config: pytest.Config) -> None:
    # pandas 3 is newer than PySpark's tested range; the Arrow paths used here do not touch pandas.
    config.addinivalue_line("filterwarnings", "ignore:PySpark does not yet fully support pandas:FutureWarning")
