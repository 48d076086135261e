"""``kbroker users``: SCRAM credentials, like ``kafka-configs --entity-type users`` (and, for the first
user of a cluster whose listeners all require SASL, like ``kafka-storage format --add-scram``).

    kbroker users [-b H:P] [--command-config F] list [--user U ...]
    kbroker users add --user U (--password P | --add-config 'SCRAM-SHA-512=[iterations=8192,password=P]')
                      [--mechanism SCRAM-SHA-256|SCRAM-SHA-512 ...] [--iterations N]
    kbroker users delete --user U [--mechanism M ...]        (default: every mechanism the user has)
    kbroker users bootstrap --config server.properties [--override k=v ...] --user U --password P
                            [--mechanism M ...] [--iterations N]

``list`` / ``add`` / ``delete`` use DescribeUserScramCredentials / AlterUserScramCredentials through
confluent-kafka's AdminClient (the client salts and hashes: the password never reaches the broker).
``list`` prints Kafka's line ``SCRAM credential configs for user-principal 'U' are SCRAM-SHA-512=iterations=4096``.
``bootstrap`` writes the credential straight into the broker's metadata store (its first log dir)
while the broker is stopped: it takes the log dir's lock, so it refuses while a broker runs there.
In cluster mode (``kbroker.etcd.endpoints`` set) it writes to etcd instead, which every broker reads.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from pathlib import Path

from cli.common import CliError, add_connection_options, admin_client, run_tool, wait

PROG = "kbroker users"
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Manage SCRAM credentials of users.")
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="users with SCRAM credentials, and their mechanisms and iterations")
    ls.add_argument("--user", action="append", help="only this user (repeatable)")
    for name, text in (("add", "create or replace a user's SCRAM credentials"),
                       ("bootstrap", "write a credential into a stopped broker's metadata store")):
        a = sub.add_parser(name, help=text)
        a.add_argument("--user", required=True)
        a.add_argument("--password")
        a.add_argument("--mechanism", action="append", choices=MECHANISMS,
                       help="default SCRAM-SHA-512 (repeatable)")
        a.add_argument("--iterations", type=int, default=4096, help="4096..16384 (default 4096)")
        if name == "add":
            a.add_argument("--add-config", metavar="'SCRAM-SHA-512=[password=P]'",
                           help="kafka-configs form: MECH=[iterations=N,password=P],...")
        else:
            a.add_argument("--config", help="the broker's server.properties")
            a.add_argument("--override", action="append", metavar="K=V", help="config override, as for serve")
    d = sub.add_parser("delete", help="remove a user's SCRAM credentials")
    d.add_argument("--user", required=True)
    d.add_argument("--mechanism", action="append", choices=MECHANISMS, help="default: all the user has")
    add_connection_options(p, sub)
    return p


def parse_add_config(text: str) -> list[tuple[str, int, str]]:
    """``SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=x]`` ->
    [(mechanism, iterations, password)] (iterations default 4096, as kafka-configs)."""
    out = []
    for mech, body in re.findall(r"\s*(SCRAM-SHA-(?:256|512))\s*=\s*\[([^\]]*)\]\s*,?", text):
        opts = dict(part.split("=", 1) for part in body.split(",") if "=" in part)
        if "password" not in opts:
            raise CliError(f"--add-config {mech}: password=... is required")
        out.append((mech, int(opts.get("iterations", 4096)), opts["password"]))
    if not out:
        raise CliError("--add-config expects MECHANISM=[iterations=N,password=P] with MECHANISM "
                       "SCRAM-SHA-256 or SCRAM-SHA-512")
    return out


def _wanted(args: argparse.Namespace) -> list[tuple[str, int, str]]:
    if getattr(args, "add_config", None):
        return parse_add_config(args.add_config)
    if not args.password:
        raise CliError("--password (or --add-config) is required")
    return [(m, args.iterations, args.password) for m in (args.mechanism or ["SCRAM-SHA-512"])]


def _alter_one_by_one(admin, alterations: list, what: str) -> None:
    """One request per mechanism: Kafka's controller refuses a user altered twice in one request
    (DUPLICATE_RESOURCE), so two mechanisms of one user cannot go together."""
    for alteration in alterations:
        for user, fut in admin.alter_user_scram_credentials([alteration]).items():
            wait(fut, f"{what} user {user}")


def cmd_list(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    result = admin.describe_user_scram_credentials(args.user)
    described = {}
    if isinstance(result, dict):  # users named: one future per user
        for user, fut in result.items():
            described[user] = wait(fut, f"describe user {user}")
    else:
        described = wait(result, "describe users")
    for user in sorted(described):
        infos = ",".join(f"{i.mechanism.name.replace('_', '-')}=iterations={i.iterations}"
                         for i in described[user].scram_credential_infos)
        print(f"SCRAM credential configs for user-principal '{user}' are {infos}")
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    alterations = [UserScramCredentialUpsertion(args.user, ScramCredentialInfo(
        ScramMechanism[mech.replace("-", "_")], iterations), password.encode())
        for mech, iterations, password in _wanted(args)]
    admin = admin_client(args)
    _alter_one_by_one(admin, alterations, "alter")
    print(f"Completed updating config for user {args.user}.")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import ScramMechanism, UserScramCredentialDeletion

    admin = admin_client(args)
    mechanisms = args.mechanism
    if not mechanisms:
        described = admin.describe_user_scram_credentials([args.user])
        desc = wait(described[args.user], f"describe user {args.user}")
        mechanisms = [i.mechanism.name.replace("_", "-") for i in desc.scram_credential_infos]
    deletions = [UserScramCredentialDeletion(args.user, ScramMechanism[m.replace("-", "_")]) for m in mechanisms]
    _alter_one_by_one(admin, deletions, "delete")
    print(f"Completed updating config for user {args.user}.")
    return 0


def cmd_bootstrap(args: argparse.Namespace) -> int:
    # Like kafka-storage format --add-scram, this writes into the broker's own store: it reads the
    # broker's configuration the way `kbroker serve` does.
    from broker.serve import load_config
    from security import scram_credentials as scram
    from storage.checkpoints import atomic_write_bytes
    from storage.dir_lock import DirLock

    config = load_config(args.config, args.override)
    if config.get("kbroker.etcd.endpoints"):
        upserts = _credentials(args)
        asyncio.run(_bootstrap_etcd(config, upserts))
        print(f"Wrote SCRAM credentials for user {args.user} ({', '.join(m for _, m, _ in upserts)}) to etcd "
              f"({config.get('kbroker.etcd.endpoints')})")
        return 0
    log_dir = Path(config.log_dirs[0]).resolve()
    log_dir.mkdir(parents=True, exist_ok=True)
    lock = DirLock.acquire(log_dir)  # DirLockedError (naming the broker's pid) while a broker runs there
    try:
        path = log_dir / scram.FILE_NAME
        creds = scram.decode(path.read_bytes()) if path.exists() else {}
        upserts = _credentials(args)
        atomic_write_bytes(path, scram.encode(scram.applied(creds, [], upserts)))
    finally:
        lock.release()
    print(f"Wrote SCRAM credentials for user {args.user} ({', '.join(m for _, m, _ in upserts)}) to {path}")
    return 0


def _credentials(args: argparse.Namespace) -> list:
    from security import scram_credentials as scram

    upserts = []
    for mech, iterations, password in _wanted(args):
        if not scram.MIN_ITERATIONS <= iterations <= scram.MAX_ITERATIONS:
            raise CliError(f"--iterations must be within {scram.MIN_ITERATIONS}..{scram.MAX_ITERATIONS}")
        upserts.append((args.user, mech, scram.from_password(mech, password, iterations)))
    return upserts


async def _bootstrap_etcd(config, upserts: list) -> None:
    """Cluster mode: the credentials live in etcd, where every broker's view reads them; written through
    the same EtcdMetadataStore a broker uses (no broker needs to be stopped)."""
    from cluster.etcd_keys import KeyLayout, get_or_create_cluster_id
    from cluster.etcd_session import EtcdSession
    from cluster.etcd_store import EtcdMetadataStore

    settings = {name: config.get(name) for name in (
        "kbroker.etcd.endpoints", "kbroker.etcd.username", "kbroker.etcd.password",
        "broker.session.timeout.ms", "broker.heartbeat.interval.ms")}
    session = await EtcdSession.from_config(settings).open()
    try:
        store = EtcdMetadataStore(session, KeyLayout(await get_or_create_cluster_id(session.client)), config.node_id)
        await store.start()
        try:
            await store.alter_scram_credentials([], upserts)
        finally:
            await store.stop()
    finally:
        await session.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    fn = {"list": cmd_list, "add": cmd_add, "delete": cmd_delete, "bootstrap": cmd_bootstrap}[args.command]
    return run_tool(PROG, lambda: fn(args))
