"""``kbroker reassign-partitions``: move partition replicas, like kafka-reassign-partitions.sh.

    kbroker reassign-partitions [-b H:P] --execute --reassignment-json-file F
    kbroker reassign-partitions --verify --reassignment-json-file F
    kbroker reassign-partitions --cancel --reassignment-json-file F
    kbroker reassign-partitions --list
    kbroker reassign-partitions --generate --topics-to-move-json-file T --broker-list 1,2,3 [--disable-rack-aware]

F is Kafka's format: {"version": 1, "partitions": [{"topic": T, "partition": P, "replicas": [1, 2, 3]}]}
(``log_dirs`` is accepted and ignored). ``--execute`` prints the current assignment of those
partitions in the same format (to roll back with) and starts the reassignments
(AlterPartitionReassignments); ``--verify`` tells per partition whether it is done ("Reassignment
of partition t-0 is completed.") or still moving; ``--cancel`` cancels the ongoing ones of the file;
``--list`` prints the ongoing ones (ListPartitionReassignments) as "t-0: replicas: 3,1. adding: 3.
removing: 1.". ``--generate`` reads Kafka's topics file ({"version": 1, "topics": [{"topic": T}]}) and
prints the current assignment of those topics and a proposed one over ``--broker-list`` (a file for
``--execute``), placed as new topics are (cluster/placement.py: round robin from a random start,
rack-aware unless ``--disable-rack-aware``; Kafka refuses a rack-aware plan when only some brokers
have a rack), each topic keeping its partition count and the replication factor of its first
partition. Brokers in the list that are not registered are left out, as Kafka does.

confluent-kafka's AdminClient has no reassignment calls, so the tool speaks the protocol itself
(protocol/client.py) to the first bootstrap server: PLAINTEXT only for now. Any broker of the
cluster accepts the requests. A partition the broker refuses prints its error and makes the tool
fail (exit 1) with one last line; every wait is bounded. Not supported: throttles, ``--additional``,
log dirs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from cli.common import (
    CONNECT_TIMEOUT_S,
    TIMEOUT_S,
    CliError,
    add_connection_options,
    bootstrap_addresses,
    load_properties,
    run_tool,
)

PROG = "kbroker reassign-partitions"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Start, verify, cancel and list partition reassignments.")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--execute", action="store_true", help="start the reassignments of the file")
    action.add_argument("--verify", action="store_true", help="check whether those of the file are done")
    action.add_argument("--cancel", action="store_true", help="cancel the ongoing ones of the file")
    action.add_argument("--list", action="store_true", help="list the ongoing reassignments")
    action.add_argument("--generate", action="store_true",
                        help="propose an assignment of the topics of --topics-to-move-json-file over --broker-list")
    p.add_argument("--reassignment-json-file", metavar="FILE", help='{"version":1,"partitions":[{"topic",...}]}')
    p.add_argument("--topics-to-move-json-file", metavar="FILE", help='{"version":1,"topics":[{"topic":"t"}]}')
    p.add_argument("--broker-list", metavar="IDS", help="comma-separated broker ids for --generate, e.g. 1,2,3")
    p.add_argument("--disable-rack-aware", action="store_true", help="--generate ignores broker racks")
    add_connection_options(p)
    return p


def _load_json(path: str) -> object:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CliError(f"file not found: {path}") from None
    except (OSError, ValueError) as e:
        raise CliError(f"{path}: not a JSON document ({e})") from None


def read_plan(path: str | None, *, need_replicas: bool) -> list[tuple[str, int, list[int]]]:
    """(topic, partition, replicas) of a reassignment file; a CliError naming what is wrong."""
    if not path:
        raise CliError("--reassignment-json-file is required with --execute, --verify and --cancel")
    doc = _load_json(path)
    entries = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise CliError(f"{path}: expected {{\"version\": 1, \"partitions\": [...]}} with at least one partition")
    plan, seen = [], set()
    for e in entries:
        try:
            topic, partition = e["topic"], e["partition"]
            replicas = e.get("replicas") if need_replicas or "replicas" in e else []
            ok = (isinstance(topic, str) and isinstance(partition, int) and isinstance(replicas, list)
                  and all(isinstance(r, int) for r in replicas))
        except (KeyError, TypeError, AttributeError):
            ok = False
        if not ok or (need_replicas and not replicas):
            raise CliError(f"{path}: each partition needs \"topic\", \"partition\" and a \"replicas\" list of broker ids, "
                           f"got {json.dumps(e)}")
        if (topic, partition) in seen:
            raise CliError(f"{path}: partition {topic}-{partition} is listed more than once")
        seen.add((topic, partition))
        plan.append((topic, partition, list(replicas)))
    return plan


def read_topics(path: str | None) -> list[str]:
    """The topics of a --topics-to-move-json-file; a CliError naming what is wrong."""
    if not path:
        raise CliError("--topics-to-move-json-file is required with --generate")
    doc = _load_json(path)
    entries = doc.get("topics") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries or not all(
            isinstance(e, dict) and isinstance(e.get("topic"), str) for e in entries):
        raise CliError(f"{path}: expected {{\"version\": 1, \"topics\": [{{\"topic\": \"name\"}}, ...]}}")
    return list(dict.fromkeys(e["topic"] for e in entries))


def read_broker_list(text: str | None) -> list[int]:
    if not text:
        raise CliError("--broker-list is required with --generate")
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise CliError(f"--broker-list: not a comma-separated list of broker ids: {text}") from None
    if not ids:
        raise CliError("--broker-list: no broker id given")
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise CliError(f"Broker list contains duplicate entries: {','.join(map(str, dup))}")
    return ids


def _plan_json(rows: list[tuple[str, int, list[int]]]) -> str:
    return json.dumps({"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
                                                     for t, p, r in rows]}, separators=(",", ":"))


class _Session:
    """One protocol-client connection to the first bootstrap server; every request bounded."""

    def __init__(self, client: Any) -> None:
        self.client = client

    async def request(self, req: Any, version: int) -> Any:
        try:
            return await asyncio.wait_for(self.client.request(req, version), TIMEOUT_S)
        except TimeoutError:
            raise CliError(f"no answer within {TIMEOUT_S:g} s") from None
        except ConnectionError as e:
            raise CliError(f"the broker closed the connection: {e}") from None

    async def metadata(self, topics: list[str]) -> dict[tuple[str, int], list[int]]:
        return (await self.cluster(topics))[0]

    async def cluster(self, topics: list[str]) -> tuple[dict[tuple[str, int], list[int]], dict[int, str | None],
                                                       dict[str, int]]:
        """(replicas by partition, rack by broker id, error code by topic that failed)."""
        from kafka.protocol.metadata import MetadataRequest

        T = MetadataRequest.MetadataRequestTopic
        req = MetadataRequest(version=12, topics=[T(version=12, topic_id=None, name=t) for t in sorted(set(topics))],
                              allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        resp = await self.request(req, 12)
        replicas = {(t.name, p.partition_index): list(p.replica_nodes) for t in resp.topics if t.error_code == 0
                    for p in t.partitions}
        racks = {b.node_id: b.rack for b in resp.brokers}
        return replicas, racks, {t.name: t.error_code for t in resp.topics if t.error_code}

    async def ongoing(self) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
        from kafka.protocol.admin import ListPartitionReassignmentsRequest

        from protocol.errors import ErrorCode

        resp = await self.request(ListPartitionReassignmentsRequest(version=0, timeout_ms=int(TIMEOUT_S * 1000),
                                                                    topics=None), 0)
        if resp.error_code:
            raise CliError(f"listing reassignments: {ErrorCode(resp.error_code).name}"
                           + (f": {resp.error_message}" if resp.error_message else ""))
        return {(t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
                for t in resp.topics for p in t.partitions}

    async def alter(self, changes: list[tuple[str, int, list[int] | None]]) -> dict[tuple[str, int], str | None]:
        from kafka.protocol.admin import AlterPartitionReassignmentsRequest

        from protocol.errors import ErrorCode

        R = AlterPartitionReassignmentsRequest.ReassignableTopic
        by_topic: dict[str, list[Any]] = {}
        for t, p, replicas in changes:
            by_topic.setdefault(t, []).append(R.ReassignablePartition(version=0, partition_index=p, replicas=replicas))
        req = AlterPartitionReassignmentsRequest(version=0, timeout_ms=int(TIMEOUT_S * 1000), topics=[
            R(version=0, name=t, partitions=ps) for t, ps in by_topic.items()])
        resp = await self.request(req, 0)
        if resp.error_code:
            raise CliError(f"{ErrorCode(resp.error_code).name}" + (f": {resp.error_message}" if resp.error_message else ""))
        out: dict[tuple[str, int], str | None] = {}
        for t in resp.responses:
            for p in t.partitions:
                out[(t.name, p.partition_index)] = None if p.error_code == 0 else (
                    ErrorCode(p.error_code).name + (f": {p.error_message}" if p.error_message else ""))
        return out


def _names(keys: list[tuple[str, int]]) -> str:
    return ",".join(f"{t}-{p}" for t, p in keys)


async def _execute(s: _Session, args: argparse.Namespace, out: TextIO) -> int:
    plan = read_plan(args.reassignment_json_file, need_replicas=True)
    current = await s.metadata([t for t, _, _ in plan])
    missing = [(t, p) for t, p, _ in plan if (t, p) not in current]
    if missing:
        raise CliError(f"unknown partitions: {_names(missing)}")
    out.write("Current partition replica assignment\n\n")
    out.write(_plan_json([(t, p, current[(t, p)]) for t, p, _ in plan]) + "\n\n")
    out.write("Save this to use as the --reassignment-json-file option during rollback\n")
    results = await s.alter([(t, p, r) for t, p, r in plan])
    return _report(results, "Successfully started partition reassignments for", "starting", out)


async def _cancel(s: _Session, args: argparse.Namespace, out: TextIO) -> int:
    plan = read_plan(args.reassignment_json_file, need_replicas=False)
    results = await s.alter([(t, p, None) for t, p, _ in plan])
    return _report(results, "Successfully cancelled partition reassignments for:", "cancelling", out)


def _report(results: dict[tuple[str, int], str | None], ok_text: str, verb: str, out: TextIO) -> int:
    done = [k for k, e in sorted(results.items()) if e is None]
    failed = [(k, e) for k, e in sorted(results.items()) if e is not None]
    if done:
        out.write(f"{ok_text} {_names(done)}\n")
    for (t, p), e in failed:
        out.write(f"Error {verb} partition reassignment for {t}-{p}: {e}\n")
    if failed:
        out.flush()
        raise CliError(f"{len(failed)} partition reassignment(s) failed")
    return 0


async def _verify(s: _Session, args: argparse.Namespace, out: TextIO) -> int:
    plan = read_plan(args.reassignment_json_file, need_replicas=True)
    ongoing = await s.ongoing()
    current = await s.metadata([t for t, _, _ in plan])
    out.write("Status of partition reassignment:\n")
    for t, p, target in plan:
        name = f"{t}-{p}"
        if (t, p) in ongoing:
            out.write(f"Reassignment of partition {name} is still in progress.\n")
        elif (t, p) not in current:
            raise CliError(f"unknown partition: {name}")
        elif current[(t, p)] == target:
            out.write(f"Reassignment of partition {name} is completed.\n")
        else:
            out.write(f"There is no active reassignment of partition {name}, but current replicas are "
                      f"{','.join(map(str, current[(t, p)]))}.\n")
    return 0


async def _list(s: _Session, args: argparse.Namespace, out: TextIO) -> int:
    ongoing = await s.ongoing()
    if not ongoing:
        out.write("No partition reassignments found.\n")
        return 0
    out.write("Current partition reassignments:\n")
    for (t, p), (replicas, adding, removing) in sorted(ongoing.items()):
        out.write(f"{t}-{p}: replicas: {','.join(map(str, replicas))}. adding: {','.join(map(str, adding))}. "
                  f"removing: {','.join(map(str, removing))}.\n")
    return 0


async def _generate(s: _Session, args: argparse.Namespace, out: TextIO) -> int:
    from cluster.placement import place_replicas
    from protocol.errors import ErrorCode, KafkaError

    topics = read_topics(args.topics_to_move_json_file)
    wanted = read_broker_list(args.broker_list)
    current, racks, failed = await s.cluster(topics)
    if failed:
        raise CliError("; ".join(f"{t}: {ErrorCode(code).name}" for t, code in sorted(failed.items())))
    brokers = {b: (None if args.disable_rack_aware else racks[b]) for b in wanted if b in racks}
    if len({r is None for r in brokers.values()}) > 1:
        raise CliError("Not all brokers have rack information. Add --disable-rack-aware in command line to make "
                       "replica assignment without rack information.")
    proposed: list[tuple[str, int, list[int]]] = []
    for topic in topics:
        parts = sorted(p for t, p in current if t == topic)
        try:
            placed = place_replicas(brokers, len(parts), len(current[(topic, parts[0])]))
        except KafkaError as e:
            raise CliError(f"{topic}: {e}") from None
        proposed.extend((topic, p, placed[i]) for i, p in enumerate(parts))
    rows = [(t, p, current[(t, p)]) for t in topics for p in sorted(p for tt, p in current if tt == t)]
    out.write(f"Current partition replica assignment\n{_plan_json(rows)}\n\n"
              f"Proposed partition reassignment configuration\n{_plan_json(proposed)}\n")
    return 0


def _run(args: argparse.Namespace, out: TextIO) -> int:
    from protocol.client import ProtocolClient

    if args.list and args.reassignment_json_file:
        raise CliError("--list takes no --reassignment-json-file")
    if args.generate:
        read_topics(args.topics_to_move_json_file)  # bad input fails before connecting
        read_broker_list(args.broker_list)
    elif not args.list:
        read_plan(args.reassignment_json_file, need_replicas=not args.cancel)  # a bad file fails before connecting
    if args.command_config and load_properties(args.command_config).get(
            "security.protocol", "PLAINTEXT").upper() != "PLAINTEXT":
        raise CliError("reassign-partitions supports PLAINTEXT connections only for now")
    action = (_execute if args.execute else _verify if args.verify else _cancel if args.cancel
              else _generate if args.generate else _list)

    async def run() -> int:
        host, port = bootstrap_addresses(args.bootstrap_server)[0]
        try:
            client = await asyncio.wait_for(ProtocolClient(host, port, client_id="kbroker-reassign").connect(),
                                            CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as e:
            raise CliError(f"cannot connect to {host}:{port}: {getattr(e, 'strerror', None) or e or 'timeout'}") from None
        try:
            return await action(_Session(client), args, out)
        finally:
            await client.close()

    return asyncio.run(run())


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_tool(PROG, lambda: _run(args, out or sys.stdout))
