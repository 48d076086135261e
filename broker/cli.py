"""The ``kbroker`` command line: ``serve`` starts a broker; the other subcommands are tools."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import threading


class _Formatter(logging.Formatter):
    """One line per event: UTC time, level, logger, message (greppable, stable field order)."""

    def format(self, record: logging.LogRecord) -> str:
        ts = self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z"
        line = f"{ts} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(level: str) -> None:
    import time

    handler = logging.StreamHandler(sys.stderr)
    fmt = _Formatter()
    fmt.converter = time.gmtime
    handler.setFormatter(fmt)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def _parse_overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"--override expects key=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def cmd_serve(args: argparse.Namespace) -> int:
    from broker.config import BrokerConfig, ConfigError
    from broker.env_config import configs_from_env

    try:
        # --from-env: KBROKER_* variables (the container image) over the file, under --override.
        props = configs_from_env(os.environ) if args.from_env else {}
        props.update(_parse_overrides(args.override or []))
        config = BrokerConfig.load(args.config, props)
    except (ConfigError, OSError) as e:
        print(f"kbroker: configuration error: {e}", file=sys.stderr)
        return 2
    setup_logging(args.log_level or str(config.get("kbroker.log.level")))
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency; keep a fallback for odd platforms
        runner = asyncio.run
    return runner(_serve(config))


async def _serve(config) -> int:
    from broker.broker import Broker

    broker = Broker(config)
    loop = asyncio.get_running_loop()
    stopping = threading.Event()
    timeout_ms = int(config.get("kbroker.shutdown.timeout.ms"))

    def on_signal(signum: int, _frame: object) -> None:
        # A Python-level handler, not loop.add_signal_handler: it runs at the next bytecode even
        # while the loop is stuck in a long synchronous step, so the deadline always starts.
        if not stopping.is_set():
            stopping.set()
            _shutdown_deadline(timeout_ms, signal.Signals(signum).name)
        loop.call_soon_threadsafe(broker.request_stop)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    try:
        await broker.start()
    except OSError as e:
        logging.getLogger("broker").error("could not start: %s", e)
        return 1
    await broker.run_until_stopped()
    await broker.stop()
    return 0


def _shutdown_deadline(timeout_ms: int, cause: str) -> None:
    """Start the stop's deadline (kbroker.shutdown.timeout.ms): whatever is still in flight when
    it passes (a stuck fsync, a loop that does not get back), the process exits with code 1.
    Nothing is lost that a crash would not lose: the clean-shutdown marker is written last, so
    the next start recovers the logs."""
    log = logging.getLogger("broker")
    log.info("%s received: stopping (deadline %d ms)", cause, timeout_ms)

    def expire() -> None:
        log.error("shutdown did not finish within %d ms of %s (kbroker.shutdown.timeout.ms); exiting "
                  "without a clean shutdown, the next start recovers the logs", timeout_ms, cause)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(1)

    timer = threading.Timer(timeout_ms / 1000, expire)
    timer.daemon = True
    timer.start()


def cmd_dump_log(args: argparse.Namespace) -> int:
    from storage import dump

    argv = list(args.files)
    if args.print_data:
        argv.append("--print-data")
    if args.deep_verify:
        argv.append("--deep-verify")
    for flag in ("offsets_decoder", "transaction_log_decoder"):
        if getattr(args, flag, False):
            argv.append("--" + flag.replace("_", "-"))
    return dump.main(argv)


def _delegate(module: str):
    """Subcommands implemented in their own module with a ``main(argv) -> int``."""

    def run(args: argparse.Namespace) -> int:
        import importlib

        return importlib.import_module(module).main(list(args.rest))

    return run


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kbroker")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    from broker.config import serve_help_epilog

    parser = argparse.ArgumentParser(prog="kbroker", description="A Kafka-protocol-compatible transactional broker.")
    parser.add_argument("--version", action="version", version=f"kbroker {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser(
        "serve", help="start a broker",
        description="Start a broker. Configuration comes from a server.properties-style file (Kafka's names) "
                    "and --override key=value flags, which win.",
        epilog=serve_help_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("config", nargs="?", help="path to a server.properties file")
    serve.add_argument("--override", action="append", metavar="KEY=VALUE",
                       help="set a broker config, e.g. --override log.dirs=./data (repeatable)")
    serve.add_argument("--from-env", action="store_true",
                       help="also take configs from KBROKER_* environment variables (KBROKER_NODE_ID -> node.id; "
                            "_ is '.', __ is '_', ___ is '-'), over the file and under --override")
    serve.add_argument("--log-level", help="DEBUG shows the request log (default: kbroker.log.level, INFO)")
    serve.set_defaults(func=cmd_serve)

    dl = sub.add_parser("dump-log", help="decode .log/.index/.timeindex/.txnindex/.snapshot files")
    dl.add_argument("files", nargs="+")
    dl.add_argument("--print-data", action="store_true", help="print record keys, values and headers")
    dl.add_argument("--deep-verify", action="store_true",
                    help="check that every batch decodes (files or directories); exit status 2 if any does not")
    dl.add_argument("--offsets-decoder", action="store_true", help="decode records as __consumer_offsets")
    dl.add_argument("--transaction-log-decoder", action="store_true",
                    help="decode records as __transaction_state (TV2 fields, the KIP-939 2PC flag)")
    dl.set_defaults(func=cmd_dump_log)

    for name, module, text in (
        ("groups", "cli.groups", "consumer groups: list | describe G | reset-offsets G ... | delete G"),
        ("transactions", "cli.transactions", "transactions: list | describe ID | abort ..."),
        ("features", "cli.features", "feature levels: describe | upgrade | downgrade --feature F=L"),
        ("topics", "cli.topics", "topics: list | describe | create | delete | alter --partitions N"),
        ("configs", "cli.configs", "topic and broker configs: describe | alter --add-config/--delete-config"),
        ("console-producer", "cli.console_producer", "send lines from stdin or --file as records"),
        ("console-consumer", "cli.console_consumer", "print the records of a topic"),
        ("get-offsets", "cli.get_offsets", "partition offsets for --time -1|-2|-3|TIMESTAMP"),
        ("perf", "cli.perf", "load tests: produce | consume"),
        ("users", "cli.users", "SCRAM credentials: list | add | delete | bootstrap (before first start)"),
        ("acls", "cli.acls", "ACLs: add | list | remove (kafka-acls)"),
        ("cluster", "cli.cluster", "local cluster (etcd + N brokers): up | status | down --dir DIR"),
        ("leader-election", "cli.leader_election", "elect preferred or unclean leaders (kafka-leader-election)"),
        ("reassign-partitions", "cli.reassign_partitions",
         "move replicas: --execute | --verify | --cancel | --list (kafka-reassign-partitions)"),
        ("healthcheck", "cli.healthcheck", "exit 0 when the local broker answers ApiVersions (container health)"),
        ("schemas", "cli.schemas", "Schema Registry: list | get | register | delete | compatibility | config"),
    ):
        p = sub.add_parser(name, help=text, add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=_delegate(module))
    return parser


_DELEGATED = {"groups": "cli.groups", "transactions": "cli.transactions", "features": "cli.features",
              "topics": "cli.topics", "configs": "cli.configs", "console-producer": "cli.console_producer",
              "console-consumer": "cli.console_consumer", "get-offsets": "cli.get_offsets", "perf": "cli.perf",
              "users": "cli.users", "cluster": "cli.cluster", "acls": "cli.acls",
              "healthcheck": "cli.healthcheck", "leader-election": "cli.leader_election",
              "reassign-partitions": "cli.reassign_partitions", "schemas": "cli.schemas"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in _DELEGATED:
        # Their own parsers handle every option, including ones placed before the action.
        import importlib

        return importlib.import_module(_DELEGATED[argv[0]]).main(argv[1:])
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
