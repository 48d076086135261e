"""End-to-end throughput: confluent-kafka produces N 1 KiB records to a 3-partition topic, then consumes them.

    .venv/bin/python benchmarks/produce_consume.py [--records N] [--size BYTES] [--idempotent]
                                                   [--compression none|gzip|snappy|lz4|zstd]
                                                   [--bootstrap HOST:PORT] [--out FILE]

Without --bootstrap a kbroker subprocess is started in a temp dir (tests.helpers.broker_proc) and its
CPU time per phase is reported too. Producer: acks=all, linger.ms=5, batch.size=1 MiB, no compression
(--compression picks a codec; values are then distinct compressible text, see ``record_values``, else
random bytes).
Consumer: assign() all partitions from offset 0 (no consumer group). Prints records/s and MB/s
(MB = 10^6 bytes of record values) and appends one row per run to benchmarks/results/produce_consume.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from lib_workloads import record_values  # noqa: E402  (benchmarks/ is the script directory)

from tests.helpers.broker_proc import BrokerProcess  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "produce_consume.md"
PARTITIONS = 3
TABLE_HEADER = """# produce_consume benchmark

`benchmarks/produce_consume.py`: confluent-kafka {lib} producer (acks=all, linger.ms=5, batch.size=1 MiB,
no compression) writes N records to a 3-partition topic, then an assign()-ing consumer reads them all.
MB = 10^6 bytes of record values. "broker CPU" = user+system seconds of the kbroker process during
the phase (only when the benchmark started the broker itself). One row per run, newest last.

| date (UTC) | commit | host | records × size | idempotent | produce rec/s | produce MB/s | broker CPU (produce) | consume rec/s | consume MB/s | broker CPU (consume) |
|---|---|---|---|---|---|---|---|---|---|---|
"""


@dataclass
class Phase:
    records: int
    seconds: float
    value_bytes: int
    broker_cpu: float | None

    @property
    def rate(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.value_bytes / self.seconds / 1e6

    def describe(self, name: str) -> str:
        cpu = "" if self.broker_cpu is None else f", broker CPU {self.broker_cpu:.1f} s"
        return (f"{name}: {self.records} records in {self.seconds:.2f} s = {self.rate:,.0f} records/s, "
                f"{self.mb_per_s:.1f} MB/s{cpu}")


def cpu_seconds(pid: int | None) -> float | None:
    """user+system CPU time of a process, from /proc (None if unknown)."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_delta(pid: int | None, before: float | None) -> float | None:
    after = cpu_seconds(pid)
    return None if after is None or before is None else after - before


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)


def produce(bootstrap: str, topic: str, n: int, size: int, idempotent: bool, pid: int | None,
            compression: str = "none") -> Phase:
    errors: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(str(err))

    p = Producer({
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": 5,
        "batch.size": 1 << 20,
        "compression.type": compression,
        "enable.idempotence": idempotent,
        "queue.buffering.max.messages": 1_000_000,
        "delivery.report.only.error": True,  # keep Python callbacks out of the measured loop
        "on_delivery": on_delivery,
    })
    values = record_values(size, compression)
    nv = len(values)
    value = values[0]
    # Warm-up: connection, metadata and (idempotent) producer id, outside the measurement.
    p.produce(topic, value=value)
    assert p.flush(30) == 0 and not errors, errors
    cpu0 = cpu_seconds(pid)
    t0 = time.perf_counter()
    for i in range(n):
        value = values[i % nv]
        try:
            p.produce(topic, value=value)
        except BufferError:
            p.poll(0.01)
            p.produce(topic, value=value)
        if i % 10_000 == 0:
            p.poll(0)
    remaining = p.flush(300)
    seconds = time.perf_counter() - t0
    if remaining or errors:
        raise SystemExit(f"produce failed: {remaining} undelivered, errors {errors[:5]}")
    return Phase(n, seconds, n * size, cpu_delta(pid, cpu0))


def consume(bootstrap: str, topic: str, expected: int, size: int, pid: int | None) -> Phase:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused", "enable.auto.commit": False,
                  "enable.partition.eof": False})
    got = 0
    cpu0 = cpu_seconds(pid)
    t0 = time.perf_counter()
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 300
        while got < expected and time.monotonic() < deadline:
            for msg in c.consume(num_messages=10_000, timeout=1.0):
                err = msg.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    raise SystemExit(f"consume error: {err}")
                if err is None:
                    got += 1
    finally:
        seconds = time.perf_counter() - t0
        c.close()
    if got < expected:
        raise SystemExit(f"consumed only {got} of {expected} records")
    return Phase(got, seconds, got * size, cpu_delta(pid, cpu0))


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or "-"
    except OSError:
        return "-"


def record_result(path: Path, args: argparse.Namespace, prod: Phase, cons: Phase) -> None:
    import confluent_kafka

    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_text(TABLE_HEADER.format(lib=f"{confluent_kafka.__version__} / librdkafka "
                                                 f"{confluent_kafka.libversion()[0]}"))
    host = f"{platform.machine()} {os.cpu_count()} cpu, py{platform.python_version()}"
    if args.bootstrap:
        host += f", external broker {args.bootstrap}"

    def cpu(phase: Phase) -> str:
        return "-" if phase.broker_cpu is None else f"{phase.broker_cpu:.1f} s"

    row = (f"| {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} | {git_commit()} | {host} | "
           f"{args.records:,} × {args.size} B{'' if args.compression == 'none' else ', ' + args.compression} | "
           f"{'yes' if args.idempotent else 'no'} | "
           f"{prod.rate:,.0f} | {prod.mb_per_s:.1f} | {cpu(prod)} | {cons.rate:,.0f} | {cons.mb_per_s:.1f} | "
           f"{cpu(cons)} |\n")
    with path.open("a") as f:
        f.write(row)


def run(args: argparse.Namespace, bootstrap: str, pid: int | None) -> tuple[Phase, Phase]:
    topic = f"bench-{int(time.time() * 1000)}"
    create_topic(bootstrap, topic)
    prod = produce(bootstrap, topic, args.records, args.size, args.idempotent, pid, args.compression)
    print(prod.describe("produce"), flush=True)
    cons = consume(bootstrap, topic, args.records + 1, args.size, pid)  # +1: the warm-up record
    print(cons.describe("consume"), flush=True)
    return prod, cons


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024, help="record value size in bytes")
    ap.add_argument("--idempotent", action="store_true", help="enable.idempotence=true on the producer")
    ap.add_argument("--compression", default="none", choices=("none", "gzip", "snappy", "lz4", "zstd"),
                    help="producer compression.type (values become distinct compressible text)")
    ap.add_argument("--bootstrap", help="use this running broker instead of starting a kbroker")
    ap.add_argument("--out", type=Path, default=RESULTS, help="markdown file to append the result row to")
    ap.add_argument("--no-record", action="store_true", help="print only, do not write the results file")
    args = ap.parse_args()

    if args.bootstrap:
        prod, cons = run(args, args.bootstrap, None)
    else:
        with tempfile.TemporaryDirectory(prefix="kbroker-bench-") as tmp:
            broker = BrokerProcess(Path(tmp) / "data", overrides={"num.partitions": str(PARTITIONS)})
            broker.start()
            try:
                prod, cons = run(args, broker.bootstrap, broker.proc.pid if broker.proc else None)
            except BaseException:
                print(broker.log_tail(), file=sys.stderr)
                raise
            finally:
                broker.stop()
                broker.kill()
    if not args.no_record:
        record_result(args.out, args, prod, cons)
        print(f"appended to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
