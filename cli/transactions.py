"""``kbroker transactions``: inspect transactions and abort hanging ones, like Kafka's kafka-transactions.sh.

    kbroker transactions [-b H:P] [--command-config F] [--json] list [--duration-filter MS] [--two-phase-commit]
    kbroker transactions describe (TRANSACTIONAL_ID | --transactional-id ID)
    kbroker transactions describe-producers --topic T --partition P
    kbroker transactions abort --topic T --partition P
        (--producer-id N --producer-epoch E --coordinator-epoch C | --start-offset O)
    kbroker transactions force-terminate --transactional-id ID
    kbroker transactions find-hanging (--broker-id N | --topic T [--partition P]) [--max-transaction-timeout MIN]

``list`` asks every broker (ListTransactions); ``describe`` asks the transaction coordinator found
with FindCoordinator(TRANSACTION) (DescribeTransactions); ``describe-producers`` asks the partition
leader (DescribeProducers). ``abort`` ends a hanging transaction on one partition by sending
WriteTxnMarkers(ABORT) to its leader, as Kafka's Admin.abortTransaction does; with
``--start-offset`` the producer is first looked up with DescribeProducers (the one whose open
transaction starts at that offset). ``list --duration-filter MS`` lists only transactions open
for longer than MS (ListTransactions v1, KIP-994); ``--two-phase-commit`` only two-phase-commit
(KIP-939) ones, i.e. prepared transactions waiting for their external coordinator (their
DescribeTransactions timeout is Integer.MAX_VALUE, Kafka's 2PC flag), adding ProducerEpoch and
TransactionDurationMs columns. ``force-terminate`` is Kafka's forceTerminateTransaction (KIP-939):
InitProducerId v6 with enable2Pc=true and keepPreparedTxn=false at the coordinator, which aborts
the open transaction and fences its producer. ``find-hanging`` is Kafka's: the open transactions
older than ``--max-transaction-timeout`` minutes (DescribeProducers, at --broker-id or each leader)
whose producer has no transactional id any more (ListTransactions filtered by producer id) or whose
coordinator does not list the partition in its transaction (DescribeTransactions): no marker will
end them (``abort`` does). Tables use Kafka's column names; ``--json`` prints JSON instead.
``-b``/``--bootstrap-server``, ``--command-config`` (PLAINTEXT only) and ``--json`` go before or
after the subcommand. Every request is bounded (cli/protocol_session.py), the whole run by 4x that.
Exit status: 0 on success, 1 when the broker answered an error or did not answer, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from kafka.protocol.admin import (
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, WriteTxnMarkersRequest

from cli.common import TIMEOUT_S, CliError, add_connection_options
from cli.protocol_session import ProtocolSession, require_plaintext
from protocol.errors import ErrorCode

TRANSACTION_KEY_TYPE = 1
TWO_PC_TIMEOUT_MS = 2147483647  # a KIP-939 transaction's timeout (Kafka's 2PC flag)
# The whole run is bounded too: a few round trips per broker, each bounded by TIMEOUT_S.
RUN_TIMEOUT_S = TIMEOUT_S * 4


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


class _Cluster(ProtocolSession):
    """Connections by node, starting from the bootstrap server; every request bounded."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(bootstrap, "kbroker-transactions")

    async def metadata(self, topics: list[str] | None) -> Any:
        req_topics = None if topics is None else [MetadataRequest.MetadataRequestTopic(version=8, name=t)
                                                   for t in topics]
        return await (await self.client()).request(MetadataRequest(
            version=8, topics=req_topics, allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False, include_topic_authorized_operations=False), 8)

    async def brokers(self) -> dict[int, tuple[str, int]]:
        md = await self.metadata([])
        return {b.node_id: (b.host, b.port) for b in md.brokers}

    async def leader(self, topic: str, partition: int) -> tuple[int, tuple[str, int]]:
        md = await self.metadata([topic])
        nodes = {b.node_id: (b.host, b.port) for b in md.brokers}
        for t in md.topics:
            if t.name != topic:
                continue
            if t.error_code:
                raise CliError(f"topic {topic}: {_error_name(t.error_code)}")
            for p in t.partitions:
                if p.partition_index == partition:
                    if p.leader_id not in nodes:
                        raise CliError(f"{topic}-{partition} has no leader (leader id {p.leader_id})")
                    return p.leader_id, nodes[p.leader_id]
        raise CliError(f"{topic}-{partition}: {_error_name(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}")

    async def coordinator(self, transactional_id: str) -> tuple[int, tuple[str, int]]:
        c = await self.client()
        for _ in range(50):  # the coordinator partition may still be loading
            resp = await c.request(FindCoordinatorRequest(version=3, key=transactional_id,
                                                          key_type=TRANSACTION_KEY_TYPE), 3)
            if resp.error_code not in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                break
            await asyncio.sleep(0.1)
        if resp.error_code:
            raise CliError(f"finding the coordinator of {transactional_id}: {_error_name(resp.error_code)}")
        return resp.node_id, (resp.host, resp.port)


# --- commands ---------------------------------------------------------------------------------------


async def _list(cluster: _Cluster, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    duration = getattr(args, "duration_filter", None)
    two_pc = getattr(args, "two_phase_commit", False)
    for node, addr in sorted((await cluster.brokers()).items()):
        client = await cluster.client(addr)
        if duration is None:
            req, v = ListTransactionsRequest(version=0, state_filters=[], producer_id_filters=[]), 0
        else:
            req, v = ListTransactionsRequest(version=1, state_filters=[], producer_id_filters=[],
                                             duration_filter=duration), 1
        resp = await client.request(req, v)
        if resp.error_code:
            raise CliError(f"ListTransactions on broker {node}: {_error_name(resp.error_code)}")
        states = list(resp.transaction_states)
        if two_pc and states:
            described = await client.request(DescribeTransactionsRequest(
                version=0, transactional_ids=[s.transactional_id for s in states]), 0)
            now = int(time.time() * 1000)
            for d in described.transaction_states:
                if d.error_code or d.transaction_timeout_ms != TWO_PC_TIMEOUT_MS:
                    continue
                start = d.transaction_start_time_ms
                rows.append({"TransactionalId": d.transactional_id, "Coordinator": node, "ProducerId": d.producer_id,
                             "ProducerEpoch": d.producer_epoch, "TransactionState": d.transaction_state,
                             "TransactionDurationMs": now - start if start >= 0 else None})
            continue
        for s in states:
            rows.append({"TransactionalId": s.transactional_id, "Coordinator": node, "ProducerId": s.producer_id,
                         "TransactionState": s.transaction_state})
    return sorted(rows, key=lambda r: r["TransactionalId"])


async def _force_terminate(cluster: _Cluster, args: argparse.Namespace) -> list[dict[str, Any]]:
    tid = args.transactional_id
    node, addr = await cluster.coordinator(tid)
    client = await cluster.client(addr)
    resp = None
    for _ in range(300):  # CONCURRENT_TRANSACTIONS while the abort it started completes
        resp = await client.request(InitProducerIdRequest(
            version=6, transactional_id=tid, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1,
            enable2_pc=True, keep_prepared_txn=False), 6)
        if resp.error_code not in (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
            break
        await asyncio.sleep(0.1)
    assert resp is not None
    if resp.error_code:
        raise CliError(f"force-terminating {tid}: {_error_name(resp.error_code)}")
    return [{"TransactionalId": tid, "CoordinatorId": node, "ProducerId": resp.producer_id,
             "ProducerEpoch": resp.producer_epoch, "Result": "terminated"}]


async def _describe(cluster: _Cluster, args: argparse.Namespace) -> list[dict[str, Any]]:
    node, addr = await cluster.coordinator(args.transactional_id)
    resp = await (await cluster.client(addr)).request(
        DescribeTransactionsRequest(version=0, transactional_ids=[args.transactional_id]), 0)
    s = resp.transaction_states[0]
    if s.error_code:
        raise CliError(f"transactional id {args.transactional_id}: {_error_name(s.error_code)}")
    start = s.transaction_start_time_ms
    duration = int(time.time() * 1000) - start if start >= 0 else None
    partitions = [f"{t.topic}-{p}" for t in s.topics for p in sorted(t.partitions)]
    return [{"CoordinatorId": node, "TransactionalId": s.transactional_id, "ProducerId": s.producer_id,
             "ProducerEpoch": s.producer_epoch, "TransactionState": s.transaction_state,
             "CurrentTransactionTimeoutMs": s.transaction_timeout_ms,
             "CurrentTransactionStartTimeMs": start if start >= 0 else None,
             "TransactionDurationMs": duration, "TopicPartitions": ",".join(partitions)}]


async def _producers(cluster: _Cluster, topic: str, partition: int) -> tuple[tuple[str, int], list[Any]]:
    _, addr = await cluster.leader(topic, partition)
    R = DescribeProducersRequest
    resp = await (await cluster.client(addr)).request(
        R(version=0, topics=[R.TopicRequest(version=0, name=topic, partition_indexes=[partition])]), 0)
    p = resp.topics[0].partitions[0]
    if p.error_code:
        raise CliError(f"{topic}-{partition}: {_error_name(p.error_code)}"
                       + (f" ({p.error_message})" if p.error_message else ""))
    return addr, list(p.active_producers)


async def _describe_producers(cluster: _Cluster, args: argparse.Namespace) -> list[dict[str, Any]]:
    _, producers = await _producers(cluster, args.topic, args.partition)
    return [{"ProducerId": s.producer_id, "ProducerEpoch": s.producer_epoch,
             "LatestCoordinatorEpoch": s.coordinator_epoch, "LastSequence": s.last_sequence,
             "LastTimestamp": s.last_timestamp,
             "CurrentTransactionStartOffset": s.current_txn_start_offset if s.current_txn_start_offset >= 0 else None}
            for s in producers]


async def _abort(cluster: _Cluster, args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.start_offset is not None:
        addr, producers = await _producers(cluster, args.topic, args.partition)
        match = [s for s in producers if s.current_txn_start_offset == args.start_offset]
        if not match:
            raise CliError(f"no open transaction on {args.topic}-{args.partition} starts at offset "
                           f"{args.start_offset}")
        s = match[0]
        pid, epoch, coord_epoch = s.producer_id, s.producer_epoch, s.coordinator_epoch
    else:
        _, addr = await cluster.leader(args.topic, args.partition)
        pid, epoch, coord_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
    # A producer that never saw a marker reports coordinator epoch -1; the marker carries 0, which no
    # partition can consider older than what it has.
    coord_epoch = max(coord_epoch, 0)
    M = WriteTxnMarkersRequest.WritableTxnMarker
    req = WriteTxnMarkersRequest(version=1, markers=[M(
        version=1, producer_id=pid, producer_epoch=epoch, transaction_result=False,
        coordinator_epoch=coord_epoch,
        topics=[M.WritableTxnMarkerTopic(version=1, name=args.topic, partition_indexes=[args.partition])])])
    resp = await (await cluster.client(addr)).request(req, 1)
    codes = [p.error_code for m in resp.markers for t in m.topics for p in t.partitions]
    if codes != [0]:
        raise CliError(f"aborting the transaction of producer {pid} on {args.topic}-{args.partition}: "
                       + ", ".join(_error_name(c) for c in codes))
    return [{"Topic": args.topic, "Partition": args.partition, "ProducerId": pid, "ProducerEpoch": epoch,
             "CoordinatorEpoch": coord_epoch, "Result": "aborted"}]


async def _find_hanging(cluster: _Cluster, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Kafka's FindHangingTransactionsCommand: open transactions older than --max-transaction-timeout
    on the partitions searched whose producer has no transactional id any more, or whose coordinator
    does not count the partition in the producer's transaction (so no marker will ever end it)."""
    md = await cluster.metadata(None if args.topic is None else [args.topic])
    nodes = {b.node_id: (b.host, b.port) for b in md.brokers}
    by_broker: dict[int, list[tuple[str, int]]] = {}
    for t in md.topics:
        if t.error_code:
            raise CliError(f"topic {t.name}: {_error_name(t.error_code)}")
        for p in t.partitions:
            if args.partition is not None and p.partition_index != args.partition:
                continue
            if args.broker_id is not None and args.broker_id not in p.replica_nodes:
                continue
            # DescribeProducers goes to --broker-id when given (Kafka's DescribeProducersOptions.brokerId).
            target = args.broker_id if args.broker_id is not None else p.leader_id
            by_broker.setdefault(target, []).append((t.name, p.partition_index))
    if args.partition is not None and not by_broker:
        raise CliError(f"{args.topic}-{args.partition}: {_error_name(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}")
    now = int(time.time() * 1000)
    max_ms = args.max_transaction_timeout * 60_000
    open_txns: list[tuple[str, int, Any]] = []
    R = DescribeProducersRequest
    for broker, tps in sorted(by_broker.items()):
        if broker not in nodes:
            raise CliError(f"broker {broker} is not in the cluster")
        topics: dict[str, list[int]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append(p)
        resp = await cluster.request(R(version=0, topics=[R.TopicRequest(version=0, name=t, partition_indexes=ps)
                                                          for t, ps in sorted(topics.items())]), 0, nodes[broker])
        for rt in resp.topics:
            for rp in rt.partitions:
                if rp.error_code:
                    raise CliError(f"describing the producers of {rt.name}-{rp.partition_index} on broker "
                                   f"{broker}: {_error_name(rp.error_code)}")
                for s in rp.active_producers:
                    if s.current_txn_start_offset >= 0 and now - s.last_timestamp > max_ms:
                        open_txns.append((rt.name, rp.partition_index, s))
    ids: dict[int, str] = {}
    if open_txns:
        pids = sorted({s.producer_id for _, _, s in open_txns})
        for addr in nodes.values():
            resp = await cluster.request(ListTransactionsRequest(version=0, state_filters=[],
                                                                 producer_id_filters=pids), 0, addr)
            if resp.error_code:
                raise CliError(f"listing transactions: {_error_name(resp.error_code)}")
            ids.update({t.producer_id: t.transactional_id for t in resp.transaction_states})
    in_txn: dict[str, set[tuple[str, int]] | None] = {}
    for tid in sorted(set(ids.values())):
        _, addr = await cluster.coordinator(tid)
        d = (await cluster.request(DescribeTransactionsRequest(version=0, transactional_ids=[tid]), 0,
                                   addr)).transaction_states[0]
        if d.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
            in_txn[tid] = None
        elif d.error_code:
            raise CliError(f"describing transaction {tid}: {_error_name(d.error_code)}")
        else:
            in_txn[tid] = {(t.topic, p) for t in d.topics for p in t.partitions}
    rows = []
    for topic, partition, s in open_txns:
        tid = ids.get(s.producer_id)
        known = in_txn.get(tid) if tid is not None else None
        if known is not None and (topic, partition) in known:
            continue  # the coordinator still owes this partition its marker: not hanging
        rows.append({"Topic": topic, "Partition": partition, "ProducerId": s.producer_id,
                     "ProducerEpoch": s.producer_epoch, "CoordinatorEpoch": s.coordinator_epoch,
                     "StartOffset": s.current_txn_start_offset, "LastTimestamp": s.last_timestamp,
                     "Duration(min)": (now - s.last_timestamp) // 60_000})
    return rows


COMMANDS = {"list": _list, "describe": _describe, "describe-producers": _describe_producers, "abort": _abort,
            "force-terminate": _force_terminate, "find-hanging": _find_hanging}


# --- output and entry point --------------------------------------------------------------------------


def _print_table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    cells = [columns] + [["None" if r.get(c) is None else str(r[c]) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


_COLUMNS = {
    "list": ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
    "describe": ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                 "CurrentTransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                 "TopicPartitions"],
    "describe-producers": ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                           "CurrentTransactionStartOffset"],
    "abort": ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "Result"],
    "force-terminate": ["TransactionalId", "CoordinatorId", "ProducerId", "ProducerEpoch", "Result"],
    "find-hanging": ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                     "LastTimestamp", "Duration(min)"],
}
_COLUMNS_2PC = ["TransactionalId", "Coordinator", "ProducerId", "ProducerEpoch", "TransactionState",
                "TransactionDurationMs"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kbroker transactions",
                                     description="List, describe and abort transactions (like kafka-transactions.sh).")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    sub = parser.add_subparsers(dest="command", required=True)
    lp = sub.add_parser("list", help="transactions known to every broker's coordinator")
    lp.add_argument("--duration-filter", type=int, metavar="MS",
                    help="only transactions open for longer than MS milliseconds (ListTransactions v1)")
    lp.add_argument("--two-phase-commit", action="store_true",
                    help="only two-phase-commit (KIP-939) transactions, with their epoch and duration")
    ft = sub.add_parser("force-terminate", help="abort a (prepared) transaction and fence its producer "
                        "(InitProducerId enable2Pc=true keepPreparedTxn=false, KIP-939)")
    ft.add_argument("--transactional-id", required=True)
    d = sub.add_parser("describe", help="state of one transactional id")
    d.add_argument("id", nargs="?", metavar="TRANSACTIONAL_ID")
    d.add_argument("--transactional-id", help="the transactional id (Kafka's form)")
    dp = sub.add_parser("describe-producers", help="active producers of a partition")
    a = sub.add_parser("abort", help="abort a hanging transaction on one partition")
    for p in (dp, a):
        p.add_argument("--topic", required=True)
        p.add_argument("--partition", required=True, type=int)
    a.add_argument("--producer-id", type=int)
    a.add_argument("--producer-epoch", type=int)
    a.add_argument("--coordinator-epoch", type=int)
    a.add_argument("--start-offset", type=int)
    fh = sub.add_parser("find-hanging", help="find hanging transactions (open, with no coordinator to end them)")
    fh.add_argument("--broker-id", type=int, help="search the partitions of this broker")
    fh.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                    help="only transactions open longer than this (default 15 minutes)")
    fh.add_argument("--topic", help="search this topic (required with --partition)")
    fh.add_argument("--partition", type=int)
    # --json, --bootstrap-server and --command-config go before or after the subcommand.
    for p in sub.choices.values():
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON instead of a table")
    add_connection_options(parser, sub)
    return parser


def _usage_error(args: argparse.Namespace) -> str | None:
    if args.command == "abort":
        triple = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
        if args.start_offset is None and None in triple:
            return "give --start-offset, or all of --producer-id, --producer-epoch and --coordinator-epoch"
        if args.start_offset is not None and any(v is not None for v in triple):
            return "--start-offset excludes --producer-id/--producer-epoch/--coordinator-epoch"
    if args.command == "describe":
        if (args.id is None) == (args.transactional_id is None):
            return "give the transactional id once: TRANSACTIONAL_ID or --transactional-id ID"
        args.transactional_id = args.transactional_id or args.id
    if args.command == "find-hanging":
        if args.topic is None and args.broker_id is None:
            return "The `find-hanging` command requires either --topic or --broker-id to limit the scope of the search"
        if args.partition is not None and args.topic is None:
            return "The --partition argument requires --topic to be provided"
    return None


async def _run(args: argparse.Namespace) -> list[dict[str, Any]]:
    cluster = _Cluster(args.bootstrap_server)
    try:
        return await asyncio.wait_for(COMMANDS[args.command](cluster, args), RUN_TIMEOUT_S)
    except TimeoutError:
        raise CliError(f"not done within {RUN_TIMEOUT_S:g} s") from None
    finally:
        await cluster.close()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    why = _usage_error(args)
    if why:
        parser.print_usage(sys.stderr)
        print(f"kbroker transactions {args.command}: {why}", file=sys.stderr)
        return 2
    try:
        require_plaintext(args.command_config, "kbroker transactions")
        rows = asyncio.run(_run(args))
    except (CliError, OSError, ValueError) as e:
        print(f"kbroker transactions {args.command}: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        two_pc = args.command == "list" and args.two_phase_commit
        _print_table(rows, _COLUMNS_2PC if two_pc else _COLUMNS[args.command])
    return 0


if __name__ == "__main__":
    sys.exit(main())
