"""The ``kbroker`` command: one table of subcommands, each dispatched to its module's ``main(argv)``.

Every tool is a client of the brokers (cli/*). ``serve`` (broker/serve.py) and ``dump-log``
(storage/dump.py) are the two subcommands that run broker or storage code in this process; they are
imported only when called, so ``kbroker topics ...`` never loads the broker.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NamedTuple


class Subcommand(NamedTuple):
    help: str
    run: Callable[[list[str]], int]


def _serve(argv: list[str]) -> int:
    from broker.serve import main

    return main(argv)


def _dump_log(argv: list[str]) -> int:
    from cli.common import reader_left
    from storage.dump import main

    try:
        code = main(argv)
        sys.stdout.flush()
    except BrokenPipeError:  # `kbroker dump-log ... | head`: the reader left
        return reader_left()
    return code


def _groups(argv: list[str]) -> int:
    from cli.groups import main

    return main(argv)


def _share_groups(argv: list[str]) -> int:
    from cli.share_groups import main

    return main(argv)


def _transactions(argv: list[str]) -> int:
    from cli.transactions import main

    return main(argv)


def _features(argv: list[str]) -> int:
    from cli.features import main

    return main(argv)


def _topics(argv: list[str]) -> int:
    from cli.topics import main

    return main(argv)


def _configs(argv: list[str]) -> int:
    from cli.configs import main

    return main(argv)


def _console_producer(argv: list[str]) -> int:
    from cli.console_producer import main

    return main(argv)


def _console_consumer(argv: list[str]) -> int:
    from cli.console_consumer import main

    return main(argv)


def _get_offsets(argv: list[str]) -> int:
    from cli.get_offsets import main

    return main(argv)


def _perf(argv: list[str]) -> int:
    from cli.perf import main

    return main(argv)


def _users(argv: list[str]) -> int:
    from cli.users import main

    return main(argv)


def _acls(argv: list[str]) -> int:
    from cli.acls import main

    return main(argv)


def _cluster(argv: list[str]) -> int:
    from cli.cluster import main

    return main(argv)


def _leader_election(argv: list[str]) -> int:
    from cli.leader_election import main

    return main(argv)


def _reassign_partitions(argv: list[str]) -> int:
    from cli.reassign_partitions import main

    return main(argv)


def _healthcheck(argv: list[str]) -> int:
    from cli.healthcheck import main

    return main(argv)


def _schemas(argv: list[str]) -> int:
    from cli.schemas import main

    return main(argv)


SUBCOMMANDS: dict[str, Subcommand] = {
    "serve": Subcommand("start a broker (kbroker serve --help lists its configs)", _serve),
    "dump-log": Subcommand("decode .log/.index/.timeindex/.txnindex/.snapshot files (kafka-dump-log)", _dump_log),
    "topics": Subcommand("topics: list | describe | create | delete | alter (kafka-topics)", _topics),
    "configs": Subcommand("topic, broker and quota configs: describe | alter (kafka-configs)", _configs),
    "console-producer": Subcommand("send lines from stdin or --file as records", _console_producer),
    "console-consumer": Subcommand("print the records of a topic", _console_consumer),
    "groups": Subcommand("consumer groups: list | describe | reset-offsets | delete (kafka-consumer-groups)",
                         _groups),
    "share-groups": Subcommand("share groups (KIP-932): list | describe | reset-offsets | delete-offsets | delete "
                               "(kafka-share-groups)", _share_groups),
    "transactions": Subcommand("transactions: list | describe | describe-producers | abort | find-hanging "
                               "| force-terminate (kafka-transactions)", _transactions),
    "get-offsets": Subcommand("partition offsets for --time -1|-2|-3|TIMESTAMP (kafka-get-offsets)", _get_offsets),
    "perf": Subcommand("load tests: produce | consume (kafka-producer/consumer-perf-test)", _perf),
    "features": Subcommand("feature levels: describe | upgrade | downgrade (kafka-features)", _features),
    "users": Subcommand("SCRAM credentials: list | add | delete | bootstrap (before the first start)", _users),
    "acls": Subcommand("ACLs: add | list | remove (kafka-acls)", _acls),
    "leader-election": Subcommand("elect preferred or unclean leaders (kafka-leader-election)", _leader_election),
    "reassign-partitions": Subcommand("move replicas: --generate | --execute | --verify | --cancel | --list "
                                      "(kafka-reassign-partitions)", _reassign_partitions),
    "cluster": Subcommand("a local cluster (etcd + N brokers): up | status | down --dir DIR", _cluster),
    "healthcheck": Subcommand("exit 0 when the local broker answers ApiVersions (container health)", _healthcheck),
    "schemas": Subcommand("Schema Registry: list | get | register | delete | compatibility | config", _schemas),
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kbroker")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    width = max(map(len, SUBCOMMANDS))
    listing = "\n".join(f"  {name:<{width}}  {sub.help}" for name, sub in SUBCOMMANDS.items())
    parser = argparse.ArgumentParser(
        prog="kbroker", description="A Kafka-protocol-compatible transactional broker and its tools.",
        epilog=f"commands:\n{listing}\n\n`kbroker COMMAND --help` describes one command.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"kbroker {_version()}")
    parser.add_argument("command", metavar="COMMAND", choices=list(SUBCOMMANDS), help="one of the commands below")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the command's own options")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in SUBCOMMANDS:
        # Each command parses all of its options itself, including ones placed before its action.
        return SUBCOMMANDS[argv[0]].run(argv[1:])
    args = build_parser().parse_args(argv)  # --help, --version, or a usage error (exit 2)
    return SUBCOMMANDS[args.command].run(args.args)


if __name__ == "__main__":
    sys.exit(main())
