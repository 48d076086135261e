"""``kbroker acls``: ACLs, like Kafka's ``kafka-acls.sh`` (CreateAcls / DescribeAcls / DeleteAcls through
confluent-kafka's AdminClient).

    kbroker acls [-b H:P] [--command-config F] add (--allow-principal P | --deny-principal P ...)
                 [--allow-host H] [--deny-host H] [--operation OP ...] [--producer [--idempotent]] [--consumer]
                 RESOURCES [--resource-pattern-type LITERAL|PREFIXED]
    kbroker acls list [RESOURCES] [--principal P] [--resource-pattern-type ANY|MATCH|LITERAL|PREFIXED]
    kbroker acls remove [RESOURCES] [--allow-principal P | --deny-principal P] [--operation OP ...]
                 [--resource-pattern-type ...] [--force]

RESOURCES: ``--topic T``, ``--group G``, ``--transactional-id ID`` (each repeatable; ``*`` for all) and
``--cluster``. As kafka-acls: ``--operation`` defaults to All; hosts default to ``*``; ``--producer``
grants Write, Describe and Create on the topics (Write and Describe on the transactional ids,
IdempotentWrite on the cluster with ``--idempotent``); ``--consumer`` Read and Describe on the topics
and Read on the groups. Without an authorizer on the brokers every action fails with Kafka's
SECURITY_DISABLED ("No Authorizer is configured."). ``add`` prints the ACLs it created; ``list`` prints Kafka's
"Current ACLs for resource `ResourcePattern(...)`:" blocks; ``remove`` deletes every ACL matching the
filter (with no resource option: all of them) without asking (``--force`` is accepted for
compatibility) and prints what it removed.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from typing import Any

from cli.common import CliError, add_connection_options, admin_client, run_tool, wait

PROG = "kbroker acls"
CLUSTER_NAME = "kafka-cluster"
# kafka-acls names (AclOperation in CamelCase) -> confluent-kafka's AclOperation member names.
OPERATIONS = {"all": "ALL", "read": "READ", "write": "WRITE", "create": "CREATE", "delete": "DELETE",
              "alter": "ALTER", "describe": "DESCRIBE", "clusteraction": "CLUSTER_ACTION",
              "describeconfigs": "DESCRIBE_CONFIGS", "alterconfigs": "ALTER_CONFIGS",
              "idempotentwrite": "IDEMPOTENT_WRITE", "any": "ANY"}
PATTERNS = ("LITERAL", "PREFIXED", "MATCH", "ANY")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Manage ACLs (kafka-acls).")
    sub = p.add_subparsers(dest="command", required=True)
    for name, text in (("add", "create ACLs"), ("list", "list ACLs"), ("remove", "delete matching ACLs")):
        a = sub.add_parser(name, help=text)
        a.add_argument("--topic", action="append", default=[], metavar="T")
        a.add_argument("--group", action="append", default=[], metavar="G")
        a.add_argument("--transactional-id", dest="transactional_id", action="append", default=[], metavar="ID")
        a.add_argument("--cluster", action="store_true", help="the cluster resource")
        a.add_argument("--resource-pattern-type", dest="pattern", type=str.upper, choices=PATTERNS,
                       default=None, help="LITERAL (default) or PREFIXED; list/remove also ANY and MATCH")
        if name == "list":
            a.add_argument("--principal", action="append", default=[], help="only ACLs of this principal")
            continue
        a.add_argument("--allow-principal", dest="allow_principal", action="append", default=[], metavar="P")
        a.add_argument("--deny-principal", dest="deny_principal", action="append", default=[], metavar="P")
        a.add_argument("--allow-host", dest="allow_host", action="append", default=[], metavar="H")
        a.add_argument("--deny-host", dest="deny_host", action="append", default=[], metavar="H")
        a.add_argument("--operation", action="append", default=[], type=_operation,
                       help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                            "AlterConfigs, IdempotentWrite, All (repeatable; default All)")
        if name == "add":
            a.add_argument("--producer", action="store_true", help="the ACLs a producer needs")
            a.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite too")
            a.add_argument("--consumer", action="store_true", help="the ACLs a consumer needs (with --group)")
        else:
            a.add_argument("--force", action="store_true", help="accepted for compatibility (never asks)")
    add_connection_options(p, sub)
    return p


def _operation(text: str) -> str:
    key = text.replace("_", "").replace("-", "").lower()
    if key not in OPERATIONS:
        raise argparse.ArgumentTypeError(f"unknown operation {text!r}")
    return OPERATIONS[key]


def _resources(args: argparse.Namespace) -> list[tuple[str, str]]:
    out = [("TOPIC", t) for t in args.topic] + [("GROUP", g) for g in args.group]
    out += [("TRANSACTIONAL_ID", t) for t in args.transactional_id]
    if args.cluster:
        out.append(("BROKER", CLUSTER_NAME))  # confluent-kafka names the cluster resource type BROKER
    return out


def _entries(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """(principal, host, permission) for each principal and host given."""
    out = []
    for principals, hosts, perm in ((args.allow_principal, args.allow_host, "ALLOW"),
                                    (args.deny_principal, args.deny_host, "DENY")):
        for principal in principals:
            out += [(principal, h, perm) for h in (hosts or ["*"])]
    return out


def _wanted(args: argparse.Namespace) -> list[tuple[str, str, str, str, str, str]]:
    """(resource type, name, principal, host, operation, permission) for every ACL ``add`` creates."""
    entries = _entries(args)
    if not entries:
        raise CliError("give --allow-principal or --deny-principal")
    rows: list[tuple[str, str, str]] = []  # (resource type, name, operation)
    if args.producer or args.consumer:
        if args.operation:
            raise CliError("--operation cannot be combined with --producer / --consumer")
        if args.producer:
            if not args.topic:
                raise CliError("--producer needs --topic")
            rows += [("TOPIC", t, op) for t in args.topic for op in ("WRITE", "DESCRIBE", "CREATE")]
            rows += [("TRANSACTIONAL_ID", t, op) for t in args.transactional_id for op in ("WRITE", "DESCRIBE")]
            if args.idempotent:
                rows.append(("BROKER", CLUSTER_NAME, "IDEMPOTENT_WRITE"))
        if args.consumer:
            if not args.topic or not args.group:
                raise CliError("--consumer needs --topic and --group")
            rows += [("TOPIC", t, op) for t in args.topic for op in ("READ", "DESCRIBE")]
            rows += [("GROUP", g, "READ") for g in args.group]
    else:
        resources = _resources(args)
        if not resources:
            raise CliError("give a resource: --topic, --group, --transactional-id or --cluster")
        rows = [(rt, name, op) for rt, name in resources for op in (args.operation or ["ALL"])]
    return [(rt, name, principal, host, op, perm) for rt, name, op in dict.fromkeys(rows)
            for principal, host, perm in entries]


def _describe(binding: Any) -> str:
    return (f"(principal={binding.principal}, host={binding.host}, operation={binding.operation.name}, "
            f"permissionType={binding.permission_type.name})")


def _print_grouped(bindings: list[Any], heading: str) -> None:
    by_resource: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
    for b in bindings:
        rtype = "CLUSTER" if b.restype.name == "BROKER" else b.restype.name
        by_resource[(rtype, b.name, b.resource_pattern_type.name)].append(b)
    for (rtype, name, pattern), items in sorted(by_resource.items()):
        print(f"{heading} `ResourcePattern(resourceType={rtype}, name={name}, patternType={pattern})`:")
        for b in sorted(items, key=_describe):
            print(f" \t{_describe(b)} ")
        print()


def cmd_add(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    pattern = args.pattern or "LITERAL"
    if pattern not in ("LITERAL", "PREFIXED"):
        raise CliError(f"--resource-pattern-type {pattern} cannot be used to add ACLs (LITERAL or PREFIXED)")
    bindings = [AclBinding(ResourceType[rt], name, ResourcePatternType[pattern], principal, host, AclOperation[op],
                           AclPermissionType[perm]) for rt, name, principal, host, op, perm in _wanted(args)]
    admin = admin_client(args)
    for binding, fut in admin.create_acls(bindings).items():
        wait(fut, f"create ACL {_describe(binding)} on {binding.name}")
    _print_grouped(bindings, "Adding ACLs for resource")
    return 0


def _filters(args: argparse.Namespace, principals: list[tuple[str | None, str | None]], operations: list[str]) -> list:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    pattern = ResourcePatternType[args.pattern or ("ANY" if not _resources(args) else "LITERAL")]
    resources = _resources(args) or [("ANY", None)]
    return [AclBindingFilter(ResourceType[rt], name, pattern, principal, None, AclOperation[op],
                             AclPermissionType[perm] if perm else AclPermissionType.ANY)
            for rt, name in resources for principal, perm in principals for op in operations]


def _require_authorizer(admin: Any) -> None:
    """librdkafka drops DescribeAcls' top-level error (rdkafka_admin.c reads error_code and goes on),
    so a broker without an authorizer looks like one without ACLs. An empty answer is checked against
    the broker's authorizer.class.name: empty means Kafka's SECURITY_DISABLED, as ``add`` reports."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    from cli.common import cluster_metadata

    brokers = sorted(cluster_metadata(admin).brokers)
    if not brokers:
        return
    res = ConfigResource(ResourceType.BROKER, str(brokers[0]))
    try:
        entries = wait(admin.describe_configs([res])[res], "describe the broker's authorizer")
    except CliError:
        return  # not allowed to see broker configs: then an authorizer is in place
    entry = entries.get("authorizer.class.name")
    if entry is not None and not (entry.value or "").strip():
        raise CliError("describe ACLs: No Authorizer is configured. (SECURITY_DISABLED)")


def cmd_list(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    found: dict[str, Any] = {}
    for flt in _filters(args, [(p, None) for p in args.principal] or [(None, None)], ["ANY"]):
        for b in wait(admin.describe_acls(flt), "describe ACLs"):
            found[str(b)] = b
    if not found:
        _require_authorizer(admin)
    _print_grouped(list(found.values()), "Current ACLs for resource")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    principals = [(p, "ALLOW") for p in args.allow_principal] + [(p, "DENY") for p in args.deny_principal]
    filters = _filters(args, principals or [(None, None)], args.operation or ["ANY"])
    admin = admin_client(args)
    removed: dict[str, Any] = {}
    for fut in admin.delete_acls(filters).values():
        for b in wait(fut, "delete ACLs"):
            removed[str(b)] = b
    _print_grouped(list(removed.values()), "Removed ACLs for resource")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    fn = {"add": cmd_add, "list": cmd_list, "remove": cmd_remove}[args.command]
    return run_tool(PROG, lambda: fn(args))


if __name__ == "__main__":
    sys.exit(main())
