"""What the two Spark sink protocols share (spark_jobs/sink.py's per-task transactions and
spark_jobs/sink_2pc.py's two-phase commit): the tasks' commit message, the fault-injection hooks,
column access to the Arrow batches a task writes, and the writer attributes the 2pc protocol reads.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

CRASH_ENV = "KBROKERTEST_SPARK_CRASH_AT_BATCH"


@dataclass
class TaskReport(WriterCommitMessage):
    """What one write task did; collected by the driver's commit()."""

    partition: int
    batch_id: int | None
    attempt: int
    records: int
    skipped: bool
    transactional_id: str | None
    prepared: str | None = None  # exactlyOnce.mode=2pc: the PreparedTxnState ("id:epoch") to complete


@dataclass(frozen=True)
class FailTask:
    batch: int | None  # None = any batch (and batch writes)
    partition: int
    after_rows: int
    mode: str  # "raise": exception from the task; "kill": SIGKILL the Python worker

    @classmethod
    def parse(cls, text: str | None) -> FailTask | None:
        if not text:
            return None
        parts = text.split(":")
        if len(parts) not in (3, 4):
            raise ValueError(f"kbroker.fault.failTask must be batch:partition:rows[:raise|kill], got {text!r}")
        mode = parts[3] if len(parts) == 4 else "raise"
        if mode not in ("raise", "kill"):
            raise ValueError(f"kbroker.fault.failTask mode must be raise or kill, got {mode!r}")
        return cls(None if parts[0] in ("*", "") else int(parts[0]), int(parts[1]), int(parts[2]), mode)


class Rows:
    """Column access for one Arrow batch in the sink's input schema (key/value/topic/partition/headers)."""

    def __init__(self, batch: pa.RecordBatch, default_topic: str | None) -> None:
        names = batch.schema.names
        self.n = batch.num_rows
        self.values = _bytes_column(batch.column(names.index("value")))
        self.keys = _bytes_column(batch.column(names.index("key"))) if "key" in names else None
        self.topics = batch.column(names.index("topic")).to_pylist() if "topic" in names else None
        self.partitions = batch.column(names.index("partition")).to_pylist() if "partition" in names else None
        self.headers = batch.column(names.index("headers")).to_pylist() if "headers" in names else None
        self.default_topic = default_topic

    def topic(self, i: int) -> str:
        t = self.topics[i] if self.topics is not None else None
        t = t or self.default_topic
        if not t:
            raise ValueError("row has no topic: set the 'topic' option or provide a topic column")
        return t


def _bytes_column(column: pa.Array) -> list[bytes | None]:
    """A string or binary column as Python bytes (None for nulls), converted column-wise by Arrow.

    Casting string to binary reuses the UTF-8 buffers, so no per-row ``str.encode`` is needed.
    """
    if pa.types.is_string(column.type):
        column = column.cast(pa.binary())
    elif pa.types.is_large_string(column.type):
        column = column.cast(pa.large_binary())
    return column.to_pylist()


def crash_driver() -> None:
    """SIGKILL the driver Python process, its Spark JVM, and this worker's process group (Linux)."""

    def parent_and_name(pid: int) -> tuple[int, str]:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        name = stat[stat.index("(") + 1: stat.rindex(")")]
        return int(stat[stat.rindex(")") + 2:].split()[1]), name

    pid = os.getppid()
    while pid > 1:
        parent, name = parent_and_name(pid)
        if name == "java":  # the driver JVM; its parent is the driver's Python process
            os.kill(parent, signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)
            break
        pid = parent
    os.killpg(os.getpgid(0), signal.SIGKILL)


class SinkWriter(Protocol):
    """The stream writer (spark_jobs/sink.py's KBrokerStreamWriter) as the 2pc protocol uses it."""

    options: dict[str, str]
    conf: dict[str, str]
    sink_name: str
    txn_prefix: str
    topic: str | None
    twopc: Any
    fail_task: FailTask | None
    columns: list[str]
    raw_writer: bool  # the sink option rawWriter

    def opt(self, name: str) -> str | None: ...

    def adopt_task(self, transactional_id: str) -> None: ...

    def produce_raw(self, txn: Any, batches: Iterator[pa.RecordBatch], *, batch_id: int | None, partition: int,
                    attempt: int) -> int: ...

    def keeps_open(self, producer: Any) -> bool: ...
