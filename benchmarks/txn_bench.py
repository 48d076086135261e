"""Transaction throughput: transactional commits/s and consume-transform-produce records/s (confluent-kafka).

    .venv/bin/python benchmarks/txn_bench.py [--transactions N] [--ctp-records N] [--ctp-batch N]
                                             [--bootstrap HOST:PORT] [--out FILE] [--no-record] [--no-warm-up]

Phase 1 (commits): one transactional producer runs N transactions of 10 records (100 B values)
spread over 4 partitions: begin, produce, commit_transaction (which waits for EndTxn, i.e. the
PrepareCommit write; markers and CompleteCommit follow asynchronously on the broker).
Phase 2 (consume-transform-produce): a 4-partition input of --ctp-records records is read by a
group member; each poll of up to --ctp-batch records becomes one transaction that writes the
transformed records to a 4-partition output and commits the input offsets with
send_offsets_to_transaction (group metadata form). Measured from the first records polled (the
group join is not counted) until every input offset is committed.

Before the phases, ``warm_up`` makes the broker create its internal topics (``__transaction_state``
by a transactional producer, ``__consumer_offsets`` by a group's offset lookup) and waits until the
broker is idle again, so that neither phase pays for that one-off creation (50 partitions each,
whose first fsyncs kbroker's flusher runs up to a second later, in an executor): the phases
measure a running broker, as the group join is already left out of the CTP clock. ``--no-warm-up``
measures a fresh broker instead.

Without --bootstrap a kbroker subprocess is started in a temp dir (tests.helpers.broker_proc) and
its CPU time per phase is reported. Prints the numbers and appends a row to
benchmarks/results/txn_bench.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from benchmarks.produce_consume import cpu_delta, cpu_seconds, git_commit  # noqa: E402
from tests.helpers.broker_proc import BrokerProcess  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "txn_bench.md"
PARTITIONS = 4
RECORDS_PER_TXN = 10
VALUE_SIZE = 100
TIMEOUT = 60
TABLE_HEADER = """# txn_bench

`benchmarks/txn_bench.py`, confluent-kafka {lib}, single kbroker on the same host.
**commits/s**: one transactional producer, each transaction = 10 records × 100 B over 4 partitions,
begin → produce → commit_transaction (latency = commit_transaction call). **CTP**: consume-transform-produce,
one group member + one transactional producer, input 4 partitions, each poll (≤ batch records) is one
transaction with send_offsets_to_transaction; records/s from the first polled records (after the group
join) until every input offset is committed.
"broker CPU" = user+system seconds of the kbroker process in the phase (only when the benchmark started it).
One row per run, newest last.

| date (UTC) | commit | host | transactions | commits/s | commit p50 / p99 ms | broker CPU (commits) | CTP records | CTP batch | CTP records/s | CTP txn/s | broker CPU (CTP) |
|---|---|---|---|---|---|---|---|---|---|---|---|
"""


@dataclass
class CommitPhase:
    transactions: int
    seconds: float
    latencies_ms: list[float]
    broker_cpu: float | None

    @property
    def rate(self) -> float:
        return self.transactions / self.seconds

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def describe(self) -> str:
        cpu = "" if self.broker_cpu is None else f", broker CPU {self.broker_cpu:.2f} s"
        return (f"commits: {self.transactions} transactions × {RECORDS_PER_TXN} records over {PARTITIONS} "
                f"partitions in {self.seconds:.2f} s = {self.rate:,.0f} commits/s "
                f"({self.rate * RECORDS_PER_TXN:,.0f} records/s), commit latency p50 {self.percentile(0.5):.1f} ms "
                f"p99 {self.percentile(0.99):.1f} ms (mean {statistics.fmean(self.latencies_ms):.1f}){cpu}")


@dataclass
class CtpPhase:
    records: int
    transactions: int
    seconds: float
    broker_cpu: float | None

    def describe(self, batch: int) -> str:
        cpu = "" if self.broker_cpu is None else f", broker CPU {self.broker_cpu:.2f} s"
        return (f"consume-transform-produce: {self.records} records in {self.transactions} transactions "
                f"(≤ {batch} per transaction) in {self.seconds:.2f} s = {self.records / self.seconds:,.0f} "
                f"records/s, {self.transactions / self.seconds:,.1f} txn/s{cpu}")


def create_topics(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names]).values():
        f.result(TIMEOUT)


def warm_up(bootstrap: str, topic: str, pid: int | None, idle_timeout: float = 15.0) -> None:
    """Have the broker create ``__transaction_state`` and ``__consumer_offsets`` (one transaction,
    one group offset lookup), then wait until its CPU use settles: without a pid, 2 s (kbroker's
    flusher looks every second)."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-warm-up-{topic}", "linger.ms": 0})
    p.init_transactions(TIMEOUT)
    p.begin_transaction()
    p.produce(topic, value=b"warm-up", partition=0)
    p.commit_transaction(TIMEOUT)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-warm-up-{topic}", "enable.auto.commit": False})
    try:
        c.committed([TopicPartition(topic, 0)], timeout=TIMEOUT)  # FindCoordinator(GROUP) + OffsetFetch
    finally:
        c.close()
    if pid is None:
        time.sleep(2)
        return
    deadline = time.monotonic() + idle_timeout
    last = cpu_seconds(pid)
    quiet = 0
    while time.monotonic() < deadline and quiet < 3:  # three 0.5 s slices with < 10 ms of broker CPU each
        time.sleep(0.5)
        now = cpu_seconds(pid)
        quiet = quiet + 1 if now is not None and last is not None and now - last < 0.01 else 0
        last = now


def bench_commits(bootstrap: str, topic: str, n: int, pid: int | None) -> CommitPhase:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-commits-{topic}", "linger.ms": 0})
    p.init_transactions(TIMEOUT)
    value = os.urandom(VALUE_SIZE)

    def one() -> None:
        p.begin_transaction()
        for i in range(RECORDS_PER_TXN):
            p.produce(topic, value=value, partition=i % PARTITIONS)
        p.commit_transaction(TIMEOUT)

    for _ in range(5):  # warm-up: connections, AddPartitionsToTxn paths, first segment writes
        one()
    latencies: list[float] = []
    cpu0 = cpu_seconds(pid)
    t0 = time.perf_counter()
    for _ in range(n):
        t = time.perf_counter()
        one()
        latencies.append((time.perf_counter() - t) * 1000)
    seconds = time.perf_counter() - t0
    return CommitPhase(n, seconds, latencies, cpu_delta(pid, cpu0))


def fill_ctp_input(bootstrap: str, src: str, records: int) -> None:
    """The CTP phase's input: ``records`` × 100 B round-robin over the partitions (not timed)."""
    inp = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                    "queue.buffering.max.messages": records + 1})
    value = os.urandom(VALUE_SIZE)
    for i in range(records):
        inp.produce(src, value=value, partition=i % PARTITIONS)
        if i % 10_000 == 0:
            inp.poll(0)
    assert inp.flush(TIMEOUT) == 0


def bench_ctp(bootstrap: str, src: str, dst: str, records: int, batch: int, pid: int | None, *,
              fill: bool = True) -> CtpPhase:
    """``fill=False``: the input is already there (fill_ctp_input), e.g. for a profiler that must
    see only the transactions."""
    if fill:
        fill_ctp_input(bootstrap, src, records)

    group = f"bench-ctp-{src}"
    # fetch.queue.backoff.ms: librdkafka stops fetching a partition whose local queue holds more than
    # queued.min.messages (100k) and, by default, looks again only 1,000 ms later; a broker fast
    # enough to fill the queue then gets a stall of up to a second in which the application drains
    # it and waits (as lib_workloads' consumers, and docs/operations.md, set it to 10 ms).
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "fetch.queue.backoff.ms": 10})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-ctp-{src}", "linger.ms": 5,
                         "queue.buffering.max.messages": max(100_000, batch * 2)})
    producer.init_transactions(TIMEOUT)
    consumer.subscribe([src])
    done = transactions = 0
    cpu0: float | None = None
    t0 = 0.0
    try:
        deadline = time.monotonic() + 600
        while done < records and time.monotonic() < deadline:
            # At most what is left: a poll for more than the input still holds would wait out its
            # whole timeout for records that never come (the last transaction paid 0.5 s for it).
            msgs = consumer.consume(num_messages=min(batch, records - done), timeout=0.5)
            group_metadata = consumer.consumer_group_metadata()
            good = []
            for m in msgs:
                if m.error() is None:
                    good.append(m)
                elif m.error().code() != KafkaError._PARTITION_EOF:
                    raise SystemExit(f"consume error: {m.error()}")
            if not good:
                continue
            if not transactions:  # the clock starts with the first records, after the group join
                cpu0, t0 = cpu_seconds(pid), time.perf_counter()
            producer.begin_transaction()
            next_offsets: dict[int, int] = {}
            for m in good:
                producer.produce(dst, key=m.key(), value=m.value()[::-1], partition=m.partition())
                next_offsets[m.partition()] = m.offset() + 1
            producer.send_offsets_to_transaction(
                [TopicPartition(src, q, o) for q, o in next_offsets.items()], group_metadata, TIMEOUT)
            producer.commit_transaction(TIMEOUT)
            done += len(good)
            transactions += 1
        seconds = time.perf_counter() - t0
        # Not timed: the group's committed offsets must account for every input record.
        committed = consumer.committed([TopicPartition(src, q) for q in range(PARTITIONS)], timeout=TIMEOUT)
        # Counted from each partition's log start (cluster_bench's topics start at offset 1).
        starts = [consumer.get_watermark_offsets(TopicPartition(src, q), timeout=TIMEOUT)[0] for q in range(PARTITIONS)]
    finally:
        consumer.close()
    if done < records or sum(tp.offset - s for tp, s in zip(committed, starts, strict=True)) != records:
        raise SystemExit(f"consume-transform-produce committed only {done} of {records} records "
                         f"(group offsets {[tp.offset for tp in committed]})")
    return CtpPhase(done, transactions, seconds, cpu_delta(pid, cpu0))


def record_result(path: Path, args: argparse.Namespace, commits: CommitPhase, ctp: CtpPhase) -> None:
    import confluent_kafka

    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_text(TABLE_HEADER.format(lib=f"{confluent_kafka.__version__} / librdkafka "
                                                 f"{confluent_kafka.libversion()[0]}"))
    host = f"{platform.machine()} {os.cpu_count()} cpu, py{platform.python_version()}"
    if args.bootstrap:
        host += f", external broker {args.bootstrap}"

    def cpu(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f} s"

    row = (f"| {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} | {git_commit()} | {host} | "
           f"{commits.transactions:,} | {commits.rate:,.0f} | {commits.percentile(0.5):.1f} / "
           f"{commits.percentile(0.99):.1f} | {cpu(commits.broker_cpu)} | {ctp.records:,} | {args.ctp_batch} | "
           f"{ctp.records / ctp.seconds:,.0f} | {ctp.transactions / ctp.seconds:,.1f} | {cpu(ctp.broker_cpu)} |\n")
    with path.open("a") as f:
        f.write(row)


def run(args: argparse.Namespace, bootstrap: str, pid: int | None) -> tuple[CommitPhase, CtpPhase]:
    stamp = int(time.time() * 1000)
    topic, src, dst = f"txnbench-{stamp}", f"txnbench-in-{stamp}", f"txnbench-out-{stamp}"
    create_topics(bootstrap, topic, src, dst)
    if not args.no_warm_up:
        warm_up(bootstrap, topic, pid)
    commits = bench_commits(bootstrap, topic, args.transactions, pid)
    print(commits.describe(), flush=True)
    ctp = bench_ctp(bootstrap, src, dst, args.ctp_records, args.ctp_batch, pid)
    print(ctp.describe(args.ctp_batch), flush=True)
    return commits, ctp


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transactions", type=int, default=1000, help="transactions in the commits phase")
    ap.add_argument("--ctp-records", type=int, default=200_000, help="input records of the CTP phase")
    ap.add_argument("--ctp-batch", type=int, default=500, help="most records per CTP transaction")
    ap.add_argument("--bootstrap", help="use this running broker instead of starting a kbroker")
    ap.add_argument("--out", type=Path, default=RESULTS, help="markdown file to append the result row to")
    ap.add_argument("--no-record", action="store_true", help="print only, do not write the results file")
    ap.add_argument("--no-warm-up", action="store_true", help="measure a fresh broker: internal topics are "
                    "created (and first fsynced) inside the timed phases")
    args = ap.parse_args()

    if args.bootstrap:
        commits, ctp = run(args, args.bootstrap, None)
    else:
        with tempfile.TemporaryDirectory(prefix="kbroker-txnbench-") as tmp:
            broker = BrokerProcess(Path(tmp) / "data")
            broker.start()
            try:
                commits, ctp = run(args, broker.bootstrap, broker.proc.pid if broker.proc else None)
            except BaseException:
                print(broker.log_tail(), file=sys.stderr)
                raise
            finally:
                broker.stop()
                broker.kill()
    if not args.no_record:
        record_result(args.out, args, commits, ctp)
        print(f"appended to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
