"""`kbroker healthcheck`: exit 0 when the local broker answers ApiVersions, 1 otherwise.

The container image's HEALTHCHECK. It reads the broker's own configuration the way ``kbroker serve``
does (a properties file, ``--from-env`` for the ``KBROKER_*`` variables, ``--override``) and asks the
first listener that speaks ApiVersions before any handshake (PLAINTEXT or SASL_PLAINTEXT; Kafka
answers ApiVersions before SASL authentication). A listener bound to all interfaces is reached on
127.0.0.1. ``--bootstrap HOST:PORT`` skips the configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from kafka.protocol.metadata import ApiVersionsRequest

from protocol.client import ProtocolClient

_NO_HANDSHAKE = ("PLAINTEXT", "SASL_PLAINTEXT")


def _target(args: argparse.Namespace) -> tuple[str, int]:
    if args.bootstrap:
        host, _, port = args.bootstrap.rpartition(":")
        return host or "127.0.0.1", int(port)
    from broker.config import BrokerConfig
    from broker.env_config import configs_from_env

    props = configs_from_env(os.environ) if args.from_env else {}
    for item in args.override or []:
        k, _, v = item.partition("=")
        props[k.strip()] = v.strip()
    config = BrokerConfig.load(args.config, props)
    pmap = config.security_protocol_map
    for li in config.listeners:
        if pmap.get(li.name, li.name) in _NO_HANDSHAKE:
            return (li.host if li.bind_host else "127.0.0.1"), li.port
    raise SystemExit("kbroker healthcheck: no PLAINTEXT or SASL_PLAINTEXT listener; use --bootstrap")


async def _probe(host: str, port: int, timeout: float) -> int:
    async def ask() -> int:
        async with ProtocolClient(host, port, client_id="kbroker-healthcheck") as client:
            resp = await client.request(ApiVersionsRequest(version=0), 0)
            return int(resp.error_code)

    return await asyncio.wait_for(ask(), timeout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kbroker healthcheck", description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", help="the broker's server.properties")
    parser.add_argument("--from-env", action="store_true", help="apply KBROKER_* variables, as serve --from-env")
    parser.add_argument("--override", action="append", metavar="KEY=VALUE")
    parser.add_argument("--bootstrap", help="HOST:PORT to ask instead of the configured listener")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds (default 5)")
    args = parser.parse_args(argv)
    host, port = _target(args)
    try:
        code = asyncio.run(_probe(host, port, args.timeout))
    except (OSError, TimeoutError, EOFError, asyncio.IncompleteReadError) as e:
        print(f"kbroker healthcheck: {host}:{port}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if code != 0:
        print(f"kbroker healthcheck: {host}:{port}: ApiVersions error code {code}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
