"""``kbroker topics``: list, describe, create, delete topics and add partitions, like kafka-topics.sh.

    kbroker topics [-b H:P] list [--exclude-internal]
    kbroker topics describe [--topic T] [--exclude-internal]
    kbroker topics create --topic T [--partitions N] [--replication-factor R] [--config k=v ...] [--if-not-exists]
    kbroker topics delete --topic T [--if-exists]
    kbroker topics alter --topic T --partitions N [--if-exists]

Kafka's form works too: the action as a flag (``kbroker topics --create --topic T ...``).

Talks to the cluster with confluent-kafka's AdminClient (Metadata, CreateTopics, DeleteTopics,
CreatePartitions, DescribeConfigs). ``describe`` prints Kafka's layout: one line per topic (id,
partition count, replication factor, the topic's overrides) and one per partition (leader,
replicas, ISR). ``--if-not-exists`` makes ``create`` of an existing topic a no-op, ``--if-exists``
makes ``delete``/``alter`` of a missing one a no-op, as in Kafka. A name Kafka would refuse (empty,
``.``/``..``, over 249 characters, other characters than ASCII alphanumerics, ``.``, ``_``, ``-``)
is reported as invalid with Kafka's message before any request. Deviation: ``--topic`` names one
topic exactly (Kafka also takes a regex).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from cli.common import (
    TIMEOUT_S,
    CliError,
    add_connection_options,
    admin_client,
    check_topic_name,
    cluster_metadata,
    kafka_action_form,
    parse_key_values,
    require_topic,
    run_tool,
    wait,
)

PROG = "kbroker topics"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="List, describe, create, delete and alter topics.")
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="topic names")
    ls.add_argument("--exclude-internal", action="store_true", help="leave out __consumer_offsets etc.")
    d = sub.add_parser("describe", help="partitions, leaders, replicas, ISR and config overrides")
    d.add_argument("--topic", help="one topic (default: all)")
    d.add_argument("--exclude-internal", action="store_true")
    c = sub.add_parser("create", help="create a topic")
    c.add_argument("--topic", required=True)
    c.add_argument("--partitions", type=int, default=-1, help="default: the broker's num.partitions")
    c.add_argument("--replication-factor", type=int, default=-1,
                   help="default: the broker's default.replication.factor")
    c.add_argument("--config", action="append", metavar="KEY=VALUE", help="a topic config (repeatable)")
    c.add_argument("--if-not-exists", action="store_true", help="do nothing if the topic exists")
    de = sub.add_parser("delete", help="delete a topic")
    de.add_argument("--topic", required=True)
    a = sub.add_parser("alter", help="increase the partition count")
    a.add_argument("--topic", required=True)
    a.add_argument("--partitions", type=int, required=True, help="the new total partition count")
    for x in (de, a):
        x.add_argument("--if-exists", action="store_true", help="do nothing if the topic does not exist")
    add_connection_options(p, sub)
    return p


def _list(admin: Any, args: argparse.Namespace, out: TextIO) -> int:
    md = cluster_metadata(admin)
    for name in sorted(md.topics):
        if args.exclude_internal and name.startswith("__"):
            continue
        out.write(name + "\n")
    return 0


def _describe(admin: Any, args: argparse.Namespace, out: TextIO) -> int:
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

    md = cluster_metadata(admin)
    if args.topic:
        require_topic(md, args.topic)
        names = [args.topic]
    else:
        names = sorted(n for n in md.topics if not (args.exclude_internal and n.startswith("__")))
    if not names:
        return 0
    descs = admin.describe_topics(TopicCollection(names), request_timeout=TIMEOUT_S)
    resources = [ConfigResource(ResourceType.TOPIC, n) for n in names]
    configs = admin.describe_configs(resources, request_timeout=TIMEOUT_S)
    for name, res in zip(names, resources, strict=True):
        desc = wait(descs[name], f"describing topic {name}")
        entries = wait(configs[res], f"describing the configs of topic {name}")
        overrides = ",".join(f"{k}={'<sensitive>' if e.is_sensitive else e.value}"
                             for k, e in sorted(entries.items())
                             if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
        rf = len(desc.partitions[0].replicas) if desc.partitions else 0
        out.write(f"Topic: {name}\tTopicId: {desc.topic_id}\tPartitionCount: {len(desc.partitions)}\t"
                  f"ReplicationFactor: {rf}\tConfigs: {overrides}\n")
        for p in sorted(desc.partitions, key=lambda p: p.id):
            leader = p.leader.id if p.leader is not None else "none"
            out.write(f"\tTopic: {name}\tPartition: {p.id}\tLeader: {leader}\t"
                      f"Replicas: {','.join(str(r.id) for r in p.replicas)}\t"
                      f"Isr: {','.join(str(r.id) for r in p.isr)}\n")
    return 0


def _create(admin: Any, args: argparse.Namespace, out: TextIO) -> int:
    from confluent_kafka.admin import NewTopic

    if args.partitions == 0 or args.partitions < -1:
        raise CliError("--partitions must be at least 1")
    if args.replication_factor == 0 or args.replication_factor < -1:
        raise CliError("--replication-factor must be at least 1")
    topic = NewTopic(args.topic, args.partitions, args.replication_factor,
                     config=parse_key_values(args.config, "--config"))
    fs = admin.create_topics([topic], request_timeout=TIMEOUT_S, operation_timeout=TIMEOUT_S)
    try:
        wait(fs[args.topic], f"creating topic {args.topic}")
    except CliError as e:
        if args.if_not_exists and "TOPIC_ALREADY_EXISTS" in str(e):
            return 0  # Kafka's --if-not-exists: nothing to do, nothing printed
        raise
    out.write(f"Created topic {args.topic}.\n")
    return 0


def _exists(admin: Any, args: argparse.Namespace) -> bool:
    """Whether --topic exists; a missing one is an error unless --if-exists."""
    md = cluster_metadata(admin)
    if args.if_exists:
        check_topic_name(args.topic)
        t = md.topics.get(args.topic)
        return t is not None and (t.error is None or t.error.code() == 0)
    require_topic(md, args.topic)
    return True


def _delete(admin: Any, args: argparse.Namespace, out: TextIO) -> int:
    if not _exists(admin, args):
        return 0
    fs = admin.delete_topics([args.topic], request_timeout=TIMEOUT_S, operation_timeout=TIMEOUT_S)
    wait(fs[args.topic], f"deleting topic {args.topic}")
    out.write(f"Deleted topic {args.topic}.\n")
    return 0


def _alter(admin: Any, args: argparse.Namespace, out: TextIO) -> int:
    from confluent_kafka.admin import NewPartitions

    if not _exists(admin, args):
        return 0
    fs = admin.create_partitions([NewPartitions(args.topic, args.partitions)], request_timeout=TIMEOUT_S,
                                 operation_timeout=TIMEOUT_S)
    wait(fs[args.topic], f"altering topic {args.topic}")
    out.write(f"Topic {args.topic} now has {args.partitions} partitions.\n")
    return 0


ACTIONS = {"list": _list, "describe": _describe, "create": _create, "delete": _delete, "alter": _alter}


def _run(args: argparse.Namespace, out: TextIO) -> int:
    if args.command == "create":
        check_topic_name(args.topic)  # Kafka's message for an invalid name, before any request
    return ACTIONS[args.command](admin_client(args), args, out)


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(kafka_action_form(argv, list(ACTIONS)))
    return run_tool(f"{PROG} {args.command}", lambda: _run(args, out or sys.stdout))


if __name__ == "__main__":
    sys.exit(main())
