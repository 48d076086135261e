"""Micro-batch throughput of the ``uppercase`` Spark job over kbroker (records/s).

    .venv/bin/python benchmarks/spark_bench.py [--records N] [--size BYTES] [--max-per-batch M]
                                               [--master local[2]] [--bootstrap HOST:PORT] [--out FILE]
                                               [--modes exactly-once,2pc,at-least-once] [--conf KEY=VALUE] [--rounds N]

Without --bootstrap a kbroker subprocess is started in a temp dir. N records of BYTES-byte values go
to a 2-partition topic; then the uppercase query (kbroker source -> upper(value) -> kbroker sink) runs
with Trigger.AvailableNow and maxOffsetsPerTrigger=M, once per sink mode: ``exactly-once`` (per-task
transactions with commit markers, the default), ``2pc`` (``exactlyOnce.mode=2pc``: prepared task
transactions the driver commits together, behind a gate; the broker runs with
transaction.two.phase.commit.enable=true) and ``at-least-once`` (``kbroker.sink.exactlyOnce=false``,
idempotent producer) to show what the transactions cost. Ceiling modes time the same query shape
with one side or both replaced by the no-op data source of spark_jobs/noop.py (rows generated in
memory; batches dropped): ``noop-to-sink`` (no-op source -> exactly-once kbroker sink),
``source-to-noop`` (kbroker source -> no-op sink) and ``noop-to-noop`` (the Python Data Source API's
own ceiling on this machine); ``--modes ceiling`` is short for the three. A mode name with ``+rdkafka``
appended (``exactly-once+rdkafka``) runs that mode with the source option ``rawReader=false`` and the
sink option ``rawWriter=false``, i.e. both read and write through librdkafka as before the raw
reader and writer (spark_jobs/raw_reader.py, raw_writer.py); ``+rdkafka-sink`` sets only
``rawWriter=false`` (the raw reader, librdkafka's producer; for ``2pc``, which has no librdkafka
writer, the 2pc producer's row batches instead of the raw writer). Reported per mode: steady-state rate = rows / trigger-execution time summed over every batch but
the first, and end-to-end rate = N / wall time of the query (a small warm-up query runs before both,
so neither pays for Python worker start-up or the JVM's JIT). ``--rounds N`` alternates the modes N
times and reports medians; every run also reports the CPU time per record of all its processes
(``SPARK_BENCH_VERBOSE=1``: split into JVM, Python workers, broker and driver).
Every run checks that the query saw N rows and, for the kbroker sink, with a read_committed consumer
that the output holds exactly N records.
Appends one row per mode to benchmarks/results/spark_bench.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.helpers.broker_proc import BrokerProcess  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "spark_bench.md"
HEADER = """# spark_bench: micro-batch throughput of `uppercase`

`benchmarks/spark_bench.py`: N records (value size as given) in a 2-partition topic; the `uppercase`
streaming query (kbroker source, read_committed -> `upper(value)` -> kbroker sink) runs with
Trigger.AvailableNow and maxOffsetsPerTrigger = M on `local[2]`. *steady rec/s* = rows / summed
trigger-execution time of all batches but the first; *end-to-end rec/s* = N / query wall time (query
start to termination, after a small warm-up query; SparkSession start-up excluded). `exactly-once` = transactional sink with
commit markers (the default); `exactly-once-2pc` = `exactlyOnce.mode=2pc` (batch-atomic); `at-least-once` =
`kbroker.sink.exactlyOnce=false`. Ceiling rows: `noop-to-sink` = a no-op Python data source (rows
generated in memory, spark_jobs/noop.py) -> the exactly-once sink; `source-to-noop` = the kbroker source
-> a no-op sink; `noop-to-noop` = the Python Data Source API's own ceiling. One row per run (with
`--rounds N`: each mode's medians over N alternating rounds), newest last; the load average shows how
busy the machine was. *CPU µs/record* = CPU time of every process under the benchmark (Spark's JVM and
Python workers, the broker) during the query, per record: what other jobs on the machine change least.

| date (UTC) | commit | host | load avg | records × size | per batch | sink | batches | steady rec/s | end-to-end rec/s | CPU µs/record |
|---|---|---|---|---|---|---|---|---|---|---|
"""


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(30)


def produce(bootstrap: str, topic: str, n: int, size: int) -> None:
    create_topic(bootstrap, topic)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "batch.size": 1 << 20,
                  "queue.buffering.max.messages": 1_000_000})
    pad = b"x" * max(0, size - 16)
    for i in range(n):
        while True:
            try:
                p.produce(topic, b"%015d-" % i + pad, b"k%d" % i, partition=i % 2)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0


MODES = {
    "exactly-once": {"kbroker.sink.exactlyOnce": "true"},
    "2pc": {"exactlyOnce.mode": "2pc"},
    "at-least-once": {"kbroker.sink.exactlyOnce": "false"},
}
LABELS = {"2pc": "exactly-once-2pc"}
# Ceiling modes: (source format, sink format, sink options); "kbroker-noop" is spark_jobs/noop.py.
CEILING = {
    "noop-to-sink": ("kbroker-noop", "kbroker", MODES["exactly-once"]),
    "source-to-noop": ("kbroker", "kbroker-noop", {}),
    "noop-to-noop": ("kbroker-noop", "kbroker-noop", {}),
}
# "<mode>+rdkafka": the same mode with the kbroker source and sink on librdkafka only (rawReader=false,
# rawWriter=false), to compare with the raw reader and writer in one run; "<mode>+rdkafka-sink": only
# the sink on librdkafka.
RDKAFKA = "+rdkafka"
RDKAFKA_SINK = "+rdkafka-sink"
ALL_MODES = [*MODES, *CEILING]
WARMUP_RECORDS = 50_000


def _category(pid: int) -> str:
    """Which part of the run a process is: the broker, Spark's JVM, a PySpark Python worker, the driver."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ")
    except OSError:
        return "driver"
    if b"broker serve" in cmd:
        return "broker"
    if b"java" in cmd.split(b" ", 1)[0]:
        return "jvm"
    if b"pyspark" in cmd:
        return "python-workers"
    return "driver"


def tree_cpu_seconds(root: int) -> dict[str, float]:
    """User + system CPU seconds of process ``root`` and its descendants (with their reaped children), by part.

    The run's own CPU cost, which the other jobs on a shared machine do not change: the Spark JVM,
    its Python workers and planners, and the broker are all descendants of this process.
    """
    parents: dict[int, int] = {}
    times: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        pid = int(entry)
        parents[pid] = int(fields[1])
        times[pid] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    total: dict[str, float] = {}
    todo = [root]
    tick = os.sysconf("SC_CLK_TCK")
    while todo:
        pid = todo.pop()
        part = _category(pid)
        total[part] = total.get(part, 0.0) + times.get(pid, 0) / tick
        todo.extend(children.get(pid, ()))
    return total


def run_query(spark: Any, bootstrap: str, src: str, dst: str, checkpoint: str, per_batch: int,
              sink_options: dict[str, str], *, source: str = "kbroker", sink: str = "kbroker",
              noop_rows: int = 0, size: int = 100, raw_reader: bool = True,
              raw_writer: bool = True) -> dict[str, Any]:
    from spark_jobs.uppercase import transform

    df = (spark.readStream.format(source).option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", src).option("startingOffsets", "earliest")
          .option("rows", str(noop_rows)).option("size", str(size))
          .option("rawReader", "true" if raw_reader else "false")
          .option("maxOffsetsPerTrigger", str(per_batch)).load())
    started = time.monotonic()
    cpu0 = tree_cpu_seconds(os.getpid())
    w = (transform(df).writeStream.format(sink).option("kafka.bootstrap.servers", bootstrap)
         .option("topic", dst).option("checkpointLocation", checkpoint).trigger(availableNow=True)
         .option("rawWriter", "true" if raw_writer else "false"))
    for key, value in sink_options.items():
        w = w.option(key, value)
    q = w.start()
    q.awaitTermination()
    wall = time.monotonic() - started
    cpu1 = tree_cpu_seconds(os.getpid())
    split = {part: cpu1[part] - cpu0.get(part, 0.0) for part in cpu1}
    cpu = sum(split.values())
    progress = [p for p in q.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in progress)
    if os.environ.get("SPARK_BENCH_VERBOSE"):
        for p in progress:  # where each micro-batch's time went (latestOffset, addBatch, walCommit, ...)
            print(f"  batch {p['batchId']}: {p['numInputRows']} rows {p['durationMs']}", flush=True)
        print("  CPU µs/record: " + ", ".join(f"{k} {v / max(1, rows) * 1e6:.2f}" for k, v in sorted(split.items())),
              flush=True)
    steady = progress[1:] or progress
    steady_ms = sum(p["durationMs"]["triggerExecution"] for p in steady)
    return {"rows": rows, "batches": len(progress), "wall": wall,
            "steady": sum(p["numInputRows"] for p in steady) / (steady_ms / 1000), "end_to_end": rows / wall,
            "cpu_us": cpu / max(1, rows) * 1e6}


def run_mode(spark: Any, bootstrap: str, src: str, tmp: str, name: str, args: argparse.Namespace,
             rnd: int) -> dict[str, Any]:
    """One query of mode ``name`` over the input topic ``src``, its output checked."""
    dst = f"{src}-out-{name.replace('+', '-')}-{rnd}"
    raw = raw_writer = True
    if name.endswith(RDKAFKA_SINK):
        name, raw_writer = name.removesuffix(RDKAFKA_SINK), False
    elif name.endswith(RDKAFKA):
        name, raw, raw_writer = name.removesuffix(RDKAFKA), False, False
    if name == "2pc":  # the gate needs the output's partitions; a 2pc warm-up too (its own per mode name)
        warm = f"{dst}-warmup"
        for topic in (dst, warm):
            create_topic(bootstrap, topic)
        run_query(spark, bootstrap, f"{src}-warmup", warm, str(Path(tmp) / f"ck-{warm}"), WARMUP_RECORDS // 5,
                  MODES["2pc"], raw_writer=raw_writer)
    if name in CEILING:
        source, sink, options = CEILING[name]
        res = run_query(spark, bootstrap, src, dst, str(Path(tmp) / f"ck-{dst}"), args.max_per_batch,
                        options, source=source, sink=sink, noop_rows=args.records, size=args.size, raw_reader=raw,
                        raw_writer=raw_writer)
    else:
        sink = "kbroker"
        res = run_query(spark, bootstrap, src, dst, str(Path(tmp) / f"ck-{dst}"), args.max_per_batch, MODES[name],
                        raw_reader=raw, raw_writer=raw_writer)
    if res["rows"] != args.records:
        raise SystemExit(f"{name}: the query read {res['rows']} rows, expected {args.records}")
    n_out = count_committed(bootstrap, dst) if sink == "kbroker" else args.records
    if n_out != args.records:
        raise SystemExit(f"{dst}: expected {args.records} output records, found {n_out}")
    return res


def count_committed(bootstrap: str, topic: str) -> int:
    sys.path.insert(0, str(ROOT / "tests" / "spark"))
    from kafka_util import read_all

    return len(read_all(bootstrap, topic))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--max-per-batch", type=int, default=50_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="extra Spark setting for the session (repeatable; for experiments)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the modes this many times, alternating, and report each mode's medians "
                         "(the machine's load drifts between modes; medians of alternating rounds compare better)")
    ap.add_argument("--modes", default="exactly-once,2pc,at-least-once",
                    help=f"comma-separated modes to measure, of {', '.join(ALL_MODES)}, ceiling (= the 3 ceiling "
                         f"modes); a mode with {RDKAFKA} appended reads and writes through librdkafka only "
                         f"(rawReader=false, rawWriter=false), with {RDKAFKA_SINK} only writes")
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    modes = [x for m in modes for x in (CEILING if m == "ceiling" else [m])]
    if unknown := [m for m in modes if m.removesuffix(RDKAFKA_SINK).removesuffix(RDKAFKA) not in ALL_MODES]:
        ap.error(f"unknown modes {unknown}")

    with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp:
        broker = None
        bootstrap = args.bootstrap
        if bootstrap is None:
            broker = BrokerProcess(Path(tmp) / "data", overrides={"num.partitions": "2",
                                                                  "transaction.two.phase.commit.enable": "true"})
            broker.start()
            bootstrap = broker.bootstrap
        try:
            src = f"bench-in-{int(time.time())}"
            t0 = time.monotonic()
            produce(bootstrap, src, args.records, args.size)
            print(f"produced {args.records} records in {time.monotonic() - t0:.1f}s", flush=True)
            from spark_jobs.session import spark_session

            spark = spark_session("kbroker-spark-bench", master=args.master, log_level="ERROR",
                                  conf=dict(c.split("=", 1) for c in args.conf))
            from spark_jobs.noop import NoopDataSource

            spark.dataSource.register(NoopDataSource)
            # Warm-up (JVM code paths, Python workers, commit-log topic creation path) on a small
            # topic, so the first measured mode does not pay for it.
            # 50,000 records: with 2,000 the first mode measured still paid for the JVM's JIT (its CPU
            # per record came out 30-40% above the same mode's later rounds).
            produce(bootstrap, f"{src}-warmup", WARMUP_RECORDS, args.size)
            run_query(spark, bootstrap, f"{src}-warmup", f"{src}-warmup-out", str(Path(tmp) / "ck-warmup"),
                      WARMUP_RECORDS // 5, MODES["exactly-once"])
            results: dict[str, list[dict[str, Any]]] = {}
            for rnd in range(args.rounds):
                for name in modes:
                    res = run_mode(spark, bootstrap, src, tmp, name, args, rnd)
                    print(f"round {rnd + 1}: {LABELS.get(name, name)}: {res['batches']} batches, steady "
                          f"{res['steady']:,.0f} rec/s, end-to-end {res['end_to_end']:,.0f} rec/s ({res['wall']:.1f}s), "
                          f"CPU {res['cpu_us']:.2f} µs/record", flush=True)
                    results.setdefault(name, []).append(res)
            rows = []
            for name in modes:
                runs = results[name]
                res = {"batches": runs[0]["batches"], "steady": statistics.median(r["steady"] for r in runs),
                       "end_to_end": statistics.median(r["end_to_end"] for r in runs),
                       "cpu_us": statistics.median(r["cpu_us"] for r in runs)}
                mode = LABELS.get(name, name)
                if args.rounds > 1:
                    mode = f"{mode} (median of {args.rounds})"
                    print(f"{mode}: steady {res['steady']:,.0f} rec/s, "
                          f"end-to-end {res['end_to_end']:,.0f} rec/s, CPU {res['cpu_us']:.2f} µs/record", flush=True)
                rows.append((mode, res))
            spark.stop()
        finally:
            if broker is not None:
                broker.stop()
                broker.kill()
    write_rows(Path(args.out), args, rows)


def write_rows(path: Path, args: argparse.Namespace, rows: list[tuple[str, dict[str, Any]]]) -> None:
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "?"
    host = f"{platform.machine()} {os.cpu_count()} cpu"
    load = f"{os.getloadavg()[0]:.1f}"
    date = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    if not path.exists():
        path.write_text(HEADER)
    with path.open("a") as f:
        for mode, r in rows:
            f.write(f"| {date} | {commit} | {host} | {load} | {args.records:,} × {args.size} B | "
                    f"{args.max_per_batch:,} | {mode} | {r['batches']} | {r['steady']:,.0f} | "
                    f"{r['end_to_end']:,.0f} | {r['cpu_us']:.2f} |\n")


if __name__ == "__main__":
    main()
