"""No-op Python data sources for measuring the Python Data Source API's own ceiling (benchmarks only).

``format("kbroker-noop")`` as a streaming *source* generates N rows in memory in the kbroker
source's schema (2 partitions, the same value shape as benchmarks/spark_bench.py produces, option
``rows`` = N, ``size`` = value bytes, ``maxOffsetsPerTrigger`` as the kbroker source); as a
streaming *sink* it consumes the Arrow batches and drops them. With these, spark_bench's ceiling
mode times the same query shape with either side (or both) replaced, so a report can say what the
kbroker source and the kbroker sink each cost over what the API itself allows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from .kafka_io import ARROW_SCHEMA
from .source import SCHEMA

PARTITIONS = 2
TOPIC = "noop"
_CHUNK = 8192  # rows per generated Arrow batch, as kafka_io.read_range yields at most


@dataclass
class NoopRange(InputPartition):
    partition: int
    start: int
    end: int


# One template chunk per (partition, size) and worker process: the ceiling should not pay for
# building rows in Python, only for handing Arrow batches over.
_TEMPLATES: dict[tuple[int, int], pa.RecordBatch] = {}


def _template(partition: int, size: int) -> pa.RecordBatch:
    key = (partition, size)
    if key not in _TEMPLATES:
        pad = b"x" * max(0, size - 16)
        n = _CHUNK
        arrays = [
            pa.array([b"k%d" % (2 * i + partition) for i in range(n)], pa.binary()),
            pa.array([b"%015d-" % (2 * i + partition) + pad for i in range(n)], pa.binary()),
            pa.array([TOPIC] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([0] * n, pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
        ]
        _TEMPLATES[key] = pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)
    return _TEMPLATES[key]


def _batch(partition: int, start: int, n: int, size: int) -> pa.RecordBatch:
    return _template(partition, size).slice(0, n)


class NoopStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        opts = {k.lower(): v for k, v in options.items()}
        self.rows = int(opts.get("rows", "1000000"))
        self.size = int(opts.get("size", "100"))
        limit = opts.get("maxoffsetspertrigger")
        self.max_offsets = int(limit) if limit else None

    def _per_partition(self) -> list[int]:
        return [self.rows // PARTITIONS + (1 if p < self.rows % PARTITIONS else 0) for p in range(PARTITIONS)]

    def initialOffset(self) -> dict:
        return {str(p): 0 for p in range(PARTITIONS)}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_offsets) if self.max_offsets else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        ends = self._per_partition()
        if isinstance(limit, ReadMaxRows):
            share = max(1, limit.max_rows // PARTITIONS)
            return {p: min(ends[int(p)], off + share) for p, off in start.items()}
        return {str(p): ends[p] for p in range(PARTITIONS)}

    def reportLatestOffset(self) -> dict | None:
        return {str(p): end for p, end in enumerate(self._per_partition())}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return [NoopRange(int(p), start[p], end[p]) for p in sorted(end) if end[p] > start[p]]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, NoopRange)
        for s in range(partition.start, partition.end, _CHUNK):
            yield _batch(partition.partition, s, min(_CHUNK, partition.end - s), self.size)

    def commit(self, end: dict) -> None:
        pass


@dataclass
class NoopReport(WriterCommitMessage):
    records: int


class NoopStreamWriter(DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return NoopReport(sum(b.num_rows for b in iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


class NoopDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kbroker-noop"

    def schema(self) -> StructType | str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return NoopStreamReader(dict(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return NoopStreamWriter()
