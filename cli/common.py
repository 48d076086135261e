"""Shared plumbing of the client-side tools.

* ``--bootstrap-server`` / ``-b`` and ``--command-config FILE``, accepted before or after the action
  (``add_connection_options``), as Kafka's scripts accept them anywhere;
* client configs for confluent-kafka: the bootstrap servers plus the ``--command-config``
  properties file (librdkafka property names, e.g. ``security.protocol``, ``sasl.mechanism``,
  ``ssl.ca.location``), read with ``broker.config.parse_properties``;
* a bounded reachability check of the bootstrap servers before any client is made, so that a bad
  ``--bootstrap-server`` fails in seconds with one line instead of librdkafka's retry loop;
* ``run_tool``: every failure becomes one ``kbroker <tool>: message`` line on stderr and exit
  status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import logging
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
# Every broker round trip of a tool is bounded by this (admin requests, metadata, futures);
# KBROKERTEST_TOOL_TIMEOUT_S changes it (tests use a short one).
TIMEOUT_S = float(os.environ.get("KBROKERTEST_TOOL_TIMEOUT_S", "15"))
CONNECT_TIMEOUT_S = 5.0


class CliError(Exception):
    """A failure to report as one line (exit status 1)."""


# librdkafka's own log lines ("Connect to ipv4#... failed", repeated) would drown the one clear
# line a tool prints; errors that matter reach the tools through futures and error callbacks.
_QUIET = logging.getLogger("kbroker.librdkafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def add_connection_options(parser: argparse.ArgumentParser,
                           subparsers: argparse._SubParsersAction | None = None) -> None:
    """Add the connection options to ``parser`` and, suppressed by default, to every action parser,
    so ``kbroker topics -b H:P list`` and ``kbroker topics list -b H:P`` both work."""
    parser.add_argument("--bootstrap-server", "-b", dest="bootstrap_server", default=DEFAULT_BOOTSTRAP,
                        metavar="HOST:PORT[,HOST:PORT]", help=f"brokers to start from (default {DEFAULT_BOOTSTRAP})")
    parser.add_argument("--command-config", dest="command_config", metavar="FILE", default=None,
                        help="client properties file (librdkafka names, e.g. security.protocol=SSL)")
    for action in (subparsers.choices.values() if subparsers is not None else ()):
        action.add_argument("--bootstrap-server", "-b", dest="bootstrap_server", default=argparse.SUPPRESS,
                            metavar="HOST:PORT[,HOST:PORT]", help="brokers to start from")
        action.add_argument("--command-config", dest="command_config", metavar="FILE", default=argparse.SUPPRESS,
                            help="client properties file")


def load_properties(path: str) -> dict[str, str]:
    """A client properties file (--command-config, --producer.config, ...), read as Kafka's
    Utils.loadProps reads it: java.util.Properties syntax in ISO-8859-1 (other characters as \\uXXXX)."""
    # The parser is the broker's server.properties parser (one implementation of the syntax).
    from broker.config.properties import parse_properties

    try:
        text = Path(path).read_bytes().decode("iso-8859-1")
    except FileNotFoundError:
        raise CliError(f"file not found: {path}") from None
    except IsADirectoryError:
        raise CliError(f"{path} is a directory, not a properties file") from None
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror or e}") from None
    return parse_properties(text)


def kafka_action_form(argv: list[str] | None, actions: list[str]) -> list[str]:
    """Kafka's tools pick the action with a flag (``kafka-topics.sh --create --topic t``), kbroker's
    with a word (``kbroker topics create --topic t``); both are accepted: the first ``--ACTION`` flag
    of ``actions`` becomes the word, put first (every option is accepted after the action)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    for i, arg in enumerate(argv):
        if arg.startswith("--") and arg[2:] in actions:
            return [arg[2:], *argv[:i], *argv[i + 1:]]
    return argv


def parse_key_values(items: list[str] | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"{what} expects key=value, got {item!r}")
        out[key.strip()] = value
    return out


# Java client configs with no librdkafka equivalent of the same name, as Kafka users write them in
# --producer-props / --producer.config (and the consumer's): renamed, converted, or left out with a note.
_JAVA_RENAMED = {"max.request.size": "message.max.bytes", "send.buffer.bytes": "socket.send.buffer.bytes",
                 "receive.buffer.bytes": "socket.receive.buffer.bytes"}
_JAVA_IGNORED = {"key.serializer", "value.serializer", "key.deserializer", "value.deserializer", "max.block.ms",
                 "partitioner.class", "interceptor.classes", "default.api.timeout.ms"}


def java_client_props(props: dict[str, str], prog: str) -> dict[str, str]:
    """Client properties written for Kafka's Java clients, for librdkafka: ``buffer.memory`` (bytes)
    becomes ``queue.buffering.max.kbytes``, a few renamed ones take librdkafka's name, and the
    Java-only ones (serializers: the tools send bytes; ``max.block.ms``, ...) are left out with one
    note on stderr each. Anything else goes to librdkafka as is (an unknown name is its error)."""
    out: dict[str, str] = {}
    for key, value in props.items():
        if key == "buffer.memory" and value.strip().isdigit():
            out["queue.buffering.max.kbytes"] = str(max(int(value) // 1024, 1))
        elif key in _JAVA_RENAMED:
            out[_JAVA_RENAMED[key]] = value
        elif key in _JAVA_IGNORED:
            print(f"{prog}: ignoring {key} (a Java client setting with no librdkafka equivalent)", file=sys.stderr)
        else:
            out[key] = value
    return out


def producer_topic(producer: Any, topic: str) -> Any:
    """The metadata of ``topic`` as a producer sees it: asking for it creates it where the brokers
    allow (auto.create.topics.enable), as Kafka's console producer and perf test do. An invalid name
    is reported as invalid, a topic that does not come into existence as missing."""
    from confluent_kafka import KafkaException

    check_topic_name(topic)
    try:
        md = producer.list_topics(topic, timeout=TIMEOUT_S)
    except KafkaException as e:
        raise CliError(f"cannot get metadata from the cluster within {TIMEOUT_S:g} s: {error_text(e)}") from None
    t = md.topics.get(topic)
    # LEADER_NOT_AVAILABLE: just auto-created (the broker allows it), a leader follows.
    if t is None or (t.error is not None and t.error.name() not in ("LEADER_NOT_AVAILABLE", "NO_ERROR")):
        raise CliError(f"Topic '{topic}' does not exist" + (f" ({t.error.name()})" if t and t.error else ""))
    return t


def bootstrap_addresses(bootstrap: str) -> list[tuple[str, int]]:
    """``host:port[,host:port]`` (an optional ``PROTOCOL://`` prefix, ``[v6]:port``) as pairs."""
    out = []
    for item in bootstrap.split(","):
        item = item.strip()
        if "://" in item:
            item = item.split("://", 1)[1]
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep:
            host, port = item, "9092"
        if not port.isdigit():
            raise CliError(f"bad --bootstrap-server {bootstrap!r}: expected HOST:PORT")
        out.append((host.strip("[]") or "127.0.0.1", int(port)))
    if not out:
        raise CliError("empty --bootstrap-server")
    return out


def check_reachable(bootstrap: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Fail with one line unless at least one bootstrap server accepts a TCP connection."""
    errors = []
    for host, port in bootstrap_addresses(bootstrap):
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except TimeoutError:
            errors.append(f"{host}:{port}: no answer within {timeout:g} s")
        except OSError as e:
            errors.append(f"{host}:{port}: {e.strerror or e}")
    raise CliError(f"cannot connect to the bootstrap server ({'; '.join(errors)})")


def client_config(args: argparse.Namespace, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The confluent-kafka config of a tool: defaults, then ``extra``, then --command-config (wins,
    as a properties file passed to Kafka's tools wins over their defaults)."""
    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_server,
        "logger": _QUIET,
        "socket.connection.setup.timeout.ms": int(CONNECT_TIMEOUT_S * 1000),
    }
    conf.update(extra or {})
    if getattr(args, "command_config", None):
        conf.update(load_properties(args.command_config))
    return conf


def admin_client(args: argparse.Namespace) -> Any:
    from confluent_kafka.admin import AdminClient

    conf = client_config(args)  # a missing --command-config file fails before any connection
    check_reachable(args.bootstrap_server)
    return AdminClient(conf)


def error_text(err: Any) -> str:
    """One line for a KafkaException / KafkaError: Kafka's error name and the broker's message."""
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        err = err.args[0]
    if isinstance(err, KafkaError):
        name, text = err.name(), err.str()
        return f"{text} ({name})" if text and text != name and name not in text else (text or name)
    return str(err)


def wait(future: concurrent.futures.Future, what: str, timeout: float = TIMEOUT_S) -> Any:
    """The result of an admin future, bounded; a failure becomes a CliError naming ``what``."""
    from confluent_kafka import KafkaException

    try:
        return future.result(timeout)
    except KafkaException as e:
        raise CliError(f"{what}: {error_text(e)}") from None
    except TimeoutError:
        raise CliError(f"{what}: no answer within {timeout:g} s") from None


def cluster_metadata(admin: Any) -> Any:
    from confluent_kafka import KafkaException

    try:
        return admin.list_topics(timeout=TIMEOUT_S)
    except KafkaException as e:
        raise CliError(f"cannot get metadata from the cluster within {TIMEOUT_S:g} s: {error_text(e)}") from None


def require_topic(metadata: Any, topic: str) -> Any:
    t = metadata.topics.get(topic)
    if t is None or (t.error is not None and t.error.code() != 0):
        check_topic_name(topic)  # an invalid name is reported as invalid, not as missing
        raise CliError(f"Topic '{topic}' does not exist")
    return t


# Kafka's org.apache.kafka.common.internals.Topic.validate: the limits and messages of a topic name.
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def topic_name_error(name: str) -> str | None:
    """Why ``name`` cannot be a topic, in Kafka's words (Topic.validate), or None when it can."""
    if not name:
        why = "the empty string is not allowed"
    elif name in (".", ".."):
        why = f"'{name}' is not allowed"
    elif len(name) > MAX_TOPIC_NAME_LENGTH:
        why = f"the length of '{name}' is longer than the max allowed length {MAX_TOPIC_NAME_LENGTH}"
    elif not set(name) <= _LEGAL_TOPIC_CHARS:
        why = f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    else:
        return None
    return f"Topic name is invalid: {why}"


def check_topic_name(name: str) -> None:
    """Refuse an invalid topic name with Kafka's message (INVALID_TOPIC_EXCEPTION) before any request."""
    why = topic_name_error(name)
    if why:
        raise CliError(f"{why} (INVALID_TOPIC_EXCEPTION)")


def reader_left() -> int:
    """After a BrokenPipeError on stdout (``kbroker ... | head``): point stdout at /dev/null, as
    Python's documentation advises, so the interpreter's final flush does not fail again; exit 0."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (tests pass a StringIO)
        pass
    return 0


def run_tool(prog: str, fn: Callable[[], int]) -> int:
    """Run ``fn``; report any failure as one line on stderr (exit status 1), no traceback."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        return fn()
    except CliError as e:
        print(f"{prog}: {e}", file=sys.stderr)
    except (KafkaException, KafkaError) as e:
        print(f"{prog}: {error_text(e)}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `kbroker ... | head`: the reader left; not an error of the tool.
        return reader_left()
    except (OSError, ValueError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
    return 1
