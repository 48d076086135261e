"""Share groups (KIP-932) against a classic consumer group on one kbroker (issue 27).

    .venv/bin/python benchmarks/share_bench.py [--records 300000] [--size 200] [--partitions 6] [--batch-records 500]
                                               [--consumers 1,3,6] [--lock-ms 2000] [--trials 3] [--quick]

One broker (Kafka's defaults, except share-group heartbeat/lock minimums lowered so a run takes
seconds), one topic of ``--partitions`` partitions filled with ``--records`` records up front.
Then, for each consumer count: a fresh share group of that many confluent-kafka ShareConsumer
processes (implicit acknowledgement, librdkafka's max.poll.records) and a fresh classic group
(``group.protocol=classic``, auto-commit) of as many Consumer processes read the whole topic.
Measured from the first record received to the last: records/s, and broker CPU µs per record
(/proc of the broker process over the same window), with the machine's other CPU use and load
average alongside, since on a shared machine they move the figures; also the time from starting
the consumers (joining included). Records are produced in batches of ``--batch-records``: a share
acquisition takes whole batches (MaxRecords is a soft limit), so the batch size sets how much
work the broker does per record.

Redelivery latency after a lock expiry: a share consumer acquires a record and stops (holds its
lock, share.record.lock.duration.ms = ``--lock-ms``); a second consumer of the group waits for
it. Latency = when the second one receives it − (when the first received it + the lock duration):
how late the broker makes an expired record available and delivers it to a waiting member.

Prints a table and writes benchmarks/results/share_bench.{json,md} (``--quick``: under
benchmarks/results/quick/).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from confluent_kafka import Consumer, Producer, ShareConsumer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from lib_meter import machine_busy, process_cpu  # noqa: E402

from tests.helpers.broker_proc import BrokerProcess  # noqa: E402
from tests.helpers.share_clients import read_worker_file, set_group_configs  # noqa: E402

TOPIC = "share-bench"
OVERRIDES = {
    "group.share.heartbeat.interval.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "1000",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
}


def fill(bootstrap: str, records: int, size: int, partitions: int, batch_records: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=partitions)])[TOPIC].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "batch.num.messages": batch_records})
    value = b"x" * size
    for i in range(records):
        p.produce(TOPIC, value=value, partition=i % partitions)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(120) == 0


def _reader(kind: str, bootstrap: str, group: str, count: Any, stop: Any) -> None:
    """One consumer process: counts the records it receives into the shared ``count``."""
    if kind == "share":
        c: Any = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
        c.subscribe([TOPIC])

        def poll() -> list[Any]:
            return c.poll(0.2)
    else:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "classic",
                      "auto.offset.reset": "earliest", "log_level": 3})
        c.subscribe([TOPIC])

        def poll() -> list[Any]:
            return c.consume(num_messages=500, timeout=0.2)
    while not stop.is_set():
        n = sum(1 for m in poll() if m.error() is None)
        if n:
            with count.get_lock():
                count.value += n
    if kind == "share":
        c.commit_sync(10)  # acknowledge the last poll's records
    c.close()


def read_all(kind: str, bootstrap: str, broker_pid: int, consumers: int, records: int) -> dict[str, Any]:
    group = f"{kind}-{consumers}-{time.monotonic_ns()}"
    if kind == "share":
        set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    ctx = mp.get_context("spawn")
    count, stop = ctx.Value("q", 0), ctx.Event()
    procs = [ctx.Process(target=_reader, args=(kind, bootstrap, group, count, stop)) for _ in range(consumers)]
    started = time.perf_counter()
    for p in procs:
        p.start()
    deadline = time.monotonic() + 300
    while count.value == 0 and time.monotonic() < deadline:
        time.sleep(0.002)
    t0, b0, m0, load0 = time.perf_counter(), process_cpu(broker_pid), machine_busy(), os.getloadavg()[0]
    while count.value < records and time.monotonic() < deadline:
        time.sleep(0.002)
    t1, b1, m1 = time.perf_counter(), process_cpu(broker_pid), machine_busy()
    delivered = count.value
    stop.set()
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
    wall = t1 - t0
    broker_cpu = (b1 or 0) - (b0 or 0)
    return {"kind": kind, "consumers": consumers, "records": records, "delivered": delivered,
            "seconds": round(wall, 3), "seconds_from_start": round(t1 - started, 3), "records_per_s": round(records / wall) if wall > 0 else None,
            "broker_cpu_us_per_record": round(broker_cpu / records * 1e6, 1),
            "broker_cores": round(broker_cpu / wall, 2) if wall > 0 else None,
            "other_cores": round(max(0.0, (m1 - m0) - broker_cpu) / wall, 2) if wall > 0 else None,
            "load_avg_1m": round(load0, 2)}


def redelivery_latency(bootstrap: str, lock_ms: int, trials: int, tmp: Path) -> list[float]:
    """Seconds between a record's lock expiring (first receipt + lock) and its receipt by a waiting member."""
    group = f"redeliver-{time.monotonic_ns()}"
    topic = f"{TOPIC}-redeliver"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1)])[topic].result(30)
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest",
                                         "share.record.lock.duration.ms": str(lock_ms)})
    out: list[float] = []
    p = Producer({"bootstrap.servers": bootstrap})
    for trial in range(trials):
        f = tmp / f"holder-{trial}.txt"
        holder = subprocess.Popen([sys.executable, "-m", "tests.helpers.share_clients", "worker", "--bootstrap",
                                   bootstrap, "--group", group, "--topic", topic, "--out", str(f), "--stall-after", "1"],
                                  cwd=ROOT, stderr=subprocess.DEVNULL)
        try:
            time.sleep(3)  # the holder joins and is assigned the partition
            p.produce(topic, value=str(trial).encode())
            p.flush(10)
            deadline = time.monotonic() + 60
            while not read_worker_file(f)[2] and time.monotonic() < deadline:
                time.sleep(0.01)
            received, _, stalled = read_worker_file(f)
            assert stalled and received, "the holder did not receive the record"
            t_first = received[0][4]
            waiter = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
            waiter.subscribe([topic])
            got = None
            while got is None and time.monotonic() < deadline:
                for m in waiter.poll(0.05):
                    if m.error() is None and m.value() == str(trial).encode():
                        got = time.time()
            waiter.commit_sync(10)
            waiter.close()
            assert got is not None, "the record never came back"
            out.append(round(got - (t_first + lock_ms / 1000), 3))
        finally:
            holder.kill()
            holder.wait(10)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--batch-records", type=int, default=500,
                    help="records per produced batch (a share acquisition takes whole batches)")
    ap.add_argument("--consumers", default="1,3,6")
    ap.add_argument("--lock-ms", type=int, default=2000)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="50,000 records, 1 redelivery trial")
    args = ap.parse_args()
    if args.quick:
        args.records, args.trials = 50_000, 1
    counts = [int(x) for x in args.consumers.split(",")]
    with tempfile.TemporaryDirectory(prefix="share-bench-") as tmpd:
        tmp = Path(tmpd)
        b = BrokerProcess(tmp / "data", overrides=OVERRIDES)
        b.start()
        try:
            assert b.proc is not None
            fill(b.bootstrap, args.records, args.size, args.partitions, args.batch_records)
            rows = []
            for n in counts:
                for kind in ("share", "classic"):
                    row = read_all(kind, b.bootstrap, b.proc.pid, n, args.records)
                    rows.append(row)
                    print(f"{kind:7} x{n}: {row['records_per_s']:>8} records/s, broker "
                          f"{row['broker_cpu_us_per_record']:>6} µs CPU/record ({row['broker_cores']} cores), "
                          f"other {row['other_cores']} cores, load {row['load_avg_1m']}, {row['seconds_from_start']} s from start, "
                          f"delivered {row['delivered']}/{row['records']}", flush=True)
            lat = redelivery_latency(b.bootstrap, args.lock_ms, args.trials, tmp)
            print(f"redelivery after lock expiry ({args.lock_ms} ms lock): {lat} s late", flush=True)
        finally:
            b.stop()
    result = {"args": vars(args), "cpu_count": os.cpu_count(), "rows": rows, "redelivery_latency_s": lat,
              "load_avg_end": os.getloadavg()}
    outdir = HERE / "results" / ("quick" if args.quick else "")
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "share_bench.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"# Share groups vs a classic group ({args.records} records of {args.size} B, {args.partitions} partitions)",
             "", "| group | consumers | records/s | broker µs CPU/record | broker cores | other cores | load (1 min) "
             "| s from start |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['kind']} | {r['consumers']} | {r['records_per_s']} | {r['broker_cpu_us_per_record']} | "
                     f"{r['broker_cores']} | {r['other_cores']} | {r['load_avg_1m']} | {r['seconds_from_start']} |")
    lines += ["", f"Redelivery after a lock expiry ({args.lock_ms} ms lock), seconds after the lock's end: {lat}", ""]
    (outdir / "share_bench.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
