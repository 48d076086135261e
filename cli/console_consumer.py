"""``kbroker console-consumer``: print records of a topic, like kafka-console-consumer.sh.

    kbroker console-consumer [-b H:P] --topic T [--from-beginning] [--group G]
        [--partition P [--offset earliest|latest|N]] [--isolation-level read_committed]
        [--max-messages N] [--timeout-ms MS] [--formatter default|json]
        [--property print.key=true --property print.headers=true ...]
        [--consumer-property k=v ...] [--command-config F | --consumer.config F]

The default formatter is Kafka's DefaultMessageFormatter with its properties: ``print.timestamp``
(``CreateTime:1700000000000``), ``print.partition`` (``Partition:0``), ``print.offset``
(``Offset:5``), ``print.headers`` (``k:v,k2:v2`` or ``NO_HEADERS``), ``print.key``,
``print.value`` (default true), in that order, separated by ``key.separator`` (TAB), with
``headers.separator``, ``headers.key.separator``, ``line.separator`` and ``null.literal``
("null"). ``--formatter json`` prints one JSON object per record with every field instead.
Without ``--group`` a fresh group ``console-consumer-NNNNN`` is used, as in Kafka. The run ends
after ``--max-messages`` records, after ``--timeout-ms`` without a record, or on Ctrl-C; it
prints "Processed a total of N messages" on stderr. A topic that does not exist is an error
(Kafka's consumer would wait for it).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from typing import Any, TextIO

from cli.common import (
    CliError,
    add_connection_options,
    check_reachable,
    client_config,
    cluster_metadata,
    error_text,
    load_properties,
    parse_key_values,
    require_topic,
    run_tool,
)

PROG = "kbroker console-consumer"
TIMESTAMP_TYPES = {1: "CreateTime", 2: "LogAppendTime"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Print the records of a topic.")
    p.add_argument("--topic", required=True)
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the earliest offset when the group has no committed offset")
    p.add_argument("--group", help="consumer group (default: a fresh console-consumer-NNNNN)")
    p.add_argument("--partition", type=int, help="read only this partition (no group membership)")
    p.add_argument("--offset", default=None, help="with --partition: earliest, latest or an offset")
    p.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"), default="read_uncommitted")
    p.add_argument("--max-messages", type=int, help="stop after this many records")
    p.add_argument("--timeout-ms", type=int, help="stop when no record arrives for this long")
    p.add_argument("--formatter", choices=("default", "json"), default="default")
    p.add_argument("--property", action="append", metavar="KEY=VALUE",
                   help="formatter property: print.key, print.headers, print.timestamp, print.partition, "
                        "print.offset, print.value, key.separator, ... (repeatable)")
    p.add_argument("--consumer-property", action="append", metavar="KEY=VALUE", help="a consumer config (repeatable)")
    p.add_argument("--consumer.config", dest="consumer_config", metavar="FILE", help="consumer properties file")
    add_connection_options(p)
    return p


def _text(data: bytes | None, null: str) -> str:
    return null if data is None else data.decode("utf-8", "backslashreplace")


class DefaultFormatter:
    """Kafka's DefaultMessageFormatter."""

    def __init__(self, props: dict[str, str]) -> None:
        def flag(name: str, default: bool = False) -> bool:
            return props.get(name, str(default)).lower() == "true"

        self.fields = [f for f, on in (("timestamp", flag("print.timestamp")), ("partition", flag("print.partition")),
                                       ("offset", flag("print.offset")), ("headers", flag("print.headers")),
                                       ("key", flag("print.key")), ("value", flag("print.value", True))) if on]
        self.key_sep = props.get("key.separator", "\t")
        self.line_sep = props.get("line.separator", "\n")
        self.headers_sep = props.get("headers.separator", ",")
        self.header_key_sep = props.get("headers.key.separator", ":")
        self.null = props.get("null.literal", "null")

    def format(self, msg: Any) -> str:
        parts = []
        for f in self.fields:
            if f == "timestamp":
                kind, ts = msg.timestamp()
                parts.append(f"{TIMESTAMP_TYPES[kind]}:{ts}" if kind in TIMESTAMP_TYPES else "NO_TIMESTAMP")
            elif f == "partition":
                parts.append(f"Partition:{msg.partition()}")
            elif f == "offset":
                parts.append(f"Offset:{msg.offset()}")
            elif f == "headers":
                hs = msg.headers() or []
                parts.append(self.headers_sep.join(f"{k}{self.header_key_sep}{_text(v, self.null)}" for k, v in hs)
                             if hs else "NO_HEADERS")
            elif f == "key":
                parts.append(_text(msg.key(), self.null))
            else:
                parts.append(_text(msg.value(), self.null))
        return self.key_sep.join(parts) + self.line_sep


class JsonFormatter:
    def format(self, msg: Any) -> str:
        kind, ts = msg.timestamp()

        def text(b: bytes | None) -> str | None:
            return None if b is None else b.decode("utf-8", "backslashreplace")

        return json.dumps({
            "topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
            "timestamp": ts if kind in TIMESTAMP_TYPES else None, "timestampType": TIMESTAMP_TYPES.get(kind),
            "key": text(msg.key()), "value": text(msg.value()),
            "headers": [[k, text(v)] for k, v in (msg.headers() or [])],
        }) + "\n"


def _start_offset(args: argparse.Namespace) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

    if args.offset is None:
        return OFFSET_BEGINNING if args.from_beginning else OFFSET_END
    if args.offset == "earliest":
        return OFFSET_BEGINNING
    if args.offset == "latest":
        return OFFSET_END
    if args.offset.isdigit():
        return int(args.offset)
    raise CliError(f"--offset must be earliest, latest or a non-negative number, got {args.offset!r}")


def _consume(args: argparse.Namespace, out: TextIO) -> int:
    from confluent_kafka import Consumer, TopicPartition

    formatter = JsonFormatter() if args.formatter == "json" else DefaultFormatter(
        parse_key_values(args.property, "--property"))
    if args.offset is not None and args.partition is None:
        raise CliError("--offset needs --partition")
    start = _start_offset(args)
    conf = client_config(args, {
        "group.id": args.group or f"console-consumer-{random.randint(10000, 99999)}",
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "isolation.level": args.isolation_level,
        "enable.partition.eof": False,
        # Offsets are stored by hand, for printed records only: with the automatic store librdkafka
        # also moves the stored offset past fetched control records on close, which commits records
        # that --max-messages never printed.
        "enable.auto.offset.store": False,
    })
    if args.consumer_config:
        conf.update(load_properties(args.consumer_config))
    conf.update(parse_key_values(args.consumer_property, "--consumer-property"))
    check_reachable(args.bootstrap_server)
    consumer = Consumer(conf)
    try:
        topic = require_topic(cluster_metadata(consumer), args.topic)
        if args.partition is not None and args.partition not in topic.partitions:
            raise CliError(f"topic {args.topic} has no partition {args.partition}")
    except BaseException:
        consumer.close()
        raise
    if args.partition is not None:
        consumer.assign([TopicPartition(args.topic, args.partition, start)])
    else:
        consumer.subscribe([args.topic])
    count = 0
    try:
        last = time.monotonic()
        while args.max_messages is None or count < args.max_messages:
            if args.timeout_ms is not None and (time.monotonic() - last) * 1000 >= args.timeout_ms:
                break
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                raise CliError(f"consuming {args.topic}: {error_text(msg.error())}")
            out.write(formatter.format(msg))
            out.flush()
            if args.partition is None:
                consumer.store_offsets(msg)
            count += 1
            last = time.monotonic()
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_tool(PROG, lambda: _consume(args, out or sys.stdout))


if __name__ == "__main__":
    sys.exit(main())
