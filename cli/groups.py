"""`kbroker groups`: list, describe and reset the offsets of consumer groups on a running broker.

Speaks the Kafka protocol (protocol.client.ProtocolClient) like kafka-consumer-groups.sh:
``list [--state [S,S]]`` (ListGroups on every broker; ``--state`` keeps the groups in those states,
case-insensitive), ``describe G`` (members, assignments, committed offsets, log-end offsets and lag;
classic groups through DescribeGroups, KIP-848 groups through ConsumerGroupDescribe),
``reset-offsets G (--topic T[:P,P] ... | --all-topics) --to-earliest|--to-latest|--to-current|
--to-offset N|--shift-by N|--to-datetime ISO [--execute | --dry-run]`` (a dry run unless --execute;
the group must have no active members, as in Kafka; an offset past the log end or before the log
start is moved there with Kafka's "WARN New offset (N) is higher than latest offset ..." line),
``delete G [G ...]`` (DeleteGroups at each group's coordinator; Kafka's errors: NON_EMPTY_GROUP
while members are active, GROUP_ID_NOT_FOUND). Kafka's forms work as well: the action as a flag
(``--list``, ``--describe``, ``--reset-offsets``, ``--delete``), groups as ``--group G`` (repeatable)
or ``--all-groups``.

``--bootstrap-server``/``-b`` and ``--command-config`` go before or after the action. This tool
speaks PLAINTEXT only (the protocol client has no TLS/SASL): a ``--command-config`` asking for
another ``security.protocol`` is refused with one line. A connection that does not open within
5 s, or a run not done within 60 s, fails with one line.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from kafka.protocol.admin import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import ListOffsetsRequest, OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from cli.common import CliError, add_connection_options, check_topic_name, kafka_action_form
from cli.protocol_session import BoundedClient, ProtocolSession, run_protocol_tool
from protocol.consumer_group_api import ConsumerGroupDescribeRequest
from protocol.errors import ErrorCode

EARLIEST, LATEST = -2, -1


def _check(code: int, what: str) -> None:
    if code:
        raise CliError(f"{what}: {ErrorCode(code).name}")


class GroupsTool:
    def __init__(self, bootstrap: str, out: TextIO) -> None:
        self.session = ProtocolSession(bootstrap, "kbroker-groups")
        self.out = out

    async def client(self, host: str | None = None, port: int | None = None) -> BoundedClient:
        return await self.session.client(None if host is None else (host, port))

    async def close(self) -> None:
        await self.session.close()

    async def metadata(self, topics: list[str] | None = None) -> Any:
        c = await self.client()
        req = MetadataRequest(version=8, topics=None if topics is None else [
            MetadataRequest.MetadataRequestTopic(version=8, name=t) for t in topics],
            allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False)
        return await c.request(req, 8)

    async def coordinator(self, group: str) -> BoundedClient:
        c = await self.client()
        for _ in range(50):
            r = await c.request(FindCoordinatorRequest(version=3, key=group, key_type=0), 3)
            if r.error_code == 0:
                return await self.client(r.host, r.port)
            if r.error_code not in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                _check(r.error_code, f"finding the coordinator of {group}")
            await asyncio.sleep(0.1)
        raise CliError(f"no coordinator available for group {group}")

    # --- list --------------------------------------------------------------------------------------

    async def group_ids(self) -> list[str]:
        return sorted({row[0] for row in await self._listed()})

    async def _listed(self) -> list[tuple[str, str, str, str]]:
        md = await self.metadata([])
        rows = []
        for b in md.brokers:
            c = await self.client(b.host, b.port)
            r = await c.request(ListGroupsRequest(version=5, states_filter=[], types_filter=[]), 5)
            _check(r.error_code, "listing groups")
            rows.extend((g.group_id, g.group_type, g.protocol_type, g.group_state) for g in r.groups)
        return sorted(rows)

    async def list(self, states: str | None = None) -> int:
        rows = await self._listed()
        if states:
            # Kafka's --state takes a comma-separated list, matched without regard to case.
            wanted = {s.strip().lower() for s in states.split(",") if s.strip()}
            rows = [r for r in rows if r[3].lower() in wanted]
        self._table(["GROUP", "TYPE", "PROTOCOL", "STATE"], rows)
        return 0

    # --- offsets -----------------------------------------------------------------------------------

    async def committed(self, group: str, coord: BoundedClient) -> dict[tuple[str, int], int]:
        r = await coord.request(OffsetFetchRequest(version=7, group_id=group, topics=None, require_stable=True), 7)
        _check(r.error_code, f"fetching the offsets of {group}")
        return {(t.name, p.partition_index): p.committed_offset for t in r.topics for p in t.partitions
                if p.committed_offset >= 0}

    async def list_offsets(self, partitions: list[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
        if not partitions:
            return {}
        c = await self.client()
        T = ListOffsetsRequest.ListOffsetsTopic
        P = T.ListOffsetsPartition
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        req = ListOffsetsRequest(version=4, replica_id=-1, isolation_level=0, topics=[
            T(version=4, name=t, partitions=[P(version=4, partition_index=p, current_leader_epoch=-1,
                                               timestamp=timestamp) for p in ps]) for t, ps in by_topic.items()])
        r = await c.request(req, 4)
        out = {}
        for t in r.topics:
            for p in t.partitions:
                if p.error_code == 0:
                    out[(t.name, p.partition_index)] = p.offset
        return out

    # --- describe ----------------------------------------------------------------------------------

    async def describe(self, group: str) -> int:
        coord = await self.coordinator(group)
        owners: dict[tuple[str, int], tuple[str, str, str]] = {}
        members: list[tuple[str, str, str, str, str]] = []
        r = await coord.request(DescribeGroupsRequest(version=5, groups=[group], include_authorized_operations=False), 5)
        g = r.groups[0]
        _check(g.error_code, f"describing {group}")
        state, protocol, kind = g.group_state, g.protocol_data, "classic"
        if state == "Dead" and not g.members:
            cg = await coord.request(ConsumerGroupDescribeRequest(version=0, group_ids=[group],
                                                                  include_authorized_operations=False), 0)
            d = cg.groups[0]
            if d.error_code == 0:
                state, protocol, kind = d.group_state, d.assignor_name, "consumer"
                for m in d.members:
                    parts = [(tp.topic_name, p) for tp in m.assignment.topic_partitions for p in tp.partitions]
                    for tp in parts:
                        owners[tp] = (m.member_id, m.client_host, m.client_id)
                    members.append((m.member_id, m.instance_id or "-", m.client_id, m.client_host,
                                    _fmt_parts(parts)))
        for m in g.members:
            parts: list[tuple[str, int]] = []
            if g.protocol_type == "consumer" and m.member_assignment:
                from storage.internal_records import decode_assignment

                try:
                    a = decode_assignment(bytes(m.member_assignment))
                    parts = [(t["topic"], p) for t in a["assignedPartitions"] or [] for p in t["partitions"]]
                except ValueError:
                    parts = []
            for tp in parts:
                owners[tp] = (m.member_id, m.client_host, m.client_id)
            members.append((m.member_id, m.group_instance_id or "-", m.client_id, m.client_host, _fmt_parts(parts)))
        committed = await self.committed(group, coord)
        if state == "Dead" and not members and not committed:
            # Neither protocol knows the group (Kafka's tool fails with GroupIdNotFoundException here).
            raise CliError(f"Consumer group '{group}' does not exist.")
        partitions = sorted(set(committed) | set(owners))
        ends = await self.list_offsets(partitions, LATEST)
        self.out.write(f"Group {group} ({kind}) is {state}" + (f", protocol {protocol}" if protocol else "") +
                       f", {len(members)} member(s)\n\n")
        rows = []
        for tp in partitions:
            cur = committed.get(tp)
            end = ends.get(tp)
            lag = "-" if cur is None or end is None else str(max(end - cur, 0))
            mid, host, cid = owners.get(tp, ("-", "-", "-"))
            rows.append((group, tp[0], str(tp[1]), "-" if cur is None else str(cur), "-" if end is None else str(end),
                         lag, mid, host, cid))
        self._table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                     "CLIENT-ID"], rows)
        if members:
            self.out.write("\n")
            self._table(["CONSUMER-ID", "GROUP-INSTANCE-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"], members)
        return 0

    # --- delete ------------------------------------------------------------------------------------

    async def delete(self, groups: list[str]) -> int:
        failed = []
        for group in groups:
            coord = await self.coordinator(group)
            r = await coord.request(DeleteGroupsRequest(version=2, groups_names=[group]), 2)
            for res in r.results:
                if res.error_code:
                    name = ErrorCode(res.error_code).name
                    why = {"NON_EMPTY_GROUP": "the group is not empty",
                           "GROUP_ID_NOT_FOUND": "the group does not exist"}.get(name)
                    failed.append(f"Group '{res.group_id}' could not be deleted due to: {name}"
                                  + (f" ({why})" if why else ""))
        if failed:
            raise CliError("; ".join(failed))
        self.out.write("Deletion of requested consumer groups (" + ", ".join(f"'{g}'" for g in groups)
                       + ") was successful.\n")
        return 0

    # --- reset-offsets -----------------------------------------------------------------------------

    async def partitions_to_reset(self, group: str, coord: BoundedClient, topics: list[str],
                                  all_topics: bool) -> list[tuple[str, int]]:
        """Kafka's reset scope: ``--all-topics`` (the partitions the group has offsets for), or each
        ``--topic T`` (all its partitions) / ``--topic T:0,2`` (those partitions)."""
        if all_topics:
            return sorted(await self.committed(group, coord))
        wanted: list[tuple[str, list[int] | None]] = []
        for arg in topics:
            name, sep, parts = arg.partition(":")
            check_topic_name(name)
            if not sep:
                wanted.append((name, None))
                continue
            try:
                wanted.append((name, [int(p) for p in parts.split(",")]))
            except ValueError:
                raise CliError(f"Invalid topic arg '{arg}', expected topic name and partitions") from None
        md = await self.metadata(sorted({n for n, _ in wanted}))
        known = {t.name: {p.partition_index for p in t.partitions} for t in md.topics if t.error_code == 0}
        out: set[tuple[str, int]] = set()
        for name, parts in wanted:
            if name not in known:
                raise CliError(f"Topic '{name}' does not exist")
            missing = sorted(set(parts or []) - known[name])
            if missing:
                raise CliError(f"topic {name} has no partition {','.join(map(str, missing))}")
            out.update((name, p) for p in (parts if parts is not None else known[name]))
        return sorted(out)

    def _clamped(self, requested: dict[tuple[str, int], int], earliest: dict[tuple[str, int], int],
                 latest: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Kafka's checkOffsetsRange: an offset past the log end or before the log start is moved to
        it, with Kafka's warning (on stderr)."""
        out = {}
        for tp, offset in requested.items():
            name = f"{tp[0]}-{tp[1]}"
            if tp in latest and offset > latest[tp]:
                print(f"WARN New offset ({offset}) is higher than latest offset for topic partition {name}. "
                      f"Value will be set to {latest[tp]}", file=sys.stderr)
                offset = latest[tp]
            elif tp in earliest and offset < earliest[tp]:
                print(f"WARN New offset ({offset}) is lower than earliest offset for topic partition {name}. "
                      f"Value will be set to {earliest[tp]}", file=sys.stderr)
                offset = earliest[tp]
            out[tp] = offset
        return out

    async def reset(self, group: str, topics: list[str], all_topics: bool, target: tuple[str, Any],
                    execute: bool) -> int:
        coord = await self.coordinator(group)
        r = await coord.request(DescribeGroupsRequest(version=5, groups=[group], include_authorized_operations=False), 5)
        g = r.groups[0]
        if g.error_code == 0 and g.group_state not in ("Empty", "Dead"):
            raise CliError(f"Assignments can only be reset if the group '{group}' is inactive, but the current "
                           f"state is {g.group_state}.")
        partitions = await self.partitions_to_reset(group, coord, topics, all_topics)
        earliest = await self.list_offsets(partitions, EARLIEST)
        latest = await self.list_offsets(partitions, LATEST)
        kind, value = target
        if kind == "earliest":
            new = dict(earliest)
        elif kind == "latest":
            new = dict(latest)
        elif kind == "offset":
            new = self._clamped({tp: int(value) for tp in partitions}, earliest, latest)
        elif kind in ("shift", "current"):
            current = await self.committed(group, coord)
            if kind == "current":  # Kafka: the committed offset, or the log end where there is none
                new = {tp: current.get(tp, latest.get(tp, 0)) for tp in partitions}
            else:
                no_offset = [f"{t}-{p}" for t, p in partitions if (t, p) not in current]
                if no_offset:
                    raise CliError(f"Cannot shift offset for partition {no_offset[0]} since there is no current "
                                   "committed offset")
                new = self._clamped({tp: current[tp] + int(value) for tp in partitions}, earliest, latest)
        else:
            by_time = await self.list_offsets(partitions, int(value))
            new = {tp: by_time.get(tp, latest[tp]) if by_time.get(tp, -1) >= 0 else latest[tp] for tp in partitions}
        if execute and new:
            T = OffsetCommitRequest.OffsetCommitRequestTopic
            P = T.OffsetCommitRequestPartition
            by_topic: dict[str, list[tuple[int, int]]] = {}
            for (t, p), o in sorted(new.items()):
                by_topic.setdefault(t, []).append((p, o))
            req = OffsetCommitRequest(version=8, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                      group_instance_id=None, topics=[T(version=8, name=t, partitions=[
                                          P(version=8, partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                            committed_metadata="") for p, o in parts]) for t, parts in by_topic.items()])
            resp = await coord.request(req, 8)
            for rt in resp.topics:
                for rp in rt.partitions:
                    _check(rp.error_code, f"committing {rt.name}-{rp.partition_index}")
        self._table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                    [(group, tp[0], str(tp[1]), str(o)) for tp, o in sorted(new.items())])
        if not execute:
            self.out.write("\n(dry run: add --execute to commit these offsets)\n")
        return 0

    def _table(self, header: list[str], rows: list[tuple[str, ...]]) -> None:
        rows = [tuple(str(c) for c in r) for r in rows]
        widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
        for r in [tuple(header), *rows]:
            self.out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


def _fmt_parts(parts: list[tuple[str, int]]) -> str:
    by_topic: dict[str, list[int]] = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(p)
    return ",".join(f"{t}:{'/'.join(map(str, sorted(ps)))}" for t, ps in sorted(by_topic.items())) or "-"


def _parse_datetime(text: str) -> int:
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


ACTIONS = ["list", "describe", "reset-offsets", "delete"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kbroker groups", description="List, describe and reset consumer groups.")
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="list groups")
    ls.add_argument("--state", nargs="?", const="", metavar="STATE[,STATE]",
                    help="only groups in these states (e.g. Stable,Empty); with no value, all")
    d = sub.add_parser("describe", help="members, assignments, committed offsets and lag of groups")
    r = sub.add_parser("reset-offsets", help="reset a group's committed offsets")
    de = sub.add_parser("delete", help="delete groups without active members, with their committed offsets")
    for a in (d, r, de):
        a.add_argument("groups", nargs="*", metavar="GROUP")
        a.add_argument("--group", action="append", dest="group_opts", default=[], metavar="GROUP",
                       help="a group (Kafka's form; repeatable)")
        a.add_argument("--all-groups", action="store_true", help="every group")
    r.add_argument("--topic", action="append", default=[], metavar="T[:P,P]",
                   help="a topic, or some of its partitions (t:0,1); repeatable")
    r.add_argument("--all-topics", action="store_true", help="every partition the group has an offset for")
    how = r.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true")
    how.add_argument("--to-latest", action="store_true")
    how.add_argument("--to-current", action="store_true", help="the committed offset (the log end where none)")
    how.add_argument("--to-offset", type=int)
    how.add_argument("--shift-by", type=int, metavar="N", help="move the committed offsets by N (may be negative)")
    how.add_argument("--to-datetime", help="ISO-8601, e.g. 2024-01-31T12:00:00Z")
    run = r.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true", help="commit (otherwise only print the plan)")
    run.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")
    # Like Kafka's tools, --bootstrap-server may also follow the subcommand (`kbroker groups list
    # --bootstrap-server H:P`).
    add_connection_options(p, sub)
    return p


async def _groups(tool: GroupsTool, args: argparse.Namespace) -> list[str]:
    named = list(dict.fromkeys([*args.groups, *args.group_opts]))
    if args.all_groups:
        if named:
            raise CliError("--all-groups cannot be combined with named groups")
        return await tool.group_ids()
    if not named:
        raise CliError(f"Option {args.command} takes one of these options: --all-groups, --group")
    return named


async def _run(args: argparse.Namespace, out: TextIO) -> int:
    tool = GroupsTool(args.bootstrap_server, out)
    try:
        if args.command == "list":
            return await tool.list(args.state)
        if args.command == "reset-offsets" and not args.topic and not args.all_topics:
            raise CliError("One of the reset scopes should be defined: --all-topics, --topic.")
        if args.command == "reset-offsets" and args.topic and args.all_topics:
            raise CliError("--all-topics cannot be combined with --topic")
        groups = await _groups(tool, args)
        if args.command == "delete":
            return await tool.delete(groups)
        for i, group in enumerate(groups):
            if i:
                out.write("\n")
            if args.command == "describe":
                await tool.describe(group)
                continue
            if args.to_earliest:
                target: tuple[str, Any] = ("earliest", None)
            elif args.to_latest:
                target = ("latest", None)
            elif args.to_current:
                target = ("current", None)
            elif args.to_offset is not None:
                target = ("offset", args.to_offset)
            elif args.shift_by is not None:
                target = ("shift", args.shift_by)
            else:
                target = ("datetime", _parse_datetime(args.to_datetime))
            await tool.reset(group, args.topic, args.all_topics, target, args.execute)
        return 0
    finally:
        await tool.close()


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(kafka_action_form(argv, ACTIONS))
    return run_protocol_tool("kbroker groups", args.command, args.command_config, _run(args, out or sys.stdout))


if __name__ == "__main__":
    sys.exit(main())
