"""A small SparkSession with the ``kbroker`` data source registered.

Defaults suit a laptop or CI box: ``local[2,4]`` (two threads; up to 4 attempts per task, because
plain ``local[2]`` never retries a failed task), few shuffle partitions, no UI. Under spark-submit
the master and other settings given on its command line win. On a cluster master the session
first checks that the executors import the shipped ``spark_jobs`` (spark_jobs/executor_check.py).
"""

from __future__ import annotations

import os
import sys
import warnings

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[2,4]"


def _prepare_environment() -> None:
    # Bind the driver to loopback (tests and single-host demos; no hostname lookups), and make
    # executors' Python workers use this interpreter, which has pyarrow and confluent-kafka.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def under_spark_submit() -> bool:
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_session(app_name: str = "kbroker", *, master: str | None = None, shuffle_partitions: int = 2,
                  conf: dict[str, str] | None = None, log_level: str = "WARN") -> SparkSession:
    _prepare_environment()
    # pandas 3 is newer than PySpark's tested range; the Arrow paths used here do not touch pandas.
    warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas", FutureWarning)
    builder = SparkSession.builder.appName(app_name)
    if master is not None or not under_spark_submit():
        builder = builder.master(master or os.environ.get("KBROKERTEST_SPARK_MASTER", DEFAULT_MASTER))
        settings = {
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": str(shuffle_partitions),
            "spark.default.parallelism": "2",
            "spark.driver.memory": "1g",
            "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
            "spark.python.worker.reuse": "true",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.streaming.numRecentProgressUpdates": "1000",
            **(conf or {}),
        }
        for key, value in settings.items():
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    register(spark)
    # On a cluster, fail now and say why if the executors lack the shipped package (--py-files).
    from .executor_check import check

    check(spark)
    return spark


def register(spark: SparkSession) -> None:
    """Make ``format("kbroker")`` available in ``spark``."""
    from .source import KBrokerDataSource

    spark.dataSource.register(KBrokerDataSource)
