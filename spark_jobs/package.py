"""Build the Python package that ships the kbroker data source and jobs to Spark executors.

On a Spark cluster the executors do not share the driver's checkout: the code must travel with the
application. ``build(out_dir)`` writes

* ``kbroker_spark.zip`` — ``spark_jobs/``, ``protocol/`` and every other first-party package they
  import (found by walking their imports), for ``spark-submit --py-files``. Third-party
  dependencies (pyspark, pyarrow, confluent-kafka, kafka-python) are expected in the executors'
  Python, like any PySpark dependency that is not pure Python;
* ``run_job.py`` — a launcher for spark-submit's primary resource, which must be a file:
  ``spark-submit ... run_job.py spark_jobs.uppercase --bootstrap ...`` runs that module as
  ``__main__`` from the zip, so the driver does not need the checkout either.

``digest()`` hashes the ``spark_jobs`` sources as they were imported (from a directory or from the
zip); the driver compares its own with the executors' (spark_jobs/executor_check.py), so executors
running some other copy of the code are caught instead of silently used.

    python -m spark_jobs.package --out dist/kbroker-spark
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.resources
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
ZIP_NAME = "kbroker_spark.zip"
LAUNCHER_NAME = "run_job.py"
# Always shipped: the data source and jobs, and the project's protocol client (two-phase commit).
ROOTS = ("spark_jobs", "protocol")

LAUNCHER = '''"""spark-submit entry point: run_job.py <module> [args...] runs a module of the shipped zip as __main__."""
import runpy
import sys

if len(sys.argv) < 2:
    sys.exit("usage: run_job.py <module, e.g. spark_jobs.uppercase> [job arguments]")
module = sys.argv.pop(1)  # run_module sets argv[0] to the module's path in the zip
runpy.run_module(module, run_name="__main__", alter_sys=True)
'''


def _first_party(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}


def _imports(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def packages(root: Path = REPO_ROOT) -> list[str]:
    """ROOTS plus the first-party packages they import, transitively (tests and benchmarks never)."""
    local = _first_party(root) - {"tests", "benchmarks"}
    todo, found = [r for r in ROOTS if r in local], set()
    while todo:
        pkg = todo.pop()
        if pkg in found:
            continue
        found.add(pkg)
        for f in (root / pkg).rglob("*.py"):
            todo.extend(n for n in _imports(f.read_text()) & local if n not in found)
    return sorted(found)


def _files(root: Path, pkg: str) -> list[Path]:
    # No compiled extensions: a module inside a zip cannot be one (zipimport loads only Python), and
    # a build of this machine would make the zip's bytes depend on it. Their importers fall back to
    # Python where they are missing (storage.record_validation, spark_jobs.raw_reader, raw_writer).
    return sorted(p for p in (root / pkg).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo", ".so"))


def build(out_dir: Path, root: Path = REPO_ROOT) -> Path:
    """Write ``<out_dir>/kbroker_spark.zip`` and ``<out_dir>/run_job.py``; returns the zip's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / ZIP_NAME
    tmp = target.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for pkg in packages(root):
            for f in _files(root, pkg):
                # A fixed timestamp: the same sources give the same zip bytes.
                info = zipfile.ZipInfo(f.relative_to(root).as_posix(), date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, f.read_bytes())
    tmp.replace(target)
    (out_dir / LAUNCHER_NAME).write_text(LAUNCHER)
    return target


def digest() -> str:
    """sha256 over the ``spark_jobs`` modules as imported here (directory or zip), by name."""
    h = hashlib.sha256()
    pkg = importlib.resources.files("spark_jobs")
    for entry in sorted((e for e in pkg.iterdir() if e.name.endswith(".py")), key=lambda e: e.name):
        h.update(entry.name.encode() + b"\0" + entry.read_bytes() + b"\0")
    return h.hexdigest()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(REPO_ROOT / "dist" / "kbroker-spark"),
                   help="output directory (default %(default)s)")
    args = p.parse_args(argv)
    out = build(Path(args.out))
    print(f"{out}  ({', '.join(packages())})\n{out.parent / LAUNCHER_NAME}")


if __name__ == "__main__":
    main()
