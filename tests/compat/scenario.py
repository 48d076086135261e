"""The compatibility scenario shared by every client module: what to produce and how to check it.

Each client test produces :func:`make_records`, consumes everything back into :class:`Consumed`
rows and hands them to :func:`check_consumed`, which checks keys, values, headers, timestamps,
per-key partition stickiness and contiguous, order-preserving offsets per partition.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass

N_RECORDS = 10_000
PARTITIONS = 3
# A topic config every client sets at creation and reads back with DescribeConfigs.
TOPIC_CONFIG = {"retention.ms": "86400000"}


@dataclass(frozen=True, slots=True)
class Record:
    index: int
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int | None  # CreateTime the producer sets; None = let the client stamp it


@dataclass(frozen=True, slots=True)
class Consumed:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


def base_timestamp() -> int:
    # An hour in the past: well inside any timestamp-difference limit, and clearly not "now".
    return int(time.time() * 1000) - 3_600_000


def make_records(client: str, n: int = N_RECORDS, *, base_ts: int | None = None,
                 with_headers: bool = True) -> list[Record]:
    """Keyed records with varied value sizes, two headers (one empty) and strictly rising timestamps."""
    out = []
    for i in range(n):
        headers: tuple[tuple[str, bytes], ...] = ()
        if with_headers:
            headers = (("idx", str(i).encode()), ("client", client.encode() if i % 7 else b""))
        out.append(Record(
            index=i,
            key=f"key-{i:05d}".encode(),
            value=(f"value-{i}-{client}-" + "x" * (i % 97)).encode(),
            headers=headers,
            timestamp=None if base_ts is None else base_ts + i,
        ))
    return out


def check_consumed(expected: list[Record], consumed: list[Consumed], *, partitions: int = PARTITIONS,
                   check_timestamps: bool = True) -> dict[int, list[Consumed]]:
    """Assert the consumed rows are exactly the produced records; return them grouped by partition."""
    by_key = {r.key: r for r in expected}
    seen: set[bytes] = set()
    by_partition: dict[int, list[Consumed]] = defaultdict(list)
    for c in consumed:
        assert c.key in by_key, f"unexpected key {c.key!r} at {c.partition}/{c.offset}"
        assert c.key not in seen, f"duplicate key {c.key!r} at {c.partition}/{c.offset}"
        seen.add(c.key)
        r = by_key[c.key]
        assert c.value == r.value, f"value mismatch for {c.key!r}: {c.value!r} != {r.value!r}"
        assert c.headers == r.headers, f"headers mismatch for {c.key!r}: {c.headers!r} != {r.headers!r}"
        if check_timestamps and r.timestamp is not None:
            assert c.timestamp == r.timestamp, f"timestamp mismatch for {c.key!r}: {c.timestamp} != {r.timestamp}"
        by_partition[c.partition].append(c)
    missing = len(by_key) - len(seen)
    assert missing == 0, f"{missing} records never consumed (consumed {len(consumed)})"
    assert set(by_partition) <= set(range(partitions)), f"partitions {sorted(by_partition)}"
    # With 10,000 distinct keys every partition gets some records from any key partitioner.
    assert len(by_partition) == partitions, f"only partitions {sorted(by_partition)} got records"
    for p, rows in by_partition.items():
        rows.sort(key=lambda c: c.offset)
        offsets = [c.offset for c in rows]
        assert offsets == list(range(len(rows))), f"partition {p}: offsets not contiguous from 0"
        order = [by_key[c.key].index for c in rows]
        assert order == sorted(order), f"partition {p}: records out of produce order"
    return dict(by_partition)


def end_offsets(by_partition: dict[int, list[Consumed]]) -> dict[int, int]:
    return {p: len(rows) for p, rows in by_partition.items()}


def offsets_for_time(by_partition: dict[int, list[Consumed]], ts: int) -> dict[int, int | None]:
    """What ListOffsets(timestamp=ts) must answer: the first offset with timestamp >= ts, else None."""
    out: dict[int, int | None] = {}
    for p, rows in by_partition.items():
        out[p] = next((c.offset for c in rows if c.timestamp >= ts), None)
    return out


def probe_timestamp(by_partition: dict[int, list[Consumed]]) -> int:
    """The median record timestamp: an exact hit in one partition, a "next later record" in the others."""
    stamps = sorted(c.timestamp for rows in by_partition.values() for c in rows)
    return stamps[len(stamps) // 2]


def max_timestamp(by_partition: dict[int, list[Consumed]]) -> int:
    return max(c.timestamp for rows in by_partition.values() for c in rows)
