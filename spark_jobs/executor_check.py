"""Check, before a job starts on a Spark cluster, that the executors run the shipped kbroker code.

On ``local[*]`` the executors are threads of the driver's JVM using the driver's Python, so there
is nothing to check. On a cluster (``spark://``, YARN, Kubernetes) each executor imports
``spark_jobs`` from whatever its Python finds: the zip given to ``--py-files`` (spark_jobs/package.py)
when the application ships it. Without it a job would fail deep inside Spark with a
ModuleNotFoundError while unpickling the data source in some task, after retries; or, worse, an
executor with an older install of the package on its path would silently run other code.
``check(spark)`` runs one tiny task per executor core that imports the package and reports where
it came from and the digest of its sources, and raises ``ShippingError`` with the fix when any
executor cannot import it or has different code.
"""

from __future__ import annotations

import sys
from typing import Any

from pyspark.sql import SparkSession

HINT = ("ship the code with the application: python -m spark_jobs.package --out DIR, then "
        "spark-submit --py-files DIR/kbroker_spark.zip ... (see docs/spark.md, 'Standalone cluster')")


class ShippingError(RuntimeError):
    """The executors cannot import the kbroker data source, or import a different version of it."""


def is_local(master: str) -> bool:
    return master.startswith("local")


def _make_probe() -> Any:
    # Defined inside a function so that cloudpickle ships it by value: unpickling it on an executor
    # must not need spark_jobs, whose absence is what it reports.
    def probe(_: Any) -> Any:
        import os
        import socket
        import sys

        try:
            import spark_jobs
            import spark_jobs.sink
            import spark_jobs.source  # noqa: F401
            from spark_jobs.package import digest

            found = {"file": spark_jobs.__file__, "digest": digest(), "error": None}
        except ImportError as e:
            found = {"file": None, "digest": None, "error": f"{type(e).__name__}: {e}"}
        yield {**found, "host": socket.gethostname(), "pid": os.getpid(), "cwd": os.getcwd(),
               "python": sys.executable, "sys_path": sys.path}

    return probe


def probe_executors(spark: SparkSession, tasks: int | None = None) -> list[dict[str, Any]]:
    """What ``tasks`` tasks (default: one per executor core) find when they import spark_jobs."""
    sc = spark.sparkContext
    n = tasks or max(1, sc.defaultParallelism)
    return sc.parallelize(range(n), n).mapPartitions(_make_probe()).collect()


def check(spark: SparkSession) -> list[dict[str, Any]]:
    """Raise ShippingError unless every probed executor imports spark_jobs with this driver's sources."""
    master = spark.sparkContext.master
    if is_local(master):
        return []
    from spark_jobs.package import digest

    expected = digest()
    reports = probe_executors(spark)
    for r in reports:
        if r["error"] is not None:
            raise ShippingError(
                f"the kbroker data source is not importable on the executors of {master} "
                f"({r['error']}; python {r['python']}, cwd {r['cwd']}, sys.path {r['sys_path']}): {HINT}")
        if r["digest"] != expected:
            raise ShippingError(
                f"the executors of {master} import spark_jobs from {r['file']}, whose sources differ from "
                f"the driver's (digest {r['digest'][:12]} != {expected[:12]}): {HINT}")
    # stderr rather than logging: the jobs leave the root logger at WARNING, and this line is what
    # shows (in a driver log) where the executors' code came from.
    print(f"kbroker: spark_jobs on the executors of {master}: {sorted({r['file'] for r in reports})}",
          file=sys.stderr, flush=True)
    return reports
