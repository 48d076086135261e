"""The history checker: Jepsen's Kafka anomaly classes, computed from a campaign history.

Follows ``jepsen.tests.kafka`` (jepsen-io/jepsen) for the definitions:

- *version orders*: per key, offset -> values, from every poll (whatever the poller's outcome:
  consumers must only ever see safe data) and from the acknowledged sends of operations that must
  have taken effect (ok, or indeterminate with a value some ok operation read). Values are then
  ranked by offset, ignoring gaps (control records, aborted records): dense *indices*.
- ``inconsistent-offsets``: one offset, several values. ``duplicate``: one value at several offsets.
- ``lost-write``: a value that must have been written, below the highest index some ok poll of
  its key read, that no ok poll read. ``unseen``: acknowledged, never read by an ok poll at all
  (after the final drain, which reads every partition to its end, there must be none).
- ``G1a`` (aborted read): an ok poll read a value whose send definitely failed (aborted
  transaction). ``precommitted-read``: an operation read a value it wrote itself.
- ``int-poll-skip`` / ``int-nonmonotonic-poll``: two successive reads of a key inside one
  operation that skip over values of the version order, or go back (keys rebalanced during the
  operation are exempt). ``poll-skip`` / ``nonmonotonic-poll``: the same between one client's
  successive operations (reset by assign, subscribe, seek and rebalances).
- ``int-send-skip`` / ``int-nonmonotonic-send``: two successive sends to a key in one operation
  that are not adjacent / go back in the version order; ``nonmonotonic-send``: one client's
  successive sends to a key go back.
- ``G0``, ``G1c``: dependency cycles (tests/campaign/cycles.py).

Added by this harness:
- ``torn-transaction``: a read_committed client read some values of a committed transaction and
  skipped over others of the same transaction (within one uninterrupted assignment).
- ``unwritten-read``: a polled value that no operation ever sent (corrupted or invented data).

Allowed (Jepsen's ``allowed-error-types``, reported apart): ``G0``, ``int-send-skip``,
``G1c-ww`` (cycles that need write-write edges, which Kafka's unisolated writes produce), and
``poll-skip`` / ``nonmonotonic-poll`` of a client attached with ``subscribe``. Departure: Jepsen
allows those two for every client once any client subscribes; here a client attached with
``assign`` is held to them.

Indeterminate operations (``info``) as Jepsen: their sends may or may not have happened, so they
count only once one of their values was read; their reads are observations like any other.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .cycles import WR, WW, Graph, find_cycles
from .history import Op

VIOLATIONS = ("lost-write", "duplicate", "inconsistent-offsets", "unseen", "unwritten-read", "G1a",
              "precommitted-read", "G1c", "torn-transaction", "int-poll-skip", "int-nonmonotonic-poll",
              "poll-skip", "nonmonotonic-poll", "int-nonmonotonic-send", "nonmonotonic-send")
ALLOWED = ("G0", "G1c-ww", "int-send-skip", "poll-skip", "nonmonotonic-poll")
EXAMPLES = 20  # cases kept per class in the report (the count is always complete)


@dataclass
class VersionOrder:
    log: dict[int, set[int]] = field(default_factory=dict)
    by_index: list[int] = field(default_factory=list)
    by_value: dict[int, int] = field(default_factory=dict)  # value -> index (its last appearance)
    first_index: dict[int, int] = field(default_factory=dict)
    offsets_of: dict[int, list[int]] = field(default_factory=dict)

    def add(self, offset: int, value: int) -> None:
        self.log.setdefault(offset, set()).add(value)

    def finish(self) -> None:
        for i, off in enumerate(sorted(self.log)):
            values = self.log[off]
            self.by_index.append(min(values))
            for v in sorted(values):
                self.by_value[v] = i
                self.first_index.setdefault(v, i)
                self.offsets_of.setdefault(v, []).append(off)


@dataclass
class Findings:
    """Cases per class, counted in full, with up to EXAMPLES kept for the report."""

    counts: Counter[str] = field(default_factory=Counter)
    cases: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))

    def add(self, name: str, case: dict[str, Any]) -> None:
        self.counts[name] += 1
        if len(self.cases[name]) < EXAMPLES:
            self.cases[name].append(case)

    def as_dict(self) -> dict[str, Any]:
        return {name: {"count": n, "examples": self.cases[name]} for name, n in sorted(self.counts.items())}


@dataclass
class CheckResult:
    anomalies: Findings
    allowed: Findings
    stats: dict[str, Any]

    @property
    def valid(self) -> bool:
        return not self.anomalies.counts

    def as_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "anomalies": self.anomalies.as_dict(), "allowed": self.allowed.as_dict(),
                "stats": self.stats}


class Analysis:
    def __init__(self, ops: list[Op]) -> None:
        self.ops = [op for op in ops if op.type != "invoke"]
        self.writer_of: dict[str, dict[int, Op]] = defaultdict(dict)
        self.ok_reads: dict[str, set[int]] = defaultdict(set)
        self.failed_writes: dict[str, set[int]] = defaultdict(set)
        for op in self.ops:
            for k, pairs in op.writes.items():
                for _, v in pairs:
                    self.writer_of[k][v] = op
                    if op.type == "fail":
                        self.failed_writes[k].add(v)
            if op.type == "ok":
                for k, pairs in op.reads.items():
                    self.ok_reads[k].update(v for _, v in pairs)
        self.process_reads: dict[str, dict[str, set[int]]] = {}
        self.orders: dict[str, VersionOrder] = defaultdict(VersionOrder)
        for op in self.ops:
            committed = self.must_have_committed(op)
            for k, pairs in op.writes.items():
                if committed:
                    for off, v in pairs:
                        if off is not None and off >= 0:
                            self.orders[k].add(off, v)
            for k, pairs in op.reads.items():
                for off, v in pairs:
                    self.orders[k].add(off, v)
        for vo in self.orders.values():
            vo.finish()

    def must_have_committed(self, op: Op) -> bool:
        if op.type == "ok":
            return True
        if op.type != "info":
            return False
        return any(v in self.ok_reads.get(k, ()) for k, pairs in op.writes.items() for _, v in pairs)

    def index(self, key: str, value: int) -> int | None:
        vo = self.orders.get(key)
        return None if vo is None else vo.by_value.get(value)


def _trim(op: Op, key: str, values: Iterable[int] = ()) -> dict[str, Any]:
    """An op's brief form plus its sends/reads of ``key`` (around ``values`` when given)."""
    out = op.brief()
    want = set(values)
    reads = op.reads.get(key, [])
    if want and len(reads) > 12:
        pos = [i for i, (_, v) in enumerate(reads) if v in want]
        if pos:
            reads = reads[max(0, min(pos) - 3): max(pos) + 4]
        else:
            reads = reads[:3] + reads[-3:]
    elif len(reads) > 12:
        reads = reads[:6] + reads[-6:]
    if reads:
        out["reads"] = {key: [list(p) for p in reads]}
    if key in op.writes:
        out["sends"] = {key: [list(p) for p in op.writes[key]]}
    return out


def check(ops: list[Op]) -> CheckResult:
    a = Analysis(ops)
    bad, ok = Findings(), Findings()
    _offsets(a, bad)
    _lost_and_unseen(a, bad)
    _aborted_and_precommitted(a, bad)
    _internal(a, bad, ok)
    _per_process(a, bad, ok)
    _nonmonotonic_send(a, bad)
    _cycles(a, bad, ok)
    return CheckResult(bad, ok, stats(a.ops))


def _offsets(a: Analysis, bad: Findings) -> None:
    for k, vo in sorted(a.orders.items()):
        for off in sorted(vo.log):
            values = vo.log[off]
            if len(values) > 1:
                ops = [a.writer_of[k][v].brief() for v in sorted(values) if v in a.writer_of[k]]
                bad.add("inconsistent-offsets", {"key": k, "offset": off, "values": sorted(values), "writers": ops})
        for v, offs in vo.offsets_of.items():
            if len(offs) > 1:
                w = a.writer_of[k].get(v)
                bad.add("duplicate", {"key": k, "value": v, "offsets": offs, "writer": w.brief() if w else None})
        for v in vo.by_value:
            if v not in a.writer_of.get(k, {}):
                bad.add("unwritten-read", {"key": k, "value": v, "offsets": vo.offsets_of.get(v)})


def _lost_and_unseen(a: Analysis, bad: Findings) -> None:
    readers: dict[tuple[str, int], Op] = {}
    for op in a.ops:
        if op.type == "ok":
            for k, pairs in op.reads.items():
                for _, v in pairs:
                    readers.setdefault((k, v), op)
    for k, vs in sorted(a.ok_reads.items()):
        vo = a.orders.get(k)
        if vo is None:
            continue
        bound = max((vo.first_index[v] for v in vs if v in vo.first_index), default=-1)
        if bound < 0:
            continue
        max_value = vo.by_index[bound]
        for v, last in vo.by_value.items():
            if last > bound or v in vs:
                continue
            w = a.writer_of[k].get(v)
            if w is None or not a.must_have_committed(w):
                continue
            r = readers.get((k, max_value))
            bad.add("lost-write", {"key": k, "value": v, "offset": vo.offsets_of[v][0], "index": vo.first_index[v],
                                   "max_read_index": bound, "writer": _trim(w, k, [v]),
                                   "max_read": _trim(r, k, [max_value]) if r else None})
    unseen: dict[str, list[int]] = {}
    for k, writers in a.writer_of.items():
        read = a.ok_reads.get(k, set())
        missing = sorted(v for v, w in writers.items() if w.type == "ok" and v not in read)
        if missing:
            unseen[k] = missing
    for k, values in sorted(unseen.items()):
        bad.add("unseen", {"key": k, "count": len(values), "values": values[:32],
                           "writers": [a.writer_of[k][v].brief() for v in values[:5]]})


def _aborted_and_precommitted(a: Analysis, bad: Findings) -> None:
    for op in a.ops:
        if op.type == "ok" and op.reads:
            for k, pairs in op.reads.items():
                failed = a.failed_writes.get(k)
                if failed:
                    for _, v in pairs:
                        if v in failed:
                            bad.add("G1a", {"key": k, "value": v, "writer": _trim(a.writer_of[k][v], k, [v]),
                                            "reader": _trim(op, k, [v])})
        if op.reads and op.writes:
            for k, pairs in op.writes.items():
                mine = {v for _, v in pairs} & {v for _, v in op.reads.get(k, ())}
                if mine:
                    bad.add("precommitted-read", {"key": k, "values": sorted(mine), "op": _trim(op, k, mine)})


def _delta(a: Analysis, k: str, v1: int, v2: int) -> tuple[int, list[int]]:
    """Index distance v1 -> v2 in k's version order, and the values skipped between them."""
    i1, i2 = a.index(k, v1), a.index(k, v2)
    if i1 is None or i2 is None:
        return 1, []
    skipped = a.orders[k].by_index[i1 + 1: i2] if i2 - i1 > 1 else []
    return i2 - i1, skipped


def _internal(a: Analysis, bad: Findings, ok: Findings) -> None:
    for op in a.ops:
        for k, pairs in op.reads.items():
            if k in op.rebalance:
                continue
            for (_, v1), (_, v2) in zip(pairs, pairs[1:], strict=False):
                d, skipped = _delta(a, k, v1, v2)
                if d > 1:
                    bad.add("int-poll-skip", {"key": k, "values": [v1, v2], "delta": d, "skipped": skipped[:16],
                                              "op": _trim(op, k, [v1, v2])})
                    _torn(a, bad, op.process, k, skipped, [op])
                elif d < 1:
                    bad.add("int-nonmonotonic-poll", {"key": k, "values": [v1, v2], "delta": d,
                                                      "op": _trim(op, k, [v1, v2])})
        for k, pairs in op.writes.items():
            for (_, v1), (_, v2) in zip(pairs, pairs[1:], strict=False):
                d, skipped = _delta(a, k, v1, v2)
                if d > 1:
                    ok.add("int-send-skip", {"key": k, "values": [v1, v2], "delta": d, "op": _trim(op, k, [v1, v2])})
                elif d < 1:
                    bad.add("int-nonmonotonic-send", {"key": k, "values": [v1, v2], "delta": d,
                                                      "op": _trim(op, k, [v1, v2])})


def _by_process(a: Analysis) -> dict[str, list[Op]]:
    out: dict[str, list[Op]] = defaultdict(list)
    for op in a.ops:
        out[op.process].append(op)
    return out


def _per_process(a: Analysis, bad: Findings, ok: Findings) -> None:
    """poll-skip / nonmonotonic-poll between one client's operations (Jepsen's per-process scan)."""
    for process, ops in _by_process(a).items():
        last: dict[str, tuple[Op, int]] = {}  # key -> (last ok op that read it, the last value it read)
        for op in ops:
            if op.f in ("assign", "subscribe"):
                if op.type == "ok":
                    keep = set(op.resumed if op.resumed is not None else (op.value or []))
                    last = {k: x for k, x in last.items() if k in keep}
                continue
            if op.f == "seek":
                if op.type == "ok":
                    for k in (op.value or {}):
                        last.pop(k, None)
                continue
            for k in op.rebalance:
                last.pop(k, None)
            for k, pairs in op.reads.items():
                prev = last.get(k)
                if prev is None or not pairs:
                    continue
                prev_op, v1 = prev
                v2 = pairs[0][1]
                d, skipped = _delta(a, k, v1, v2)
                target = ok if op.mode == "subscribe" else bad
                if d > 1:
                    target.add("poll-skip", {"key": k, "values": [v1, v2], "delta": d, "skipped": skipped[:16],
                                             "mode": op.mode, "ops": [_trim(prev_op, k, [v1]), _trim(op, k, [v2])]})
                    _torn(a, bad, process, k, skipped, [prev_op, op])
                elif d < 1:
                    target.add("nonmonotonic-poll", {"key": k, "values": [v1, v2], "delta": d, "mode": op.mode,
                                                     "ops": [_trim(prev_op, k, [v1]), _trim(op, k, [v2])]})
            if op.type == "ok":
                for k, pairs in op.reads.items():
                    if pairs:
                        last[k] = (op, pairs[-1][1])
            for k in op.rebalance:  # the position may have moved after this op's reads
                last.pop(k, None)


def _torn(a: Analysis, bad: Findings, process: str, k: str, skipped: list[int], where: list[Op]) -> None:
    """Skipped values written by a committed transaction of which ``process`` read other values."""
    if not skipped:
        return
    txns = {}
    for v in skipped:
        w = a.writer_of[k].get(v)
        if w is not None and w.f == "txn" and a.must_have_committed(w):
            txns[w.index] = w
    if not txns:
        return
    seen = a.process_reads.get(process)
    if seen is None:  # built only for the (rare) processes with a skip
        seen = defaultdict(set)
        for op in a.ops:
            if op.process == process:
                for key, pairs in op.reads.items():
                    seen[key].update(v for _, v in pairs)
        a.process_reads[process] = seen
    for w in txns.values():
        read = {key: [v for _, v in pairs if v in seen.get(key, ())] for key, pairs in w.writes.items()}
        if any(read.values()):
            bad.add("torn-transaction", {
                "process": process, "key": k, "skipped": [v for v in skipped if a.writer_of[k].get(v) is w],
                "read": {key: vs for key, vs in read.items() if vs}, "txn": {**w.brief(), "sends": {
                    key: [list(p) for p in pairs] for key, pairs in w.writes.items()}},
                "ops": [x.brief() for x in where]})


def _nonmonotonic_send(a: Analysis, bad: Findings) -> None:
    for _process, ops in _by_process(a).items():
        last: dict[str, tuple[Op, int]] = {}
        for op in ops:
            if op.type not in ("ok", "info") or not op.writes:
                continue
            for k, pairs in op.writes.items():
                prev = last.get(k)
                if prev is not None:
                    d, _ = _delta(a, k, prev[1], pairs[0][1])
                    if d < 1:
                        bad.add("nonmonotonic-send", {"key": k, "values": [prev[1], pairs[0][1]], "delta": d,
                                                      "ops": [_trim(prev[0], k, [prev[1]]),
                                                              _trim(op, k, [pairs[0][1]])]})
            for k, pairs in op.writes.items():
                last[k] = (op, pairs[-1][1])


def _cycles(a: Analysis, bad: Findings, ok: Findings) -> None:
    g = Graph()
    by_index = {op.index: op for op in a.ops}
    for k, vo in a.orders.items():
        writers = a.writer_of.get(k, {})
        prev: Op | None = None
        for v in vo.by_index:
            w = writers.get(v)
            if w is not None and prev is not None and w is not prev:
                g.link(prev.index, w.index, WW)
            if w is not None:
                prev = w
    for op in a.ops:
        if op.type == "fail" or not op.writes or not op.reads or not a.must_have_committed(op):
            continue  # a pure reader is a sink: never on a cycle
        for k, pairs in op.reads.items():
            writers = a.writer_of.get(k, {})
            for _, v in pairs:
                w = writers.get(v)
                if w is not None and w is not op and a.must_have_committed(w):
                    g.link(w.index, op.index, WR)
    found = find_cycles(g)
    for name, cycles in found.items():
        target = bad if name == "G1c" else ok
        for steps in cycles:
            target.add(name, {"steps": [{"from": by_index[x].brief(), "edge": kind, "to": by_index[y].brief()}
                                        for x, kind, y in steps]})


def stats(ops: list[Op]) -> dict[str, Any]:
    by: Counter[str] = Counter()
    for op in ops:
        by[f"{op.f}:{op.type}"] += 1
    client_ops = [op for op in ops if op.f in ("send", "poll", "txn")]
    return {
        "ops": len(ops),
        "rw_ops": len(client_ops),
        "by_f_type": dict(sorted(by.items())),
        "sent_values": sum(len(p) for op in ops for p in op.writes.values()),
        "read_values": sum(len(p) for op in ops for p in op.reads.values()),
        "nonempty_polls": sum(1 for op in ops if op.f == "poll" and op.reads),
        "txn_commits": sum(1 for op in ops if op.f == "txn" and op.type == "ok"),
        "txn_aborts": sum(1 for op in ops if op.f == "txn" and op.type == "fail"),
        "indeterminate": sum(1 for op in ops if op.type == "info" and op.f in ("send", "txn")),
    }
