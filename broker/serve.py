"""``kbroker serve``: start one broker from a server.properties file, KBROKER_* variables and
``--override`` flags (the entry that ``cli/main.py`` and ``python -m broker`` call).

Also the one place that turns those three sources into a :class:`BrokerConfig`
(:func:`load_config`), which ``kbroker healthcheck`` and ``kbroker users bootstrap`` reuse to read
the broker's own configuration. Logging is one line per event (UTC time, level, logger, message);
SIGTERM/SIGINT start a stop bounded by ``kbroker.shutdown.timeout.ms``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.config import BrokerConfig


# Benchmarks only (benchmarks/cluster_txn_timeline.py): microsecond timestamps, to line up one
# transaction's requests across brokers.
_MICROS = os.environ.get("KBROKERTEST_LOG_MICROS") == "1"


class _Formatter(logging.Formatter):
    """One line per event: UTC time, level, logger, message (greppable, stable field order)."""

    def format(self, record: logging.LogRecord) -> str:
        frac = f"{int((record.created % 1) * 1e6):06d}" if _MICROS else f"{int(record.msecs):03d}"
        ts = self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{frac}Z"
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


def parse_overrides(items: list[str]) -> dict[str, str]:
    """``--override key=value`` flags as a dict (keys and values trimmed)."""
    from broker.config import ConfigError

    out = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--override expects key=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def load_config(path: str | None, overrides: list[str] | None = None, from_env: bool = False,
                environ: Mapping[str, str] | None = None) -> BrokerConfig:
    """The broker's configuration: the properties file, under the KBROKER_* variables (with
    ``from_env``), under ``--override`` flags. Raises ConfigError or OSError."""
    from broker.config import BrokerConfig
    from broker.env_config import configs_from_env

    props = configs_from_env(os.environ if environ is None else environ) if from_env else {}
    props.update(parse_overrides(overrides or []))
    return BrokerConfig.load(path, props)


def _unusable_log_dir(config: BrokerConfig) -> str | None:
    """Kafka's check before it locks the log dirs: an entry of log.dirs that exists but is not a
    directory stops the start with one line (not an errno from deep inside the start-up)."""
    for d in config.log_dirs:
        if os.path.exists(d) and not os.path.isdir(d):
            return f"{os.path.abspath(d)} is not a readable log directory (it is a file; log.dirs={d})"
    return None


def build_parser() -> argparse.ArgumentParser:
    from broker.config import serve_help_epilog

    serve = argparse.ArgumentParser(
        prog="kbroker serve",
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
    return serve


def main(argv: list[str] | None = None) -> int:
    """``kbroker serve [FILE] [--override k=v ...] [--from-env] [--log-level L]``."""
    from broker.config import ConfigError

    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        # --from-env: KBROKER_* variables (the container image) over the file, under --override.
        config = load_config(args.config, args.override, args.from_env)
    except (ConfigError, OSError) as e:
        print(f"kbroker: configuration error: {e}", file=sys.stderr)
        return 2
    bad_dir = _unusable_log_dir(config)
    if bad_dir:
        print(f"kbroker: {bad_dir}", file=sys.stderr)
        return 2
    setup_logging(args.log_level or str(config.get("kbroker.log.level")))
    if config.get("kbroker.malloc.tuning"):
        from broker.malloc_tuning import tune_malloc

        tune_malloc()
    from storage import write_behind

    write_behind.configure(int(config.get("kbroker.log.cache.window.bytes")),
                           bool(config.get("kbroker.log.preallocate.ahead")))
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency; keep a fallback for odd platforms
        runner = asyncio.run
    profile_to = os.environ.get("KBROKERTEST_CPROFILE")
    if not profile_to:
        return runner(_serve(config))
    # Benchmark aid (benchmarks/replicated_write_cost.py --cprofile): the whole run under cProfile,
    # its stats written on a clean stop.
    import cProfile

    prof = cProfile.Profile()
    try:
        return prof.runcall(runner, _serve(config))
    finally:
        prof.dump_stats(profile_to)


async def _serve(config: BrokerConfig) -> int:
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


if __name__ == "__main__":
    sys.exit(main())
