"""``kbroker perf produce|consume``: load tests in the spirit of kafka-producer-perf-test.sh and
kafka-consumer-perf-test.sh, with confluent-kafka (librdkafka) as the client.

    kbroker perf produce [-b H:P] --topic T --num-records N [--record-size B] [--throughput R]
                         [--acks -1|0|1] [--producer-props k=v ...] [--producer.config F] [--timeout S]
    kbroker perf consume [-b H:P] --topic T --num-records N (or --messages N) [--group G]
                         [--from-latest] [--timeout S]

``produce`` prints Kafka's progress line every 5 s and its summary line at the end, e.g.
``100000 records sent, 52356.0 records/sec (5.00 MB/sec), 12.30 ms avg latency, 120.00 ms max
latency, 10 ms 50th, 30 ms 95th, 50 ms 99th, 80 ms 99.9th.`` Latency is from ``produce()`` to
the delivery report. ``--throughput`` caps records/s (-1: no cap). ``consume`` prints Kafka's CSV
header and line (start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg,
nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec). Both stop at
``--timeout`` seconds (default 60): the summary of what was done is printed, then one error line,
exit status 1. Payloads are random uppercase letters, as in Kafka's tool. ``produce`` asks for the
topic as a producer does, so the brokers create it when they allow it (auto.create.topics.enable),
as with Kafka's tool. Producer configs come as in Kafka: ``--producer.config FILE`` (a properties
file), under ``--producer-props k=v ...`` (which win; ``bootstrap.servers`` there is where the tool
connects, as Kafka's tool has no other way), Java client names translated for librdkafka
(``buffer.memory``, ``max.request.size``; serializers and ``max.block.ms`` left out with a note).
"""

from __future__ import annotations

import argparse
import random
import string
import sys
import time
from datetime import datetime
from typing import Any, TextIO

from cli.common import (
    CliError,
    add_connection_options,
    check_reachable,
    client_config,
    cluster_metadata,
    error_text,
    java_client_props,
    load_properties,
    parse_key_values,
    producer_topic,
    require_topic,
    run_tool,
)
from cli.progress import progress

PROG = "kbroker perf"
REPORT_EVERY_S = 5.0
MB = 1024 * 1024


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Producer and consumer load tests.")
    sub = p.add_subparsers(dest="command", required=True)
    pr = sub.add_parser("produce", help="like kafka-producer-perf-test")
    pr.add_argument("--topic", required=True)
    pr.add_argument("--num-records", type=int, required=True)
    pr.add_argument("--record-size", type=int, default=100, help="bytes per record value (default 100)")
    pr.add_argument("--throughput", type=float, default=-1, help="max records/s, -1 for no cap (default)")
    pr.add_argument("--acks", default="all", choices=("-1", "all", "0", "1"))
    pr.add_argument("--producer-props", nargs="+", action="extend", metavar="KEY=VALUE",
                    help="producer configs (Kafka's names; they win over --producer.config)")
    pr.add_argument("--producer.config", dest="producer_config", metavar="FILE", help="producer properties file")
    pr.add_argument("--timeout", type=float, default=60, help="give up after this many seconds (default 60)")
    co = sub.add_parser("consume", help="like kafka-consumer-perf-test")
    co.add_argument("--topic", required=True)
    co.add_argument("--num-records", "--messages", dest="num_records", type=int, required=True)
    co.add_argument("--group", help="default: a fresh perf-consumer-NNNNN")
    co.add_argument("--from-latest", action="store_true", help="start at the end instead of the beginning")
    co.add_argument("--consumer-props", nargs="+", action="extend", metavar="KEY=VALUE")
    co.add_argument("--timeout", type=float, default=60, help="give up after this many seconds (default 60)")
    add_connection_options(p, sub)
    return p


def _percentile(sorted_ms: list[float], q: float) -> int:
    if not sorted_ms:
        return 0
    return int(sorted_ms[min(int(len(sorted_ms) * q), len(sorted_ms) - 1)])


class ProduceStats:
    """Kafka's ProducerPerformance.Stats: a window for the 5 s lines, every latency for the summary."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.start = self.window_start = time.monotonic()
        self.latencies: list[float] = []
        self.bytes = 0
        self.window_count = self.window_bytes = 0
        self.window_lat_sum = self.window_lat_max = 0.0
        self.errors: list[str] = []

    def record(self, latency_ms: float, size: int) -> None:
        self.latencies.append(latency_ms)
        self.bytes += size
        self.window_count += 1
        self.window_bytes += size
        self.window_lat_sum += latency_ms
        self.window_lat_max = max(self.window_lat_max, latency_ms)

    def maybe_report(self) -> None:
        now = time.monotonic()
        if now - self.window_start < REPORT_EVERY_S:
            return
        elapsed = now - self.window_start
        n = self.window_count
        self.out.write(f"{n} records sent, {n / elapsed:.1f} records/sec ({self.window_bytes / MB / elapsed:.2f} "
                       f"MB/sec), {self.window_lat_sum / n if n else 0:.1f} ms avg latency, "
                       f"{self.window_lat_max:.1f} ms max latency.\n")
        self.out.flush()
        self.window_start, self.window_count, self.window_bytes = now, 0, 0
        self.window_lat_sum = self.window_lat_max = 0.0

    def summary(self) -> str:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        lat = sorted(self.latencies)
        n = len(lat)
        return (f"{n} records sent, {n / elapsed:.1f} records/sec ({self.bytes / MB / elapsed:.2f} MB/sec), "
                f"{sum(lat) / n if n else 0:.2f} ms avg latency, {lat[-1] if lat else 0:.2f} ms max latency, "
                f"{_percentile(lat, 0.5)} ms 50th, {_percentile(lat, 0.95)} ms 95th, "
                f"{_percentile(lat, 0.99)} ms 99th, {_percentile(lat, 0.999)} ms 99.9th.")


def _produce(args: argparse.Namespace, out: TextIO) -> int:
    from confluent_kafka import Producer

    if args.num_records < 1 or args.record_size < 0:
        raise CliError("--num-records must be at least 1 and --record-size at least 0")
    conf = client_config(args, {"acks": "all" if args.acks == "-1" else args.acks,
                                "message.timeout.ms": max(int(args.timeout * 1000), 1000)})
    if args.producer_config:
        conf.update(java_client_props(load_properties(args.producer_config), f"{PROG} produce"))
    conf.update(java_client_props(_kafka_props(args.producer_props, "--producer-props"), f"{PROG} produce"))
    check_reachable(conf["bootstrap.servers"])
    producer = Producer(conf)
    producer_topic(producer, args.topic)
    payload = "".join(random.choices(string.ascii_uppercase, k=args.record_size)).encode()
    stats = ProduceStats(out)
    deadline = time.monotonic() + args.timeout
    bar = progress(args.num_records, "produce")

    def on_delivery(err: Any, msg: Any, sent_at: float) -> None:
        if err is not None:
            stats.errors.append(error_text(err))
        else:
            stats.record((time.monotonic() - sent_at) * 1000, len(payload))
            bar.update()

    sent = 0
    while sent < args.num_records and time.monotonic() < deadline and not stats.errors:
        if args.throughput > 0:
            ahead = sent / args.throughput - (time.monotonic() - stats.start)
            if ahead > 0:  # throttle: we are ahead of the requested rate
                producer.poll(min(ahead, 0.1))
                continue
        now = time.monotonic()
        try:
            producer.produce(args.topic, payload,
                             on_delivery=lambda err, msg, t=now: on_delivery(err, msg, t))
        except BufferError:  # local queue full: serve delivery reports to drain it
            producer.poll(0.05)
            continue
        sent += 1
        producer.poll(0)
        stats.maybe_report()
    while producer.flush(0.5) and time.monotonic() < deadline and not stats.errors:
        stats.maybe_report()
    bar.close()
    out.write(stats.summary() + "\n")
    if stats.errors:
        raise CliError(f"{len(stats.errors)} record(s) failed: {stats.errors[0]}")
    if len(stats.latencies) < args.num_records:
        raise CliError(f"timed out after {args.timeout:g} s with {len(stats.latencies)} of {args.num_records} "
                       "records acknowledged")
    return 0


def _kafka_props(items: list[str] | None, what: str) -> dict[str, str]:
    """Kafka's perf tools' ``k=v`` list: exactly one '=' per item (ProducerPerformance.readProps)."""
    out = {}
    for item in items or []:
        pieces = item.split("=")
        if len(pieces) != 2 or not pieces[0]:
            raise CliError(f"{what}: invalid property {item!r} (expected KEY=VALUE)")
        out[pieces[0].strip()] = pieces[1].strip()
    return out


def _fmt_time(ts: float) -> str:
    d = datetime.fromtimestamp(ts)
    return d.strftime("%Y-%m-%d %H:%M:%S:") + f"{d.microsecond // 1000:03d}"


def _consume(args: argparse.Namespace, out: TextIO) -> int:
    from confluent_kafka import Consumer

    if args.num_records < 1:
        raise CliError("--num-records must be at least 1")
    conf = client_config(args, {"group.id": args.group or f"perf-consumer-{random.randint(10000, 99999)}",
                                "auto.offset.reset": "latest" if args.from_latest else "earliest",
                                "enable.auto.commit": True})
    conf.update(java_client_props(parse_key_values(args.consumer_props, "--consumer-props"), f"{PROG} consume"))
    check_reachable(conf["bootstrap.servers"])
    consumer = Consumer(conf)
    try:
        require_topic(cluster_metadata(consumer), args.topic)
        start_wall, start = time.time(), time.monotonic()
        assigned_at: list[float] = []
        consumer.subscribe([args.topic], on_assign=lambda c, parts: assigned_at.append(time.monotonic()))
        deadline = start + args.timeout
        count = size = 0
        bar = progress(args.num_records, "consume")
        while count < args.num_records and time.monotonic() < deadline:
            msgs = consumer.consume(min(500, args.num_records - count), 0.5)
            for msg in msgs:
                if msg.error():
                    raise CliError(f"consuming {args.topic}: {error_text(msg.error())}")
                count += 1
                size += len(msg.value() or b"") + len(msg.key() or b"")
            bar.update(len(msgs))
        end = time.monotonic()
        bar.close()
    finally:
        consumer.close()
    elapsed = max(end - start, 1e-9)
    rebalance = (assigned_at[0] - start) if assigned_at else elapsed
    fetch = max(elapsed - rebalance, 1e-9)
    mb = size / MB
    out.write("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
              "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n")
    out.write(f"{_fmt_time(start_wall)}, {_fmt_time(start_wall + elapsed)}, {mb:.4f}, {mb / elapsed:.4f}, "
              f"{count}, {count / elapsed:.4f}, {int(rebalance * 1000)}, {int(fetch * 1000)}, "
              f"{mb / fetch:.4f}, {count / fetch:.4f}\n")
    if count < args.num_records:
        raise CliError(f"Exiting before consuming the expected number of messages: timeout ({args.timeout:g} s) "
                       f"exceeded with {count} of {args.num_records}")
    return 0


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    run = _produce if args.command == "produce" else _consume
    return run_tool(f"{PROG} {args.command}", lambda: run(args, out or sys.stdout))


if __name__ == "__main__":
    sys.exit(main())
