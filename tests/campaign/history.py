"""The campaign history: every client operation's invocation and completion, as JSON lines.

One line per event, written by the process that performs the operation (a workload worker, the
final drain) to its own file, flushed line by line so a worker killed mid-operation leaves its
invocation behind. Fields:

``t``       nanoseconds since the campaign's epoch (CLOCK_MONOTONIC, shared by every process)
``p``       the logical client ("process" in Jepsen's terms): ``<worker>.<incarnation>``; a client
            that crashed or was torn down after an indeterminate operation never comes back under
            the same name, so per-process order checks only ever see one client instance
``type``    ``invoke``, then ``ok`` / ``fail`` (definitely had no effect) / ``info`` (indeterminate)
``f``       ``send``, ``poll``, ``txn`` (micro-operations), ``assign``, ``subscribe``, ``seek``,
            ``crash`` (client torn down)
``value``   send/poll/txn: a list of micro-operations, Jepsen's encoding: ``["send", key, value]``
            invoked, ``["send", key, [offset, value]]`` completed (offset null when unknown) and
            ``["poll", {key: [[offset, value], ...]}]``; assign/subscribe: the keys; seek: {key: offset}
``mode``    how the client's consumer was attached when the operation ran: ``assign``/``subscribe``
``resumed`` assign: the keys whose position was carried over from the previous assignment
``rebalance`` keys whose assignment changed (assigned or revoked) while the operation ran
``outcome`` txn: ``commit`` / ``abort`` (what the client tried), ``error``: the error text
``client``  ``confluent`` / ``kafka-python``; ``wl``: the workload (``queue`` / ``txn``)

Keys are partitions, written ``<topic>/<partition>``. Values are unique integers (a worker's
number in the high bits). ``load`` merges the files of a run into one history ordered by time and
turns an invocation without completion into an ``info`` completion, as Jepsen does.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

HISTORY_GLOB = "history-*.jsonl"
WORKER_VALUE_SHIFT = 32  # value = worker number << 32 | sequence: unique across workers and incarnations


def make_key(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"


def split_key(key: str) -> tuple[str, int]:
    topic, _, part = key.rpartition("/")
    return topic, int(part)


class HistoryWriter:
    """Appends events of one process to ``path``; thread-safe, each line flushed as written."""

    def __init__(self, path: Path, epoch_ns: int) -> None:
        self.path = Path(path)
        self.epoch_ns = epoch_ns
        self._lock = threading.Lock()
        self._file: TextIO = open(self.path, "a", buffering=1)

    def now(self) -> int:
        return time.monotonic_ns() - self.epoch_ns

    def write(self, event: dict[str, Any]) -> dict[str, Any]:
        event.setdefault("t", self.now())
        line = json.dumps(event, separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")
        return event

    def close(self) -> None:
        with self._lock:
            self._file.close()


@dataclass(slots=True)
class Op:
    """A completed operation (the completion event, with its invocation's time)."""

    index: int
    process: str
    type: str  # ok / fail / info
    f: str
    value: Any
    time: int  # completion
    invoke_time: int
    error: str | None = None
    mode: str | None = None
    client: str | None = None
    workload: str | None = None
    outcome: str | None = None
    resumed: list[str] | None = None
    rebalance: set[str] = field(default_factory=set)
    # Derived for send/poll/txn: writes[key] = [(offset|None, value)], reads[key] = [(offset, value)]
    writes: dict[str, list[tuple[int | None, int]]] = field(default_factory=dict)
    reads: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    @property
    def is_rw(self) -> bool:
        return self.f in ("send", "poll", "txn")

    def brief(self) -> dict[str, Any]:
        """A short form for reports: enough to find the op in the history file."""
        out: dict[str, Any] = {"index": self.index, "process": self.process, "type": self.type, "f": self.f,
                               "time_s": round(self.time / 1e9, 3)}
        if self.outcome:
            out["outcome"] = self.outcome
        if self.error:
            out["error"] = self.error[:200]
        return out


def _derive(op: Op) -> None:
    if not op.is_rw or not isinstance(op.value, list):
        return
    for mop in op.value:
        if not mop:
            continue
        if mop[0] == "send" and len(mop) >= 3:
            key, v = mop[1], mop[2]
            pair = (v[0], v[1]) if isinstance(v, list) else (None, v)
            op.writes.setdefault(key, []).append(pair)
        elif mop[0] == "poll" and len(mop) >= 2 and isinstance(mop[1], dict):
            for key, pairs in mop[1].items():
                op.reads.setdefault(key, []).extend((o, v) for o, v in pairs)


def iter_events(paths: Iterable[Path]) -> Iterator[dict[str, Any]]:
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a kill -9 of its writer


def pair_events(events: Iterable[dict[str, Any]], end_time: int | None = None) -> list[Op]:
    """Completions, each with its invocation's time, ordered by completion time; an invocation
    left without completion becomes ``info`` (it may or may not have taken effect)."""
    pending: dict[str, dict[str, Any]] = {}
    ops: list[Op] = []
    for ev in events:
        p = ev["p"]
        if ev["type"] == "invoke":
            if p in pending:  # two invocations in a row: the first never completed
                ops.append(_completion(pending.pop(p), None))
            pending[p] = ev
            continue
        inv = pending.pop(p, None)
        ops.append(_completion(inv, ev))
    for inv in pending.values():
        # Its completion time is unknown: the invocation's own (it never returned).
        ops.append(_completion(inv, None, end_time if end_time is not None else inv["t"]))
    ops.sort(key=lambda o: (o.time, o.process))
    for i, op in enumerate(ops):
        op.index = i
    return ops


def _completion(inv: dict[str, Any] | None, done: dict[str, Any] | None, end_time: int = 0) -> Op:
    src = done if done is not None else inv
    assert src is not None
    if done is None:
        assert inv is not None
        value = inv.get("value")
        if inv["f"] in ("send", "txn") and isinstance(value, list):
            # Unknown outcome: keep the sends (offset unknown), drop the (unperformed) polls.
            value = [["send", m[1], [None, m[2]]] for m in value if m and m[0] == "send"]
        op = Op(index=0, process=inv["p"], type="info", f=inv["f"], value=value, time=max(end_time, inv["t"]),
                invoke_time=inv["t"], error="no completion (client killed or hung)", mode=inv.get("mode"),
                client=inv.get("client"), workload=inv.get("wl"))
    else:
        op = Op(index=0, process=done["p"], type=done["type"], f=done["f"], value=done.get("value"),
                time=done["t"], invoke_time=inv["t"] if inv is not None else done["t"], error=done.get("error"),
                mode=done.get("mode") or (inv or {}).get("mode"), client=done.get("client"),
                workload=done.get("wl"), outcome=done.get("outcome"), resumed=done.get("resumed"),
                rebalance=set(done.get("rebalance") or ()))
    _derive(op)
    return op


def load(run_dir: Path) -> list[Op]:
    """The merged history of a run directory (every ``history-*.jsonl`` in it)."""
    return pair_events(iter_events(sorted(Path(run_dir).glob(HISTORY_GLOB))))


def ops_from_events(events: list[dict[str, Any]]) -> list[Op]:
    """For tests: a history given as a list of events (invocations may be left out: a completion
    without invocation stands for both)."""
    return pair_events(events)
