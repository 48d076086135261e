"""``exactlyOnce.mode=2pc``: the batch-atomic streaming sink on two-phase commit (KIP-939).

Roles (docs/spark.md, "Batch-atomic mode" has the whole story):

* **Tasks** (executors) write their rows of micro-batch *b*, Spark partition *p*, in one 2PC
  transaction with the deterministic id ``<prefix>.<scope>.2pc.<b>.<p>`` and *prepare* it: the
  commit message carries the id and the PreparedTxnState ("producerId:epoch"). A retried attempt
  reuses the id, so its InitProducerId fences the failed attempt and aborts what it left open.
* **The driver's commit(b)** records its decision, ``<checkpoint>/kbroker_2pc/<b>.json`` (every
  id and state), *before* completing anything, then commits every prepared transaction
  (``completeTransaction``), then moves the gate (below). Spark writes ``commits/<b>`` only after
  this returns, so the decision file closes the window between the two: a batch whose decision
  exists is committed, whatever Spark's commit log says yet.
* **The driver before every batch** (Spark builds the writer for the tasks then) recovers:
  every open transaction of this query (ListTransactions, by id prefix) belongs to a batch that is
  either decided or in Spark's commit log, and is committed, or else is aborted (Spark replays
  that batch). A decided batch that Spark's log does not have yet is replayed by Spark with
  nothing to write: its tasks skip (the writer carries that set to them).
* **The gate** makes a micro-batch visible at once in every partition of the ``topic`` option: an
  ordinary (non-2PC) transaction with one record per partition, opened before the batch's tasks
  write and aborted after all of them committed. While it is open the partitions' last stable
  offset stays at the gate, so read_committed readers see none of the batch; its abort moves
  every LSO past the whole batch. Its timeout (``kbroker.sink.2pc.gateTimeoutMs``) frees the LSO
  when the query stops.

Test hook: with env ``KBROKERTEST_SPARK_CRASH_AT_BATCH=<b>`` commit(b) SIGKILLs the driver after
recording the decision and committing one transaction of the batch (the rest stay prepared);
``KBROKERTEST_SPARK_2PC_COMMIT_DELAY_MS=<ms>`` commits a batch's transactions one by one with
that pause after each (the window a reader would need to see part of a batch without the gate).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from protocol.errors import ErrorCode

from . import raw_writer
from .sink_parts import CRASH_ENV, Rows, SinkWriter, TaskReport, crash_driver
from .twopc_producer import PreparedTxnState, Record, SinkProducer, TwoPhaseError, murmur2_partition

log = logging.getLogger(__name__)

DECISIONS_DIR = "kbroker_2pc"
BATCH_HEADER_OPTION = "kbroker.sink.batchIdHeader"
CHUNK_RECORDS = 5000  # records per Produce request to one partition
CHUNK_BYTES = 1 << 20
GATE_KEY = b"__kbroker_gate__"
COMMIT_DELAY_ENV = "KBROKERTEST_SPARK_2PC_COMMIT_DELAY_MS"


@dataclass(frozen=True)
class RecoveryPlan:
    commit: dict[str, PreparedTxnState | None]  # open id -> its recorded state (None: commit what is kept)
    abort: list[str]
    skip: frozenset[int]  # decided batches Spark will replay: their tasks write nothing
    forget: list[int]  # decision files Spark's commit log made redundant


def parse_tid(prefix: str, tid: str) -> tuple[int, int] | None:
    """(batch, partition) of a task transaction id, None for other ids (the gate)."""
    if not tid.startswith(prefix):
        return None
    b, _, p = tid[len(prefix):].partition(".")
    return (int(b), int(p)) if b.isdigit() and p.isdigit() else None


def plan_recovery(prefix: str, open_tids: Iterable[str], committed: set[int],
                  decided: dict[int, dict[str, str]]) -> RecoveryPlan:
    """What a restarted driver does with the transactions its previous run left open.

    Committed when the batch's decision was recorded (with the recorded state) or Spark's commit
    log has the batch; aborted otherwise (Spark replays the batch and its tasks write it again).
    """
    commit: dict[str, PreparedTxnState | None] = {}
    abort: list[str] = []
    for tid in sorted(open_tids):
        ids = parse_tid(prefix, tid)
        if ids is None:
            continue
        batch = ids[0]
        if batch in decided:
            if tid in decided[batch]:
                commit[tid] = PreparedTxnState.parse(decided[batch][tid])
            else:  # not the attempt Spark took the result of
                abort.append(tid)
        elif batch in committed:
            commit[tid] = None
        else:
            abort.append(tid)
    return RecoveryPlan(commit, abort, frozenset(set(decided) - committed),
                        sorted(b for b in decided if b in committed))


# --- the checkpoint ----------------------------------------------------------------------------


def checkpoint_dir(options: dict[str, str]) -> Path:
    loc = options.get("checkpointlocation")
    if not loc:
        raise ValueError("exactlyOnce.mode=2pc needs the checkpointLocation option on the writeStream")
    if loc.startswith("file:"):
        loc = "/" + loc[len("file:"):].lstrip("/")
    elif "://" in loc:
        raise ValueError(f"exactlyOnce.mode=2pc needs a local or mounted checkpoint path, got {loc!r}")
    return Path(loc)


def query_id(checkpoint: Path) -> str:
    # Spark writes <checkpoint>/metadata ({"id": ...}) when the query is created, before its sink.
    return str(json.loads((checkpoint / "metadata").read_text().splitlines()[0])["id"])


def committed_batches(checkpoint: Path) -> set[int]:
    d = checkpoint / "commits"
    return {int(p.name) for p in d.iterdir() if p.name.isdigit()} if d.is_dir() else set()


def read_decisions(checkpoint: Path) -> dict[int, dict[str, str]]:
    d = checkpoint / DECISIONS_DIR
    out: dict[int, dict[str, str]] = {}
    for p in d.glob("*.json") if d.is_dir() else []:
        if p.stem.isdigit():
            out[int(p.stem)] = json.loads(p.read_text())["transactions"]
    return out


def record_decision(checkpoint: Path, batch: int, txns: dict[str, str]) -> dict[str, str]:
    """Durably record "batch committed" with its transactions (merged with an earlier record)."""
    d = checkpoint / DECISIONS_DIR
    d.mkdir(exist_ok=True)
    path = d / f"{batch}.json"
    if path.exists():
        txns = {**json.loads(path.read_text())["transactions"], **txns}
    tmp = d / f".{batch}.json.tmp"
    with open(tmp, "w") as f:
        json.dump({"batchId": batch, "transactions": txns}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)  # atomic: a reader sees no decision or all of it
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return txns


def forget_decisions(checkpoint: Path, batches: Iterable[int]) -> None:
    for b in batches:
        (checkpoint / DECISIONS_DIR / f"{b}.json").unlink(missing_ok=True)


# --- driver and task state ---------------------------------------------------------------------


@dataclass
class TwoPc:
    """Chosen on the driver at query start, pickled into every task with the writer."""

    bootstrap: str
    checkpoint: str
    prefix: str  # <txn prefix>.<scope>.2pc.
    skip: frozenset[int] = frozenset()
    gate_topic: str | None = None
    gate_timeout_ms: int = 60000
    batch_header: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def tid(self, batch: int, partition: int) -> str:
        return f"{self.prefix}{batch}.{partition}"

    @property
    def gate_tid(self) -> str:
        return f"{self.prefix}gate"


def _bootstrap(conf: dict[str, str]) -> str:
    if conf.get("security.protocol", "plaintext").lower() != "plaintext":
        raise ValueError("exactlyOnce.mode=2pc supports PLAINTEXT listeners only")
    return conf["bootstrap.servers"].split(",")[0].strip()


def _in_commit_runner() -> bool:
    """True in the driver-side worker that runs commit()/abort(): it builds its own writer (PySpark's
    python_streaming_sink_runner calls streamWriter() again), which must not recover anything,
    since the batch it is about to commit is open."""
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_filename.endswith("python_streaming_sink_runner.py"):
            return True
        f = f.f_back
    return False


def setup(writer: SinkWriter) -> TwoPc:
    """On the driver, when Spark builds the writer for the tasks (before every micro-batch):
    recover what earlier runs left open, open the gate if none is. In the commit runner: only
    the names."""
    ck = checkpoint_dir(writer.options)
    scope = query_id(ck) + (f".{writer.sink_name}" if writer.sink_name else "")
    gate = writer.opt("kbroker.sink.2pc.gate")
    state = TwoPc(bootstrap=_bootstrap(writer.conf), checkpoint=str(ck), prefix=f"{writer.txn_prefix}.{scope}.2pc.",
                  gate_topic=writer.topic if gate is None or gate.lower() == "true" else None,
                  gate_timeout_ms=int(writer.opt("kbroker.sink.2pc.gateTimeoutMs") or 60000),
                  batch_header=writer.opt(BATCH_HEADER_OPTION))
    if _in_commit_runner():
        return state
    plan = asyncio.run(_recover(state, ck))
    state.skip = plan.skip
    if plan.skip:
        log.info("2pc: batches %s were committed before a restart; their replay writes nothing", sorted(plan.skip))
    return state


async def _recover(state: TwoPc, ck: Path) -> RecoveryPlan:
    async with SinkProducer(state.bootstrap, state.gate_tid) as p:
        open_tids = await p.list_open(state.prefix)
    plan = plan_recovery(state.prefix, open_tids, committed_batches(ck), read_decisions(ck))
    if plan.commit or plan.abort:
        log.warning("2pc recovery: committing %s, aborting %s", sorted(plan.commit), plan.abort)
    await asyncio.gather(*(_complete(state, tid, s, strict=False) for tid, s in plan.commit.items()),
                         *(_abort(state, tid) for tid in plan.abort))
    forget_decisions(ck, plan.forget)
    # Spark builds the writer before every batch: the gate the last commit opened stays.
    if plan.commit or plan.abort or state.gate_tid not in open_tids:
        await _move_gate(state)
    return plan


async def _complete(state: TwoPc, tid: str, expected: PreparedTxnState | None, *, strict: bool) -> None:
    """Commit the prepared transaction of ``tid`` if it is ``expected`` (any, when None).

    ``strict``: a task of this batch just reported it prepared, so it must still be open and be
    that one; anything else lost its rows and fails the batch instead of passing silently.
    Otherwise (recovery, roll-forward) a completed one was completed by an interrupted commit."""
    async with SinkProducer(state.bootstrap, tid) as p:
        ongoing = await p.start(keep_prepared_txn=True)
        if ongoing is None:
            if strict:
                raise TwoPhaseError(f"2pc: the prepared transaction of {tid} is no longer open; its rows of "
                                    "this batch are lost", ErrorCode.INVALID_TXN_STATE)
            return
        if expected is None or ongoing == expected:
            await p.commit()
            return
        # The open transaction is not the attempt whose result Spark took: that one was fenced
        # (and aborted) by a later attempt. Only speculative execution can do this.
        await p.abort()
        msg = f"2pc: {tid} holds {ongoing}, not the prepared {expected}; its rows of this batch are lost"
        if strict:
            raise TwoPhaseError(msg, ErrorCode.INVALID_TXN_STATE)
        log.error(msg)


async def _abort(state: TwoPc, tid: str) -> None:
    async with SinkProducer(state.bootstrap, tid) as p:
        await p.start()  # keepPreparedTxn=false: the coordinator aborts the open transaction


async def _move_gate(state: TwoPc) -> None:
    """Abort the open gate (everything written before it becomes visible) and open the next one."""
    if not state.gate_topic:
        return
    async with SinkProducer(state.bootstrap, state.gate_tid) as p:
        await p.start(enable_2pc=False, transaction_timeout_ms=state.gate_timeout_ms)
        n = await p.partition_count(state.gate_topic)
        await asyncio.gather(*(p.send(state.gate_topic, i, [(GATE_KEY, b"", [("kbroker.gate", b"1")])])
                               for i in range(n)))


def commit(state: TwoPc, messages: list[Any], batch_id: int) -> None:
    """Driver side: decide (record), then complete every prepared transaction, then move the gate."""

    prepared = {m.transactional_id: m.prepared for m in messages
                if isinstance(m, TaskReport) and m.prepared and m.transactional_id}
    ck = Path(state.checkpoint)
    txns = record_decision(ck, batch_id, prepared)
    crash = os.environ.get(CRASH_ENV)
    if crash is not None and int(crash) == batch_id:
        first = sorted(txns)[:1]
        asyncio.run(_complete_all(state, {t: txns[t] for t in first}, gate=False, fresh=set(prepared)))
        crash_driver()
    # Transactions merged from an earlier decision of this batch may be committed already.
    asyncio.run(_complete_all(state, txns, gate=True, fresh=set(prepared)))
    # Spark runs batch b only after commits/<b-1>: older decisions are in its log now.
    forget_decisions(ck, [b for b in read_decisions(ck) if b < batch_id])
    records = sum(m.records for m in messages if isinstance(m, TaskReport))
    log.info("2pc batch %d: %d records, %d transactions committed", batch_id, records, len(prepared))


async def _complete_all(state: TwoPc, txns: dict[str, str], *, gate: bool, fresh: set[str] | None = None) -> None:
    fresh = fresh or set()
    delay_ms = int(os.environ.get(COMMIT_DELAY_ENV) or 0)
    if delay_ms:  # test hook: one at a time, slowly, so that a reader could catch a half-committed batch
        for tid, s in sorted(txns.items()):
            await _complete(state, tid, PreparedTxnState.parse(s), strict=tid in fresh)
            await asyncio.sleep(delay_ms / 1000)
    else:
        await asyncio.gather(*(_complete(state, tid, PreparedTxnState.parse(s), strict=tid in fresh)
                               for tid, s in txns.items()))
    if gate:
        await _move_gate(state)


def abort(state: TwoPc, messages: list[Any], batch_id: int) -> None:
    """Driver side: Spark gave the batch up. Roll forward if it was decided, else abort its transactions."""
    ck = Path(state.checkpoint)
    decided = read_decisions(ck).get(batch_id)
    if decided is not None:
        log.warning("2pc batch %d aborted by Spark after its commit decision: completing it", batch_id)
        asyncio.run(_complete_all(state, decided, gate=True))
        return
    log.warning("2pc batch %d aborted by Spark: aborting its transactions", batch_id)

    async def run() -> None:
        async with SinkProducer(state.bootstrap, state.gate_tid) as p:
            # Every attempt's, also of tasks whose messages Spark does not have (failed ones).
            open_tids = await p.list_open(f"{state.prefix}{batch_id}.")
        await asyncio.gather(*(_abort(state, t) for t in open_tids))
    asyncio.run(run())


# --- tasks -------------------------------------------------------------------------------------


def write_task(writer: SinkWriter, batches: Iterator[pa.RecordBatch], *, batch_id: int,
               partition: int, attempt: int) -> TaskReport:

    state = writer.twopc
    assert state is not None
    tid = state.tid(batch_id, partition)
    if batch_id in state.skip:
        for _ in batches:  # Spark expects the input consumed
            pass
        return TaskReport(partition, batch_id, attempt, 0, True, tid)
    if raw_writer.usable(writer.conf, writer.columns, writer.raw_writer):
        headers = [(state.batch_header, str(batch_id).encode())] if state.batch_header else []
        n, prepared = _write_raw(writer, tid, batches, batch_id=batch_id, partition=partition, attempt=attempt,
                                 headers=headers)
    else:
        n, prepared = asyncio.run(_write(writer, state, tid, batches, batch_id=batch_id, partition=partition,
                                         attempt=attempt))
    return TaskReport(partition, batch_id, attempt, n, False, tid, str(prepared))


def _not_enabled(e: TwoPhaseError) -> RuntimeError | None:
    if e.code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        return RuntimeError("exactlyOnce.mode=2pc needs transaction.two.phase.commit.enable=true on the broker "
                            "(and TWO_PHASE_COMMIT on the transactional ids when ACLs are on)")
    return None


def _write_raw(writer: SinkWriter, tid: str, batches: Iterator[pa.RecordBatch], *, batch_id: int,
               partition: int, attempt: int, headers: list[tuple[str, bytes]]) -> tuple[int, PreparedTxnState]:
    """The task through the raw writer (spark_jobs/raw_writer.py) when it can serve it: rows
    encoded from the Arrow columns, not one Python tuple each, each with ``headers`` (the batch-id
    header). Keyless rows start at a partition of the transactional id's hash, not at the task's
    partition as in :func:`_write`."""
    txn = raw_writer.RawTransaction(writer.conf, tid, two_phase=True, headers=headers)
    try:
        try:
            txn.init()  # fences earlier attempts of this task and aborts what they left open
        except TwoPhaseError as e:
            if (err := _not_enabled(e)) is not None:
                raise err from e
            raise
        writer.adopt_task(tid)
        txn.begin()
        n = writer.produce_raw(txn, batches, batch_id=batch_id, partition=partition, attempt=attempt)
        return n, txn.prepare()
    finally:
        if not writer.keeps_open(txn):
            txn.close()


async def _write(writer: SinkWriter, state: TwoPc, tid: str, batches: Iterator[pa.RecordBatch], *,
                 batch_id: int, partition: int, attempt: int) -> tuple[int, PreparedTxnState]:

    fault = writer.fail_task
    if fault is not None and not (attempt == 0 and fault.partition == partition
                                  and (fault.batch is None or fault.batch == batch_id)):
        fault = None
    extra = [(state.batch_header, str(batch_id).encode())] if state.batch_header else []
    async with SinkProducer(state.bootstrap, tid) as p:
        try:
            await p.start()  # fences earlier attempts of this task and aborts what they left open
        except TwoPhaseError as e:
            if (err := _not_enabled(e)) is not None:
                raise err from e
            raise
        pending: dict[tuple[str, int], list[Record]] = {}
        size: dict[tuple[str, int], int] = {}
        counts: dict[str, int] = {}
        sticky: dict[str, int] = {}  # keyless rows fill one partition per request, then the next

        async def flush(tp: tuple[str, int]) -> None:
            records = pending.pop(tp, None)
            size.pop(tp, None)
            if records:
                await p.send(tp[0], tp[1], records)
                if sticky.get(tp[0]) == tp[1]:
                    sticky[tp[0]] = (tp[1] + 1) % counts[tp[0]]

        count = 0
        for batch in batches:
            rows = Rows(batch, writer.topic)
            for i in range(rows.n):
                topic = rows.topic(i)
                if topic not in counts:
                    counts[topic] = await p.partition_count(topic)
                key = rows.keys[i] if rows.keys is not None else None
                if rows.partitions is not None and rows.partitions[i] is not None:
                    part = rows.partitions[i]
                elif key is not None:
                    part = murmur2_partition(key, counts[topic])
                else:
                    part = sticky.setdefault(topic, partition % counts[topic])
                headers = [(h["key"], h["value"]) for h in rows.headers[i]] if rows.headers is not None and \
                    rows.headers[i] else []
                value = rows.values[i]
                tp = (topic, part)
                pending.setdefault(tp, []).append((key, value, headers + extra))
                size[tp] = size.get(tp, 0) + len(value or b"") + len(key or b"")
                if len(pending[tp]) >= CHUNK_RECORDS or size[tp] >= CHUNK_BYTES:
                    await flush(tp)
                count += 1
                if fault is not None and count == fault.after_rows:
                    for t in list(pending):
                        await flush(t)  # the rows reach the broker inside the still-open transaction
                    if fault.mode == "kill":
                        os.kill(os.getpid(), signal.SIGKILL)
                    raise RuntimeError(f"kbroker.fault.failTask: injected failure after {fault.after_rows} rows")
        for t in list(pending):
            await flush(t)
        return count, await p.prepare()
