"""``kbroker get-offsets``: partition offsets for a time, like kafka-get-offsets.sh (GetOffsetShell).

    kbroker get-offsets [-b H:P] [--topic T] [--partitions 0,2-4] [--time -1|-2|-3|TIMESTAMP_MS]
                        [--exclude-internal-topics]
    kbroker get-offsets --topic-partitions 'REGEX:0,other:1-3,:5-' [--time ...]

``--time``: -1 or ``latest`` (the log end offset, the default), -2 or ``earliest`` (the log start
offset), -3 or ``max-timestamp`` (the offset of the record with the largest timestamp), or a
timestamp in ms (the first offset whose timestamp is at least that). ``--topic-partitions`` is
GetOffsetShell's list of patterns ``TOPIC_REGEX[:PARTITIONS]`` (the regex matches the whole name; an
empty one matches every topic; PARTITIONS is N, N-M with M excluded, N- or -M), not combined with
``--topic``/``--partitions``; nothing matched is an error, as in Kafka. Prints ``topic:partition:offset``
lines, sorted; an offset the broker has no answer for (a timestamp after every record) prints as
-1. Without ``--topic`` every topic is listed. Deviation: ``--topic`` is a name, not a regex.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, TextIO

from cli.common import (
    TIMEOUT_S,
    CliError,
    add_connection_options,
    admin_client,
    cluster_metadata,
    require_topic,
    run_tool,
    wait,
)

PROG = "kbroker get-offsets"
NAMED_TIMES = {"latest": -1, "earliest": -2, "max-timestamp": -3}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Offsets of topic partitions for a time.")
    p.add_argument("--topic", help="one topic (default: all)")
    p.add_argument("--partitions", help="comma-separated partitions or ranges, e.g. 0,2-4 (default: all)")
    p.add_argument("--topic-partitions", metavar="PATTERNS",
                   help="comma-separated TOPIC_REGEX[:N|N-M|N-|-M] patterns (M excluded), as Kafka's GetOffsetShell")
    p.add_argument("--time", default="-1", help="-1/latest, -2/earliest, -3/max-timestamp or a timestamp in ms")
    p.add_argument("--exclude-internal-topics", action="store_true")
    add_connection_options(p)
    return p


def parse_partitions(text: str | None) -> set[int] | None:
    if not text:
        return None
    out: set[int] = set()
    for item in text.split(","):
        lo, sep, hi = item.strip().partition("-")
        try:
            out.update(range(int(lo), int(hi) + 1) if sep else [int(lo)])
        except ValueError:
            raise CliError(f"--partitions expects numbers or ranges like 0,2-4, got {text!r}") from None
    return out


# GetOffsetShell's TOPIC_PARTITION_PATTERN: a topic regex, then optionally ":N" or ":N-M" (either side optional).
_TOPIC_PARTITION = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
Rule = tuple[re.Pattern[str], int, int]  # topic regex, first partition, end partition (excluded)


def parse_topic_partitions(text: str) -> list[Rule]:
    rules = []
    for spec in text.split(","):
        m = _TOPIC_PARTITION.fullmatch(spec)
        if m is None:
            raise CliError(f"Invalid rule specification: {spec}")
        topic, single, low, high = (g or None for g in m.groups())
        try:
            regex = re.compile(topic or ".*")
        except re.error as e:
            raise CliError(f"Invalid topic pattern {topic!r}: {e}") from None
        if single is not None:
            rules.append((regex, int(single), int(single) + 1))
        else:
            rules.append((regex, int(low or 0), int(high) if high is not None else 2**31 - 1))
    return rules


def _matches(rules: list[Rule], topic: str, partition: int) -> bool:
    return any(rx.fullmatch(topic) and lo <= partition < hi for rx, lo, hi in rules)


def parse_time(text: str) -> int:
    value = NAMED_TIMES.get(text.strip().lower())
    if value is not None:
        return value
    try:
        value = int(text)
    except ValueError:
        raise CliError(f"--time expects -1, -2, -3, latest, earliest, max-timestamp or a timestamp, got {text!r}") from None
    if value < -3:
        raise CliError(f"--time {value} is not a valid time")
    return value


def _spec(time_ms: int) -> Any:
    from confluent_kafka.admin import OffsetSpec

    if time_ms == -1:
        return OffsetSpec.latest()
    if time_ms == -2:
        return OffsetSpec.earliest()
    if time_ms == -3:
        return OffsetSpec.max_timestamp()
    return OffsetSpec.for_timestamp(time_ms)


def _run(args: argparse.Namespace, out: TextIO) -> int:
    from confluent_kafka import TopicPartition

    if args.topic_partitions is not None and (args.topic or args.partitions):
        raise CliError("--topic-partitions cannot be used with --topic or --partitions")
    rules = parse_topic_partitions(args.topic_partitions) if args.topic_partitions is not None else None
    wanted = parse_partitions(args.partitions)
    time_ms = parse_time(args.time)
    admin = admin_client(args)
    md = cluster_metadata(admin)
    if rules is not None:
        tps = [TopicPartition(n, p) for n, t in sorted(md.topics.items()) for p in sorted(t.partitions)
               if not (args.exclude_internal_topics and n.startswith("__")) and _matches(rules, n, p)]
        if not tps:
            raise CliError("Could not match any topic-partitions with the specified filters")
        return _print_offsets(admin, tps, time_ms, out)
    if args.topic:
        topics = {args.topic: require_topic(md, args.topic)}
    else:
        topics = {n: t for n, t in md.topics.items() if not (args.exclude_internal_topics and n.startswith("__"))}
    tps = [TopicPartition(n, p) for n, t in sorted(topics.items()) for p in sorted(t.partitions)
           if wanted is None or p in wanted]
    if args.topic and wanted is not None:
        missing = sorted(wanted - {tp.partition for tp in tps})
        if missing:
            raise CliError(f"topic {args.topic} has no partition {','.join(map(str, missing))}")
    if not tps:
        return 0
    return _print_offsets(admin, tps, time_ms, out)


def _print_offsets(admin: Any, tps: list[Any], time_ms: int, out: TextIO) -> int:
    spec = _spec(time_ms)
    futures = admin.list_offsets({tp: spec for tp in tps}, request_timeout=TIMEOUT_S)
    results = {(tp.topic, tp.partition): wait(f, f"listing offsets of {tp.topic}-{tp.partition}")
               for tp, f in futures.items()}
    for (topic, partition), info in sorted(results.items()):
        out.write(f"{topic}:{partition}:{info.offset}\n")
    return 0


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_tool(PROG, lambda: _run(args, out or sys.stdout))


if __name__ == "__main__":
    sys.exit(main())
