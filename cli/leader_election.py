"""``kbroker leader-election``: preferred or unclean leader elections, like kafka-leader-election.sh.

    kbroker leader-election [-b H:P] --election-type preferred|unclean --topic T --partition P
    kbroker leader-election --election-type preferred --all-topic-partitions
    kbroker leader-election --election-type preferred --path-to-json-file F   ({"partitions": [{"topic", "partition"}]})

Sends ElectLeaders (API 43) through confluent-kafka's AdminClient and prints Kafka's summary lines:
"Successfully completed leader election (PREFERRED) for partitions t-0, t-1", "Valid replica already
elected for partitions ..." and one "Error completing leader election (...) for partition: t-2: ..."
line per failed partition, which then make the tool fail (exit 1) with "N replica(s) could not be
elected". With ``--all-topic-partitions`` every other partition of the cluster is listed under "Valid
replica already elected" (the controller answers only for the partitions it tried), so the tool always
says what it did. ``--partition`` without ``--topic``, or neither a selection nor ``--all-topic-partitions``,
is refused.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from cli.common import CliError, add_connection_options, admin_client, error_text, run_tool

PROG = "kbroker leader-election"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Elect preferred or unclean leaders (ElectLeaders).")
    p.add_argument("--election-type", required=True, type=str.lower, choices=("preferred", "unclean"))
    p.add_argument("--topic", help="the topic of --partition")
    p.add_argument("--partition", type=int, help="one partition of --topic")
    p.add_argument("--all-topic-partitions", action="store_true", help="every partition of every topic")
    p.add_argument("--path-to-json-file", help='{"partitions": [{"topic": T, "partition": P}, ...]}')
    add_connection_options(p)
    return p


def _from_json(path: str) -> list[tuple[str, int]]:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        return [(str(e["topic"]), int(e["partition"])) for e in doc["partitions"]]
    except FileNotFoundError:
        raise CliError(f"file not found: {path}") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CliError(f"{path}: expected {{\"partitions\": [{{\"topic\": T, \"partition\": P}}]}} ({e!r})") from None


def selection(args: argparse.Namespace) -> list[tuple[str, int]] | None:
    """The partitions asked for, None for all; a CliError for an incomplete or conflicting choice."""
    chosen = [bool(args.topic or args.partition is not None), args.all_topic_partitions, bool(args.path_to_json_file)]
    if sum(chosen) != 1:
        raise CliError("give exactly one of --topic/--partition, --all-topic-partitions, --path-to-json-file")
    if args.all_topic_partitions:
        return None
    if args.path_to_json_file:
        return _from_json(args.path_to_json_file)
    if not args.topic or args.partition is None:
        raise CliError("--topic and --partition go together")
    return [(args.topic, args.partition)]


def _elect(admin: Any, args: argparse.Namespace, out: TextIO) -> int:
    from confluent_kafka import ElectionType, KafkaError, TopicPartition

    from cli.common import wait

    wanted = selection(args)
    kind = ElectionType.PREFERRED if args.election_type == "preferred" else ElectionType.UNCLEAN
    label = kind.name
    parts = None if wanted is None else [TopicPartition(t, p) for t, p in wanted]
    # confluent-kafka 2.16 refuses request_timeout/operation_timeout here (its C binding's keyword list
    # is short), so the broker-side wait is librdkafka's default; the answer is bounded by wait().
    future = admin.elect_leaders(kind, parts)
    results = wait(future, "electing leaders")
    done, noop, failed = [], [], []
    for tp, err in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        name = f"{tp.topic}-{tp.partition}"
        # Values are KafkaError objects (a KafkaException in the docs: both are handled).
        inner = err.args[0] if isinstance(err, Exception) and err.args else err
        code = inner.code() if isinstance(inner, KafkaError) else None
        if err is None:
            done.append(name)
        elif code == KafkaError.ELECTION_NOT_NEEDED:
            noop.append(name)
        else:
            failed.append((name, error_text(err)))
    if wanted is None:
        # With no partition list the controller answers only for the partitions it tried to elect
        # (Kafka drops ELECTION_NOT_NEEDED there), so a balanced cluster would print nothing: the
        # other partitions of the cluster already have their leader.
        from cli.common import cluster_metadata

        seen = {(tp.topic, tp.partition) for tp in results}
        noop += [f"{t}-{p}" for t, md in sorted(cluster_metadata(admin).topics.items()) for p in sorted(md.partitions)
                 if (t, p) not in seen]
        if not (done or noop or failed):
            out.write("No partitions to elect a leader for (the cluster has no topics)\n")
    if done:
        out.write(f"Successfully completed leader election ({label}) for partitions {', '.join(done)}\n")
    if noop:
        out.write(f"Valid replica already elected for partitions {', '.join(noop)}\n")
    for name, text in failed:
        out.write(f"Error completing leader election ({label}) for partition: {name}: {text}\n")
    if failed:
        out.flush()
        raise CliError(f"{len(failed)} replica(s) could not be elected")
    return 0


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_tool(PROG, lambda: _elect_checked(args, out or sys.stdout))


def _elect_checked(args: argparse.Namespace, out: TextIO) -> int:
    selection(args)  # refuse a bad selection before connecting
    return _elect(admin_client(args), args, out)
