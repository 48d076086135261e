"""``kbroker features``: describe and change finalized feature levels, like Kafka's kafka-features.sh.

    kbroker features [-b H:P] [--command-config F] describe
    kbroker features upgrade --feature transaction.version=2 [--dry-run]
    kbroker features downgrade --feature transaction.version=1 [--unsafe] [--dry-run]

``describe`` reads ApiVersions v3 (supported and finalized features) and prints one line per
feature in Kafka's format (``Feature: .. SupportedMinVersion: .. SupportedMaxVersion: ..
FinalizedVersionLevel: .. Epoch: ..``). ``upgrade``/``downgrade`` send UpdateFeatures v1 (upgrade
type 1, or 2 safe / 3 ``--unsafe`` downgrade); ``--dry-run`` sets ``validate_only``.
The connection options go before or after the action; the connection opens within 5 s and each
request is answered within 15 s (cli/protocol_session.py), or the tool fails with one line that
says which. Exit status: 0 on success, 1 when the broker refused or could not be reached, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from kafka.protocol.admin import UpdateFeaturesRequest
from kafka.protocol.metadata import ApiVersionsRequest

from cli.common import TIMEOUT_S, CliError, add_connection_options
from cli.protocol_session import BoundedClient, ProtocolSession, require_plaintext
from protocol.errors import ErrorCode

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


def _feature(item: str) -> tuple[str, int]:
    name, sep, level = item.partition("=")
    if not sep or not name or not level.lstrip("-").isdigit():
        raise argparse.ArgumentTypeError(f"expected FEATURE=LEVEL, got {item!r}")
    return name, int(level)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kbroker features", description="Describe or change finalized feature levels.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("describe", help="supported and finalized features")
    for name, what in (("upgrade", "raise"), ("downgrade", "lower")):
        a = sub.add_parser(name, help=f"{what} finalized feature levels")
        a.add_argument("--feature", type=_feature, action="append", required=True, metavar="FEATURE=LEVEL")
        a.add_argument("--dry-run", action="store_true", help="validate only")
        if name == "downgrade":
            a.add_argument("--unsafe", action="store_true", help="allow a lossy downgrade")
    add_connection_options(p, sub)
    return p


async def _describe(client: BoundedClient) -> list[str]:
    resp = await client.request(ApiVersionsRequest(client_software_name="kbroker-features",
                                                   client_software_version="1", version=3), 3)
    if resp.error_code:
        raise CliError(f"ApiVersions failed: {ErrorCode(resp.error_code).name}")
    finalized = {f.name: f.max_version_level for f in resp.finalized_features or []}
    return [f"Feature: {f.name}\tSupportedMinVersion: {f.min_version}\tSupportedMaxVersion: {f.max_version}\t"
            f"FinalizedVersionLevel: {finalized.get(f.name, 0)}\tEpoch: {resp.finalized_features_epoch}"
            for f in sorted(resp.supported_features or [], key=lambda f: f.name)]


async def _update(client: BoundedClient, args: argparse.Namespace) -> list[str]:
    kind = UPGRADE if args.command == "upgrade" else (UNSAFE_DOWNGRADE if args.unsafe else SAFE_DOWNGRADE)
    K = UpdateFeaturesRequest.FeatureUpdateKey
    req = UpdateFeaturesRequest(version=1, timeout_ms=int(TIMEOUT_S * 1000), validate_only=args.dry_run,
                                feature_updates=[K(version=1, feature=n, max_version_level=lvl, upgrade_type=kind)
                                                 for n, lvl in args.feature])
    resp = await client.request(req, 1)
    if resp.error_code:
        raise CliError(f"{ErrorCode(resp.error_code).name}: {resp.error_message}")
    verb = "can be" if args.dry_run else "was"
    done = "upgraded" if kind == UPGRADE else "downgraded"
    return [f"{n} {verb} {done} to {lvl}." for n, lvl in args.feature]


async def _run(args: argparse.Namespace) -> list[str]:
    session = ProtocolSession(args.bootstrap_server, "kbroker-features")
    try:
        client = await session.client()
        return await (_describe(client) if args.command == "describe" else _update(client, args))
    finally:
        await session.close()


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        require_plaintext(args.command_config, "kbroker features")
        lines = asyncio.run(_run(args))
    except (CliError, OSError, ValueError) as e:
        # Every failure says why: the broker's error, a refused or silent connection, a bad file.
        print(f"kbroker features {args.command}: {e}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
