"""``kbroker console-producer``: one record per input line, from stdin or a file, like
kafka-console-producer.sh.

    kbroker console-producer [-b H:P] --topic T [--file F] [--acks -1|0|1] [--transactional-id ID]
        [--property parse.key=true --property key.separator=:] [--property parse.headers=true]
        [--producer-property k=v ...] [--command-config F | --producer.config F]

Lines are read as Kafka's LineMessageReader reads them, with its properties: ``parse.key``
(``key.separator``, default TAB), ``parse.headers`` (``headers.delimiter`` TAB between the headers
and the rest, ``headers.separator`` ``,`` between headers, ``headers.key.separator`` ``:``; a
header without ``:`` has a null value), ``null.marker`` (a key, value or header value equal to it
is sent as null) and ``ignore.error`` (a line without the key separator becomes a value with a
null key instead of an error). So with both: ``h1:v1,h2:v2<TAB>key<TAB>value``.
``--transactional-id`` sends every line in one transaction, committed at the end of the input
(aborted on an error). Acks default to -1 (all), as in Kafka 3. Unlike Kafka's 120 s
delivery.timeout.ms, a record not delivered within 30 s fails the run (message.timeout.ms;
override with --producer-property). Exit status 1 if any record was not delivered.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from cli.common import (
    TIMEOUT_S,
    CliError,
    add_connection_options,
    check_reachable,
    client_config,
    error_text,
    java_client_props,
    load_properties,
    parse_key_values,
    producer_topic,
    run_tool,
)

PROG = "kbroker console-producer"
Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Send lines of text as records.")
    p.add_argument("--topic", required=True)
    p.add_argument("--file", help="read this file instead of stdin")
    p.add_argument("--acks", "--request-required-acks", dest="acks", default="-1", choices=("-1", "all", "0", "1"))
    p.add_argument("--transactional-id", help="send all lines in one transaction")
    p.add_argument("--property", "--reader-property", dest="property", action="append", metavar="KEY=VALUE",
                   help="line reader property: parse.key, key.separator, parse.headers, ... (repeatable)")
    p.add_argument("--producer-property", action="append", metavar="KEY=VALUE",
                   help="a producer (librdkafka) config (repeatable)")
    p.add_argument("--producer.config", dest="producer_config", metavar="FILE", help="producer properties file")
    add_connection_options(p)
    return p


class LineReader:
    """Kafka's LineMessageReader: a line to (key, value, headers)."""

    def __init__(self, props: dict[str, str]) -> None:
        self.parse_key = props.get("parse.key", "false").lower() == "true"
        self.key_sep = props.get("key.separator", "\t")
        self.parse_headers = props.get("parse.headers", "false").lower() == "true"
        self.headers_delim = props.get("headers.delimiter", "\t")
        self.headers_sep = props.get("headers.separator", ",")
        self.header_key_sep = props.get("headers.key.separator", ":")
        self.ignore_error = props.get("ignore.error", "false").lower() == "true"
        self.null_marker = props.get("null.marker")
        if self.parse_key and self.parse_headers and self.key_sep == self.headers_sep:
            raise CliError("headers.separator and key.separator may not be equal")

    def _bytes(self, text: str | None) -> bytes | None:
        if text is None or (self.null_marker is not None and text == self.null_marker):
            return None
        return text.encode("utf-8", "surrogateescape")

    def parse(self, line: str, number: int) -> Record:
        headers: list[tuple[str, bytes | None]] = []
        rest = line
        if self.parse_headers:
            head, sep, tail = rest.partition(self.headers_delim)
            if not sep:
                if not self.ignore_error:
                    raise CliError(f"no header delimiter found on line {number}: {line!r}")
            else:
                rest = tail
                for h in head.split(self.headers_sep) if head else []:
                    k, ksep, v = h.partition(self.header_key_sep)
                    headers.append((k, self._bytes(v) if ksep else None))
        key: str | None = None
        if self.parse_key:
            k, sep, v = rest.partition(self.key_sep)
            if sep:
                key, rest = k, v
            elif not self.ignore_error:
                raise CliError(f"no key separator found on line {number}: {line!r}")
        return self._bytes(key), self._bytes(rest), headers


def _lines(stream: TextIO) -> Iterator[str]:
    for line in stream:
        yield line.rstrip("\n").removesuffix("\r")


def _produce(args: argparse.Namespace, stream: TextIO) -> int:
    from confluent_kafka import Producer

    reader = LineReader(parse_key_values(args.property, "--property"))
    extra: dict[str, Any] = {"acks": "all" if args.acks == "all" else args.acks, "message.timeout.ms": 30000}
    if args.transactional_id:
        extra["transactional.id"] = args.transactional_id
    conf = client_config(args, extra)
    if args.producer_config:
        conf.update(java_client_props(load_properties(args.producer_config), PROG))
    conf.update(java_client_props(parse_key_values(args.producer_property, "--producer-property"), PROG))
    check_reachable(conf["bootstrap.servers"])
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(error_text(err))

    producer = Producer(conf)
    producer_topic(producer, args.topic)
    if args.transactional_id:
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
    sent = 0
    try:
        for number, line in enumerate(_lines(stream), 1):
            key, value, headers = reader.parse(line, number)
            while True:
                try:
                    producer.produce(args.topic, value=value, key=key, headers=headers or None,
                                     on_delivery=on_delivery)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.1)
            sent += 1
            producer.poll(0)
            if errors:
                break
    except BaseException:
        if args.transactional_id:
            producer.abort_transaction(TIMEOUT_S)
        raise
    if args.transactional_id:
        if errors:
            producer.abort_transaction(TIMEOUT_S)
        else:
            producer.commit_transaction(TIMEOUT_S + 30)
    left = producer.flush(TIMEOUT_S + 30)
    if left:
        errors.append(f"{left} record(s) still undelivered")
    if errors:
        raise CliError(f"{len(errors)} of {sent} record(s) not delivered: {errors[0]}")
    return 0


def main(argv: list[str] | None = None, out: TextIO | None = None, stdin: TextIO | None = None) -> int:
    """``out`` is unused (the producer prints nothing on success); it keeps the tools' signature."""
    args = build_parser().parse_args(argv)

    def run() -> int:
        if args.file:
            try:
                f = open(args.file, encoding="utf-8", errors="surrogateescape")  # noqa: SIM115
            except FileNotFoundError:
                raise CliError(f"file not found: {args.file}") from None
            with f:
                return _produce(args, f)
        return _produce(args, stdin or sys.stdin)

    return run_tool(PROG, run)


if __name__ == "__main__":
    sys.exit(main())
