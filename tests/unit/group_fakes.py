"""In-memory PartitionAccess and a manual clock for driving the GroupCoordinator in unit tests."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable, Iterator
from typing import Any

from coordinator.group_coordinator import GroupCoordinator
from storage import batch as B


class FakeAccess:
    node_id = 1

    def __init__(self) -> None:
        self.logs: dict[tuple[str, int], list[bytes]] = {}
        self.next_offset: dict[tuple[str, int], int] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self.fail_with: Exception | None = None

    async def ensure_internal_topic(self, name: str, num_partitions: int, configs: dict[str, str]) -> None:
        self.configs.setdefault(name, dict(configs))
        for p in range(num_partitions):
            self.logs.setdefault((name, p), [])
            self.next_offset.setdefault((name, p), 0)

    def partition_exists(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self.logs

    async def append(self, topic: str, partition: int, batch: bytes, *, replicated: bool = True) -> int:
        if self.fail_with is not None:
            raise self.fail_with
        buf = bytearray(batch)
        h = B.parse_header(buf)
        base = self.next_offset[(topic, partition)]
        B.set_base_offset(buf, h, base)
        self.logs[(topic, partition)].append(bytes(buf))
        self.next_offset[(topic, partition)] = base + h.last_offset_delta + 1
        return base

    def append_marker(self, topic: str, partition: int, producer_id: int, committed: bool) -> None:
        buf = bytearray(B.build_control_batch(B.CONTROL_TYPE_COMMIT if committed else B.CONTROL_TYPE_ABORT,
                                              producer_id=producer_id, producer_epoch=0, coordinator_epoch=0))
        h = B.parse_header(buf)
        base = self.next_offset[(topic, partition)]
        B.set_base_offset(buf, h, base)
        self.logs[(topic, partition)].append(bytes(buf))
        self.next_offset[(topic, partition)] = base + 1

    def iter_batches(self, topic: str, partition: int, start_offset: int = 0) -> Iterator[tuple[B.BatchHeader, bytes]]:
        for data in self.logs.get((topic, partition), []):
            yield B.parse_header(data), data

    def log_end_offset(self, topic: str, partition: int) -> int:
        return self.next_offset.get((topic, partition), -1)

    def records(self, topic: str = "__consumer_offsets") -> list[tuple[int, B.Record, B.BatchHeader]]:
        out = []
        for (t, p), batches in self.logs.items():
            if t != topic:
                continue
            for data in batches:
                h = B.parse_header(data)
                out.extend((p, r, h) for r in B.decode_records(data))
        return out


class _Handle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualScheduler:
    """A clock that only moves when told; timers fire in due order as it passes them."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now
        self._heap: list[tuple[int, int, _Handle, Callable[[], None]]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self.now

    def call_later(self, delay_ms: int, fn: Callable[[], None]) -> _Handle:
        h = _Handle()
        heapq.heappush(self._heap, (self.now + max(0, int(delay_ms)), next(self._seq), h, fn))
        return h

    async def advance(self, ms: int) -> None:
        target = self.now + ms
        while self._heap and self._heap[0][0] <= target:
            due, _, h, fn = heapq.heappop(self._heap)
            self.now = max(self.now, due)
            if not h.cancelled:
                fn()
                await settle()
        self.now = target
        await settle()


async def settle(rounds: int = 20) -> None:
    """Let tasks woken by completed futures run."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class Config:
    def __init__(self, overrides: dict[str, Any] | None = None) -> None:
        self.values = {"offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
                       "group.min.session.timeout.ms": 6000, "group.max.session.timeout.ms": 1800000,
                       **(overrides or {})}

    def get(self, name: str) -> Any:
        if name not in self.values:
            raise KeyError(name)
        return self.values[name]


async def make_coordinator(access: FakeAccess | None = None, scheduler: ManualScheduler | None = None,
                           config: dict[str, Any] | None = None) -> tuple[GroupCoordinator, FakeAccess, ManualScheduler]:
    access = access or FakeAccess()
    scheduler = scheduler or ManualScheduler()
    gc = GroupCoordinator(access, Config(config), 1, scheduler=scheduler)
    await gc.start()
    await gc.ensure_topic()
    return gc, access, scheduler
