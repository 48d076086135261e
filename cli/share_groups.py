"""`kbroker share-groups`: list, describe, reset and delete KIP-932 share groups, like Kafka's
kafka-share-groups.sh, over the Kafka protocol (protocol.client.ProtocolClient):

- ``list [--state S]``: ListGroups (type ``share``) on every broker;
- ``describe G [--members | --state]``: ShareGroupDescribe (state, epochs, members and their
  assignments) and DescribeShareGroupOffsets (each share-partition's start offset, with the log end
  and LAG = log end - start offset, the records not yet acknowledged or archived); a share-partition
  not yet consumed shows start offset ``-``;
- ``reset-offsets G --topic T --to-earliest|--to-latest|--to-offset N|--to-datetime ISO|
  --by-duration PnDTnHnMnS [--execute]``: AlterShareGroupOffsets; a dry run unless --execute; the
  group must have no members (Kafka answers NON_EMPTY_GROUP otherwise);
- ``delete-offsets G --topic T [--topic T2 ...]``: DeleteShareGroupOffsets (an empty group);
- ``delete G [G ...]``: DeleteGroups (an empty group; its share state is deleted too).

Errors are Kafka's names on one line (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP,
GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED, ...) and exit status 1. PLAINTEXT only, as
``kbroker groups``; bounded like it (5 s to connect, 60 s per answer). Kafka's forms work as well:
the action as a flag (``--list``, ``--describe``, ``--reset-offsets``, ``--delete-offsets``,
``--delete``) and the group as ``--group G``.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from typing import Any, TextIO

from kafka.protocol.admin import DeleteGroupsRequest, ListGroupsRequest

from cli.common import CliError, add_connection_options, kafka_action_form
from cli.groups import EARLIEST, LATEST, GroupsTool, _parse_datetime
from cli.protocol_session import BoundedClient, run_protocol_tool
from protocol.errors import ErrorCode
from protocol.share_group_api import (
    AlterShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequest,
    ShareGroupDescribeRequest,
)

_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration (PnDTnHnMn.nS, as kafka-share-groups.sh --by-duration takes) in ms."""
    m = _DURATION.match(text.strip())
    if m is None or not any(m.groups()):
        raise ValueError(f"invalid duration {text!r} (ISO-8601, e.g. PT30M or P1DT2H)")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)


def _name(code: int) -> str:
    return ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)


class ShareGroupsTool(GroupsTool):
    async def list_share(self, state: str | None) -> int:
        md = await self.metadata()
        rows = []
        for b in md.brokers:
            c = await self.client(b.host, b.port)
            r = await c.request(ListGroupsRequest(version=5, states_filter=[state] if state else [],
                                                  types_filter=["share"]), 5)
            if r.error_code:
                raise CliError(f"listing groups: {_name(r.error_code)}")
            rows.extend((g.group_id, g.group_state) for g in r.groups)
        if state:
            self._table(["GROUP", "STATE"], sorted(rows))
        else:
            for group, _ in sorted(rows):
                self.out.write(group + "\n")
        return 0

    async def _describe_group(self, coord: BoundedClient, group: str) -> Any:
        r = await coord.request(ShareGroupDescribeRequest(version=1, group_ids=[group],
                                                          include_authorized_operations=False), 1)
        g = r.groups[0]
        if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            raise CliError(f"Share group '{group}' does not exist.")
        if g.error_code:
            raise CliError(f"describing {group}: {_name(g.error_code)}" + (f" ({g.error_message})" if
                                                                          g.error_message else ""))
        return g

    async def describe(self, group: str, view: str = "offsets") -> int:  # type: ignore[override]
        coord = await self.coordinator(group)
        g = await self._describe_group(coord, group)
        if view == "state":
            self._table(["GROUP", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "ASSIGNOR", "#MEMBERS"],
                        [(group, g.group_state, str(g.group_epoch), str(g.assignment_epoch), g.assignor_name,
                          str(len(g.members)))])
            return 0
        if view == "members":
            rows = []
            for m in g.members:
                parts = [(tp.topic_name, p) for tp in m.assignment.topic_partitions for p in tp.partitions]
                rows.append((group, m.member_id, m.client_host, m.client_id, str(m.member_epoch), str(len(parts)),
                             _fmt(parts)))
            self._table(["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "MEMBER-EPOCH", "#PARTITIONS", "ASSIGNMENT"],
                        rows)
            return 0
        R = DescribeShareGroupOffsetsRequest
        G = R.DescribeShareGroupOffsetsRequestGroup
        r = await coord.request(R(version=0, groups=[G(version=0, group_id=group, topics=None)]), 0)
        og = r.groups[0]
        if og.error_code:
            raise CliError(f"describing the offsets of {group}: {_name(og.error_code)}")
        rows = []
        for t in og.topics:
            for p in t.partitions:
                if p.error_code:
                    raise CliError(f"{t.topic_name}-{p.partition_index}: {_name(p.error_code)}")
                rows.append((t.topic_name, p.partition_index, p.start_offset, p.leader_epoch))
        ends = await self.list_offsets([(t, p) for t, p, _, _ in rows], LATEST)
        self.out.write(f"Share group {group} is {g.group_state}, {len(g.members)} member(s), group epoch "
                       f"{g.group_epoch}\n\n")
        table = []
        for t, p, start, epoch in sorted(rows):
            end = ends.get((t, p))
            lag = "-" if start < 0 or end is None else str(max(end - start, 0))
            table.append((group, t, str(p), "-" if epoch < 0 else str(epoch), "-" if start < 0 else str(start),
                          "-" if end is None else str(end), lag))
        self._table(["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LOG-END-OFFSET", "LAG"], table)
        if g.members:
            self.out.write("\n")
            self._table(["CONSUMER-ID", "HOST", "CLIENT-ID", "ASSIGNMENT"],
                        [(m.member_id, m.client_host, m.client_id,
                          _fmt([(tp.topic_name, p) for tp in m.assignment.topic_partitions for p in tp.partitions]))
                         for m in g.members])
        return 0

    async def reset_share(self, group: str, topic: str, target: tuple[str, Any], execute: bool) -> int:
        coord = await self.coordinator(group)
        g = await self._describe_group(coord, group)
        if g.group_state not in ("Empty", "Dead"):
            raise CliError(f"Share group '{group}' is not empty (state {g.group_state}): offsets can only be reset "
                           "when it has no members.")
        md = await self.metadata([topic])
        t = next((t for t in md.topics if t.name == topic), None)
        if t is None or t.error_code:
            raise CliError(f"topic {topic} not found")
        partitions = [(topic, p.partition_index) for p in sorted(t.partitions, key=lambda p: p.partition_index)]
        earliest = await self.list_offsets(partitions, EARLIEST)
        latest = await self.list_offsets(partitions, LATEST)
        kind, value = target
        if kind == "earliest":
            new = dict(earliest)
        elif kind == "latest":
            new = dict(latest)
        elif kind == "offset":
            new = {tp: min(max(int(value), earliest[tp]), latest[tp]) for tp in partitions}
        else:
            ts = int(value) if kind == "datetime" else int(time.time() * 1000) - int(value)
            by_time = await self.list_offsets(partitions, ts)
            new = {tp: by_time[tp] if by_time.get(tp, -1) >= 0 else latest[tp] for tp in partitions}
        if execute:
            R = AlterShareGroupOffsetsRequest
            T = R.AlterShareGroupOffsetsRequestTopic
            P = T.AlterShareGroupOffsetsRequestPartition
            resp = await coord.request(R(version=0, group_id=group, topics=[T(version=0, topic_name=topic, partitions=[
                P(version=0, partition_index=p, start_offset=o) for (_, p), o in sorted(new.items())])]), 0)
            if resp.error_code:
                raise CliError(f"resetting the offsets of {group}: {_name(resp.error_code)}")
            for rt in resp.responses:
                for rp in rt.partitions:
                    if rp.error_code:
                        raise CliError(f"resetting {rt.topic_name}-{rp.partition_index}: {_name(rp.error_code)}")
        self._table(["GROUP", "TOPIC", "PARTITION", "NEW-START-OFFSET"],
                    [(group, tp[0], str(tp[1]), str(o)) for tp, o in sorted(new.items())])
        if not execute:
            self.out.write("\n(dry run: add --execute to reset these start offsets)\n")
        return 0

    async def delete_offsets(self, group: str, topics: list[str]) -> int:
        coord = await self.coordinator(group)
        R = DeleteShareGroupOffsetsRequest
        resp = await coord.request(R(version=0, group_id=group, topics=[
            R.DeleteShareGroupOffsetsRequestTopic(version=0, topic_name=t) for t in topics]), 0)
        if resp.error_code:
            raise CliError(f"deleting the offsets of {group}: {_name(resp.error_code)}")
        failed = [f"{r.topic_name}: {_name(r.error_code)}" for r in resp.responses if r.error_code]
        self._table(["TOPIC", "STATUS"], [(r.topic_name, "Successful" if not r.error_code else _name(r.error_code))
                                          for r in resp.responses])
        if failed:
            raise CliError("; ".join(failed))
        return 0

    async def delete_share(self, groups: list[str]) -> int:
        failed = []
        for group in groups:
            coord = await self.coordinator(group)
            r = await coord.request(DeleteGroupsRequest(version=2, groups_names=[group]), 2)
            for res in r.results:
                if res.error_code:
                    failed.append(f"Group '{res.group_id}' could not be deleted due to: {_name(res.error_code)}")
        if failed:
            raise CliError("; ".join(failed))
        self.out.write("Deletion of requested share groups (" + ", ".join(f"'{g}'" for g in groups)
                       + ") was successful.\n")
        return 0


def _fmt(parts: list[tuple[str, int]]) -> str:
    by_topic: dict[str, list[int]] = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(p)
    return ",".join(f"{t}:{'/'.join(map(str, sorted(ps)))}" for t, ps in sorted(by_topic.items())) or "-"


ACTIONS = ["list", "describe", "reset-offsets", "delete-offsets", "delete"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kbroker share-groups",
                                description="List, describe, reset and delete share groups (KIP-932).")
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="list share groups")
    ls.add_argument("--state", help="only groups in this state (Empty, Stable)")
    d = sub.add_parser("describe", help="start offsets and lag (default), --members or --state of a share group")
    view = d.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true")
    view.add_argument("--state", action="store_true")
    view.add_argument("--offsets", action="store_true", help="start offsets and lag (the default)")
    r = sub.add_parser("reset-offsets", help="set the share-partition start offsets of an empty share group")
    r.add_argument("--topic", required=True)
    how = r.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true")
    how.add_argument("--to-latest", action="store_true")
    how.add_argument("--to-offset", type=int)
    how.add_argument("--to-datetime", help="ISO-8601, e.g. 2024-01-31T12:00:00Z")
    how.add_argument("--by-duration", help="ISO-8601 duration back from now, e.g. PT1H")
    run = r.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true", help="apply (otherwise only print the plan)")
    run.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")
    do = sub.add_parser("delete-offsets", help="forget the state of topics for an empty share group")
    do.add_argument("--topic", action="append", required=True)
    de = sub.add_parser("delete", help="delete empty share groups and their state")
    for a in (d, r, do, de):
        a.add_argument("groups", nargs="*", metavar="GROUP")
        a.add_argument("--group", action="append", dest="group_opts", default=[], metavar="GROUP",
                       help="a group (Kafka's form; repeatable for delete)")
    add_connection_options(p, sub)
    return p


def _named(args: argparse.Namespace) -> list[str]:
    groups = list(dict.fromkeys([*args.groups, *args.group_opts]))
    if not groups:
        raise CliError(f"Option {args.command} takes the option: --group")
    if args.command != "delete" and len(groups) > 1:
        raise CliError(f"{args.command} takes one group")
    return groups


async def _run(args: argparse.Namespace, out: TextIO) -> int:
    tool = ShareGroupsTool(args.bootstrap_server, out)
    try:
        if args.command == "list":
            return await tool.list_share(args.state)
        groups = _named(args)
        if args.command == "describe":
            return await tool.describe(groups[0], "members" if args.members else "state" if args.state else "offsets")
        if args.command == "delete-offsets":
            return await tool.delete_offsets(groups[0], args.topic)
        if args.command == "delete":
            return await tool.delete_share(groups)
        if args.to_earliest:
            target: tuple[str, Any] = ("earliest", None)
        elif args.to_latest:
            target = ("latest", None)
        elif args.to_offset is not None:
            target = ("offset", args.to_offset)
        elif args.to_datetime:
            target = ("datetime", _parse_datetime(args.to_datetime))
        else:
            target = ("duration", parse_duration_ms(args.by_duration))
        return await tool.reset_share(groups[0], args.topic, target, args.execute)
    finally:
        await tool.close()


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(kafka_action_form(argv, ACTIONS))
    return run_protocol_tool("kbroker share-groups", args.command, args.command_config, _run(args, out or sys.stdout))


if __name__ == "__main__":
    sys.exit(main())
