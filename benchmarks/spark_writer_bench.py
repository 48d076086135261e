"""The Spark sink's task transaction outside Spark: the raw writer against librdkafka's producer.

    .venv/bin/python benchmarks/spark_writer_bench.py [--records 1000000] [--size 100] [--rounds 3]
                                                      [--task-rows 30000] [--tasks 10] [--out FILE]
                                                      [--compression none|gzip|snappy|lz4|zstd] [--headers N]

Starts a kbroker subprocess (2-partition topics) and drives ``spark_jobs.sink.KBrokerStreamWriter``
as a Spark task would, with the sink option ``rawWriter=true`` (spark_jobs/raw_writer.py) and
``false`` (a librdkafka ``produce()`` per row), alternating, ``--rounds`` times:

- one transaction of ``--records`` rows of ``--size`` B (Arrow batches of 10,000 keyless rows, no
  commit log): rows/s and the writer process's CPU per row (its threads included: librdkafka's or
  the raw writer's event loop);
- ``--tasks`` micro-batch tasks of ``--task-rows`` rows each on one transactional id, as
  consecutive micro-batches of one Spark partition (set-up, rows, commit marker, commit): the
  median milliseconds of a task's set-up and of its write.

``--compression`` sets the sink option ``kafka.compression.type`` for both writers; ``--headers N``
adds a headers column (Spark's array<struct<key, value>>) with N headers on every row.

Prints every run and the medians, and writes them to ``--out`` (default
benchmarks/results/spark_writer_bench.md). Every loop is bounded by its counts.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT), str(ROOT / "tests" / "spark")]

import pyarrow as pa  # noqa: E402
from kafka_util import create_topic, read_all  # noqa: E402
from lib_paired import commit_of  # noqa: E402
from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType  # noqa: E402

from spark_jobs import sink  # noqa: E402
from tests.helpers.broker_proc import BrokerProcess  # noqa: E402

SCHEMA = StructType([StructField("key", BinaryType()), StructField("value", StringType())])
HEADERS_SCHEMA = StructType([*SCHEMA.fields, StructField("headers", ArrayType(StructType(
    [StructField("key", StringType()), StructField("value", BinaryType())])))])
BATCH_ROWS = 10_000


def _batch(size: int, headers: int = 0) -> pa.RecordBatch:
    values = pa.array([f"{i:0{size}d}"[-size:] for i in range(BATCH_ROWS)], pa.string())
    columns = [pa.array([None] * BATCH_ROWS, pa.binary()), values]
    if not headers:
        return pa.record_batch(columns, names=["key", "value"])
    row = [{"key": f"header-{j}", "value": b"%08d" % j} for j in range(headers)]
    kind = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    return pa.record_batch([*columns, pa.array([row] * BATCH_ROWS, kind)], names=["key", "value", "headers"])


class _Started:  # what KBrokerStreamWriter.write hands write_micro_batch: the set-up's result
    def __init__(self, value: sink._Setup) -> None:
        self.value = value

    def result(self) -> sink._Setup:
        return self.value


def _options(bootstrap: str, topic: str, raw: str, compression: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, "topic": topic, "rawWriter": raw,
            "kafka.compression.type": compression}


def one_transaction(bootstrap: str, topic: str, raw: str, records: int, size: int,
                    compression: str = "none", headers: int = 0) -> dict[str, float]:
    w = sink.KBrokerStreamWriter(_options(bootstrap, topic, raw, compression), HEADERS_SCHEMA if headers else SCHEMA)
    batch = _batch(size, headers)
    t0, c0 = time.monotonic(), time.process_time()
    report = w.write_transaction(iter([batch] * (records // BATCH_ROWS)), transactional_id=f"{topic}-tx",
                                 batch_id=None, partition=0, attempt=0, commit_log=None)
    wall, cpu = time.monotonic() - t0, time.process_time() - c0
    return {"rows_per_s": report.records / wall, "cpu_us_per_row": cpu / report.records * 1e6}


def micro_batches(bootstrap: str, topic: str, raw: str, tasks: int, rows: int, size: int,
                  compression: str = "none", headers: int = 0) -> dict[str, float]:
    w = sink.KBrokerStreamWriter(_options(bootstrap, topic, raw, compression), HEADERS_SCHEMA if headers else SCHEMA)
    batch = _batch(size, headers)
    setups, writes = [], []
    for batch_id in range(tasks):
        t0 = time.monotonic()
        started = w.start_micro_batch(query_id=topic, batch_id=batch_id, partition=0).result()
        t1 = time.monotonic()
        parts = [batch] * (rows // BATCH_ROWS)
        w.write_micro_batch(iter(parts), query_id=topic, batch_id=batch_id, partition=0, attempt=0,
                            started=_Started(started))  # type: ignore[arg-type]
        setups.append(t1 - t0)
        writes.append(time.monotonic() - t1)
    return {"setup_ms": statistics.median(setups[1:]) * 1000, "write_ms": statistics.median(writes[1:]) * 1000}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--task-rows", type=int, default=30_000)
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--out", default=str(HERE / "results" / "spark_writer_bench.md"))
    ap.add_argument("--compression", default="none", choices=("none", "gzip", "snappy", "lz4", "zstd"))
    ap.add_argument("--headers", type=int, default=0, help="headers per row (a headers column)")
    args = ap.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"true": [], "false": []}
    with tempfile.TemporaryDirectory(prefix="spark-writer-bench-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", overrides={"num.partitions": "2"})
        broker.start()
        try:
            for rnd in range(args.rounds):
                for raw in ("true", "false"):
                    topic = f"w-{raw}-{rnd}"
                    create_topic(broker.bootstrap, topic, partitions=2)
                    res = one_transaction(broker.bootstrap, topic, raw, args.records, args.size, args.compression,
                                          args.headers)
                    res |= micro_batches(broker.bootstrap, f"{topic}-mb", raw, args.tasks, args.task_rows, args.size,
                                         args.compression, args.headers)
                    if len(read_all(broker.bootstrap, topic)) != args.records // BATCH_ROWS * BATCH_ROWS:
                        raise SystemExit(f"{topic}: committed rows do not match")
                    runs[raw].append(res)
                    print(f"round {rnd + 1} rawWriter={raw}: {res['rows_per_s']:,.0f} rows/s, "
                          f"{res['cpu_us_per_row']:.2f} µs CPU/row; task of {args.task_rows:,} rows: set-up "
                          f"{res['setup_ms']:.1f} ms, write {res['write_ms']:.1f} ms", flush=True)
        finally:
            broker.stop()
    lines = [f"## {datetime.now():%Y-%m-%d %H:%M} {commit_of(ROOT)}: {args.records:,} × {args.size} B, "
             f"tasks of {args.task_rows:,} rows, compression {args.compression}, {args.headers} headers per row, "
             f"{args.rounds} rounds, medians", "",
             "| writer | rows/s | CPU µs/row | task set-up ms | task write ms |", "| --- | ---: | ---: | ---: | ---: |"]
    for raw, label in (("true", "raw writer"), ("false", "librdkafka")):
        med = {k: statistics.median(r[k] for r in runs[raw]) for k in runs[raw][0]}
        lines.append(f"| {label} | {med['rows_per_s']:,.0f} | {med['cpu_us_per_row']:.2f} | {med['setup_ms']:.1f} | "
                     f"{med['write_ms']:.1f} |")
    text = "\n".join(lines) + "\n\n"
    print(text)
    out = Path(args.out)
    if not out.exists():
        out.write_text("# Spark sink writer, outside Spark (benchmarks/spark_writer_bench.py)\n\n")
    with out.open("a") as f:
        f.write(text)


if __name__ == "__main__":
    main()
