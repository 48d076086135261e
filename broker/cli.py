"""The ``kbroker`` command line: ``serve`` starts a broker; the other subcommands are tools."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys


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

    try:
        config = BrokerConfig.load(args.config, _parse_overrides(args.override or []))
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
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, broker.request_stop)
    try:
        await broker.start()
    except OSError as e:
        logging.getLogger("broker").error("could not start: %s", e)
        return 1
    await broker.run_until_stopped()
    await broker.stop()
    return 0


def cmd_dump_log(args: argparse.Namespace) -> int:
    from storage import dump

    argv = list(args.files)
    if args.print_data:
        argv.append("--print-data")
    if args.deep_verify:
        argv.append("--deep-verify")
    return dump.main(argv)


def _delegate(module: str):
    """Subcommands implemented in their own module with a ``main(argv) -> int``."""

    def run(args: argparse.Namespace) -> int:
        import importlib

        return importlib.import_module(module).main(list(args.rest))

    return run


def build_parser() -> argparse.ArgumentParser:
    from broker.config import serve_help_epilog

    parser = argparse.ArgumentParser(prog="kbroker", description="A Kafka-protocol-compatible transactional broker.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser(
        "serve", help="start a broker",
        description="Start a broker. Configuration comes from a server.properties-style file (Kafka's names) "
                    "and --override key=value flags, which win.",
        epilog=serve_help_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("config", nargs="?", help="path to a server.properties file")
    serve.add_argument("--override", action="append", metavar="KEY=VALUE",
                       help="set a broker config, e.g. --override log.dirs=./data (repeatable)")
    serve.add_argument("--log-level", help="DEBUG shows the request log (default: kbroker.log.level, INFO)")
    serve.set_defaults(func=cmd_serve)

    dl = sub.add_parser("dump-log", help="decode .log/.index/.timeindex/.txnindex/.snapshot files")
    dl.add_argument("files", nargs="+")
    dl.add_argument("--print-data", action="store_true", help="print record keys, values and headers")
    dl.add_argument("--deep-verify", action="store_true",
                    help="check that every batch decodes (files or directories); exit status 2 if any does not")
    dl.set_defaults(func=cmd_dump_log)

    for name, module, text in (
        ("groups", "cli.groups", "consumer groups: list | describe G | reset-offsets G ..."),
        ("transactions", "cli.transactions", "transactions: list | describe ID | abort ..."),
    ):
        p = sub.add_parser(name, help=text, add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=_delegate(module))
    return parser


_DELEGATED = {"groups": "cli.groups", "transactions": "cli.transactions"}


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
