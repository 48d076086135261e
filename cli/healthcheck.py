"""`kbroker healthcheck`: exit 0 when the local broker answers ApiVersions, 1 otherwise.

The container image's HEALTHCHECK. It reads the broker's own configuration the way ``kbroker serve``
does (a properties file, ``--from-env`` for the ``KBROKER_*`` variables, ``--override``:
broker/serve.py's load_config, imported only on this path) and asks the first listener that speaks
ApiVersions before any handshake (PLAINTEXT or SASL_PLAINTEXT; Kafka answers ApiVersions before SASL
authentication). A listener bound to all interfaces is reached on 127.0.0.1.
``-b``/``--bootstrap-server HOST:PORT`` (or the older ``--bootstrap``) skips the configuration, and
``--command-config`` is accepted as by the other tools (PLAINTEXT or SASL_PLAINTEXT: no handshake is
made). The connection and the answer are bounded by ``--timeout`` seconds (default 5).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from cli.common import CliError, bootstrap_addresses, load_properties

_NO_HANDSHAKE = ("PLAINTEXT", "SASL_PLAINTEXT")


def _target(args: argparse.Namespace) -> tuple[str, int]:
    if args.bootstrap_server:
        return bootstrap_addresses(args.bootstrap_server)[0]
    from broker.config import ConfigError
    from broker.serve import load_config

    try:
        config = load_config(args.config, args.override, args.from_env)
    except (ConfigError, OSError) as e:
        raise CliError(f"configuration error: {e}") from None
    pmap = config.security_protocol_map
    for li in config.listeners:
        if pmap.get(li.name, li.name) in _NO_HANDSHAKE:
            return (li.host if li.bind_host else "127.0.0.1"), li.port
    raise CliError("no PLAINTEXT or SASL_PLAINTEXT listener; use --bootstrap-server")


async def _probe(host: str, port: int, timeout: float) -> int:
    from kafka.protocol.metadata import ApiVersionsRequest

    from protocol.client import ProtocolClient

    async def ask() -> int:
        async with ProtocolClient(host, port, client_id="kbroker-healthcheck") as client:
            resp = await client.request(ApiVersionsRequest(version=0), 0)
            return int(resp.error_code)

    return await asyncio.wait_for(ask(), timeout)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kbroker healthcheck", description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", help="the broker's server.properties")
    parser.add_argument("--from-env", action="store_true", help="apply KBROKER_* variables, as serve --from-env")
    parser.add_argument("--override", action="append", metavar="KEY=VALUE")
    parser.add_argument("--bootstrap-server", "-b", "--bootstrap", dest="bootstrap_server", metavar="HOST:PORT",
                        help="the broker to ask instead of the configured listener")
    parser.add_argument("--command-config", metavar="FILE", help="client properties (PLAINTEXT or SASL_PLAINTEXT)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds (default 5)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command_config:
            protocol = load_properties(args.command_config).get("security.protocol", "PLAINTEXT").upper()
            if protocol not in _NO_HANDSHAKE:
                raise CliError(f"security.protocol={protocol} is not supported (PLAINTEXT or SASL_PLAINTEXT)")
        host, port = _target(args)
    except CliError as e:
        print(f"kbroker healthcheck: {e}", file=sys.stderr)
        return 1
    try:
        code = asyncio.run(_probe(host, port, args.timeout))
    except TimeoutError:
        print(f"kbroker healthcheck: {host}:{port}: no answer within {args.timeout:g} s", file=sys.stderr)
        return 1
    except (OSError, EOFError, asyncio.IncompleteReadError) as e:
        print(f"kbroker healthcheck: {host}:{port}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if code != 0:
        print(f"kbroker healthcheck: {host}:{port}: ApiVersions error code {code}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
