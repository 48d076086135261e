"""The null broker with consumer groups and transactions: the ceiling of the txn and CTP workloads.

``benchmarks/null_broker.py`` stores nothing and has neither groups nor transactions; this subclass
adds, from memory and with the minimum of state, what a transactional producer and a
read_committed group member need, so that ``txn_bench.py``'s commits phase (begin, 10 produces over
4 partitions, commit) and its consume-transform-produce phase (``lib_txn.consume_transform_produce``:
poll, produce the transformed records, send_offsets_to_transaction, commit; the committed group
offsets checked at the end) run against it unchanged:

- transactions: AddPartitionsToTxn (v0-3), AddOffsetsToTxn (v0-3), TxnOffsetCommit (v0-3: the
  offsets are kept per producer id until EndTxn), EndTxn (v0-3: a commit makes the producer's
  pending offsets the group's committed offsets, an abort drops them). Always accepted: no
  producer-epoch fencing, no transaction state machine, no markers (the output topic only counts
  records, as every null-broker topic does);
- groups (classic protocol): JoinGroup (v0-9; a member without an id gets one at once, no
  MEMBER_ID_REQUIRED round; the first member is the leader and gets every member's subscription),
  SyncGroup (v0-5: the leader's assignments kept and handed out), Heartbeat (v0-4: UNKNOWN_MEMBER_ID
  for a member the group does not have, else no error), LeaveGroup (v0-5), OffsetCommit (v2-8) and
  OffsetFetch (v1-7). There is no rebalance: a join just bumps the generation, which is right for
  the one member per group that the benchmarks run, not for more;
- read_committed Fetch: the base class already answers LastStableOffset = HighWatermark with no
  aborted transactions; the served values have the size of the first record produced to the topic
  (the CTP input's 100 B), not ``--value-size``.

As with the null broker, every request costs only its decode, a dictionary update and the encode of
its answer: what the same client reaches here is the most any broker can give it on this machine.
bench.py starts this server as its ``null`` broker (``--brokers ...,null``).

    .venv/bin/python benchmarks/null_txn_broker.py --port 19093      # serve
    .venv/bin/python benchmarks/null_txn_broker.py [--transactions 1000] [--ctp-records 200000]

The second form starts the server as a subprocess on 127.0.0.1 and prints txn_bench's commits and
CTP figures against it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import null_broker as nb  # noqa: E402

from protocol.api_table import get_spec  # noqa: E402

# api key -> (min, max) version served, added to the null broker's
GROUP_TXN_VERSIONS = {8: (2, 8), 9: (1, 7), 11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5),
                      24: (0, 3), 25: (0, 3), 26: (0, 3), 28: (0, 3)}
UNKNOWN_MEMBER_ID = 25


@dataclass
class Group:
    generation: int = 0
    protocol: str | None = None
    members: dict[str, bytes] = field(default_factory=dict)  # member id -> subscription metadata
    assignments: dict[str, bytes] = field(default_factory=dict)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)  # committed offsets


class NullTxnBroker(nb.NullBroker):
    def __init__(self, host: str, port: int, value_size: int) -> None:
        super().__init__(host, port, value_size)
        self.groups: dict[str, Group] = {}
        self.pending: dict[int, list[tuple[str, str, int, int]]] = {}  # producer id -> its txn offsets
        self.next_member = 0
        self.versions.update(GROUP_TXN_VERSIONS)
        self.handlers.update({8: self.offset_commit, 9: self.offset_fetch, 11: self.join_group,
                              12: self.heartbeat, 13: self.leave_group, 14: self.sync_group,
                              24: self.add_partitions_to_txn, 25: self.add_offsets_to_txn, 26: self.end_txn,
                              28: self.txn_offset_commit})

    def group(self, name: str) -> Group:
        g = self.groups.get(name)
        if g is None:
            g = self.groups[name] = Group()
        return g

    # -- transactions -----------------------------------------------------------------------------
    def add_partitions_to_txn(self, req: Any, v: int) -> Any:
        r = get_spec(24).response
        T = r.AddPartitionsToTxnTopicResult
        P = T.AddPartitionsToTxnPartitionResult
        return r(version=v, throttle_time_ms=0, results_by_topic_v3_and_below=[
            T(version=v, name=t.name, results_by_partition=[
                P(version=v, partition_index=p, partition_error_code=0) for p in t.partitions])
            for t in req.v3_and_below_topics])

    def add_offsets_to_txn(self, req: Any, v: int) -> Any:
        return get_spec(25).response(version=v, throttle_time_ms=0, error_code=0)

    def txn_offset_commit(self, req: Any, v: int) -> Any:
        r = get_spec(28).response
        T = r.TxnOffsetCommitResponseTopic
        P = T.TxnOffsetCommitResponsePartition
        pending = self.pending.setdefault(req.producer_id, [])
        for t in req.topics:
            for p in t.partitions:
                pending.append((req.group_id, t.name, p.partition_index, p.committed_offset))
        return r(version=v, throttle_time_ms=0, topics=[
            T(version=v, name=t.name, partitions=[P(version=v, partition_index=p.partition_index, error_code=0)
                                                  for p in t.partitions]) for t in req.topics])

    def end_txn(self, req: Any, v: int) -> Any:
        pending = self.pending.pop(req.producer_id, ())
        if req.committed:
            for group, topic, partition, offset in pending:
                self.group(group).offsets[(topic, partition)] = offset
        return get_spec(26).response(version=v, throttle_time_ms=0, error_code=0)

    # -- groups -------------------------------------------------------------------------------------
    def join_group(self, req: Any, v: int) -> Any:
        r = get_spec(11).response
        g = self.group(req.group_id)
        member = req.member_id
        if not member:
            self.next_member += 1
            member = f"member-{self.next_member}"
        proto = req.protocols[0] if req.protocols else None
        g.members[member] = bytes(proto.metadata) if proto is not None else b""
        g.protocol = proto.name if proto is not None else None
        g.generation += 1
        leader = next(iter(g.members))
        members = [r.JoinGroupResponseMember(version=v, member_id=m, group_instance_id=None, metadata=md)
                   for m, md in g.members.items()] if member == leader else []
        return r(version=v, throttle_time_ms=0, error_code=0, generation_id=g.generation,
                 protocol_type=req.protocol_type, protocol_name=g.protocol, leader=leader, skip_assignment=False,
                 member_id=member, members=members)

    def sync_group(self, req: Any, v: int) -> Any:
        g = self.group(req.group_id)
        for a in req.assignments:
            g.assignments[a.member_id] = bytes(a.assignment)
        return get_spec(14).response(version=v, throttle_time_ms=0, error_code=0,
                                     protocol_type=getattr(req, "protocol_type", None), protocol_name=g.protocol,
                                     assignment=g.assignments.get(req.member_id, b""))

    def heartbeat(self, req: Any, v: int) -> Any:
        known = req.member_id in self.group(req.group_id).members
        return get_spec(12).response(version=v, throttle_time_ms=0, error_code=0 if known else UNKNOWN_MEMBER_ID)

    def leave_group(self, req: Any, v: int) -> Any:
        r = get_spec(13).response
        g = self.group(req.group_id)
        ids = [req.member_id] if v < 3 else [m.member_id for m in req.members]
        for m in ids:
            g.members.pop(m, None)
            g.assignments.pop(m, None)
        return r(version=v, throttle_time_ms=0, error_code=0, members=[
            r.MemberResponse(version=v, member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=0)
            for m in (req.members if v >= 3 else [])])

    def offset_commit(self, req: Any, v: int) -> Any:
        r = get_spec(8).response
        T = r.OffsetCommitResponseTopic
        P = T.OffsetCommitResponsePartition
        g = self.group(req.group_id)
        for t in req.topics:
            for p in t.partitions:
                g.offsets[(t.name, p.partition_index)] = p.committed_offset
        return r(version=v, throttle_time_ms=0, topics=[
            T(version=v, name=t.name, partitions=[P(version=v, partition_index=p.partition_index, error_code=0)
                                                  for p in t.partitions]) for t in req.topics])

    def offset_fetch(self, req: Any, v: int) -> Any:
        r = get_spec(9).response
        T = r.OffsetFetchResponseTopic
        P = T.OffsetFetchResponsePartition
        g = self.group(req.group_id)
        if req.topics is None:  # every committed offset of the group
            wanted: dict[str, list[int]] = {}
            for (topic, partition) in g.offsets:
                wanted.setdefault(topic, []).append(partition)
        else:
            wanted = {t.name: list(t.partition_indexes) for t in req.topics}
        topics = [T(version=v, name=name, partitions=[
            P(version=v, partition_index=i, committed_offset=g.offsets.get((name, i), -1), committed_leader_epoch=-1,
              metadata="", error_code=0) for i in parts]) for name, parts in wanted.items()]
        return r(version=v, throttle_time_ms=0, topics=topics, error_code=0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, help="serve on this port (else: run txn_bench's phases against a subprocess)")
    ap.add_argument("--value-size", type=int, default=100, help="value bytes of Fetch's records for a topic "
                    "nothing was produced to")
    ap.add_argument("--transactions", type=int, default=1000)
    ap.add_argument("--ctp-records", type=int, default=200_000)
    ap.add_argument("--ctp-batch", type=int, default=500)
    args = ap.parse_args()
    if args.port:
        nb.run_server(NullTxnBroker, args.host, args.port, args.value_size)
        return 0
    import txn_bench

    proc = nb.NullBrokerProcess(value_size=args.value_size, script=Path(__file__).resolve())
    proc.start()
    try:
        bootstrap = proc.bootstrap
        txn_bench.create_topics(bootstrap, "nulltxn", "nulltxn-in", "nulltxn-out")
        print(txn_bench.bench_commits(bootstrap, "nulltxn", args.transactions, proc.pid).describe(), flush=True)
        ctp = txn_bench.bench_ctp(bootstrap, "nulltxn-in", "nulltxn-out", args.ctp_records, args.ctp_batch, proc.pid)
        print(ctp.describe(args.ctp_batch))
    finally:
        proc.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
