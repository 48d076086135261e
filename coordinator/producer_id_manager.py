"""Producer-id allocator that never hands out an id twice, across restarts and kill -9.

Ids are reserved in blocks (Kafka's ProducerIdManager hands out blocks of 1000 from the
controller). The end of the newest reserved block is persisted — tmp file, fsync, rename,
directory fsync — *before* any id of that block is returned, so after a crash the next
process starts at the following block: a few ids may be skipped, none is reused.

The fsync stays off the event loop in the common case: as Kafka's RPCProducerIdManager
does, the next block is fetched ahead — here persisted in an executor — once 90% of the
current one is used (and once at broker start), so the switch is instant. Only a burst that
outruns the prefetch reserves a block synchronously on the loop. The file always holds the
highest block end reserved so far (writes are serialised and never lower it), so an unused
prefetched block or a skipped one can only cost ids, never hand one out twice.

Cluster mode passes ``block_source``: an async function that reserves the next block in etcd
(cluster/producer_ids.py, unique across brokers). Blocks then come only from it, fetched ahead the
same way; an id asked for while no block has arrived yet is answered COORDINATOR_LOAD_IN_PROGRESS
(retriable), as Kafka's RPCProducerIdManager does while its block request is in flight.

File format (JSON, like Kafka's old ``/latest_producer_id_block`` znode):
``{"version": 1, "block_start": <first id>, "block_end": <last id, inclusive>}``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

from protocol.errors import ErrorCode, KafkaError
from storage.checkpoints import atomic_write_bytes

log = logging.getLogger(__name__)

_VERSION = 1
MAX_PRODUCER_ID = (1 << 63) - 1


class ProducerIdManager:
    PREFETCH_AT_PERCENT = 90  # share of the block used when the next one is reserved ahead

    def __init__(self, state_file: Path, block_size: int = 1000,
                 block_source: Callable[[], Awaitable[tuple[int, int]]] | None = None) -> None:
        self.block_source = block_source
        if block_size <= 0:
            raise ValueError("block_size must be positive")
        self.state_file = Path(state_file)
        self.block_size = block_size
        # Ids in [_next, _end) belong to the block reserved by this process; empty until first use.
        self._next = 0
        self._end = 0
        self._next_block_start = self._read_next_block_start()
        # Highest block end on disk; the lock orders a loop-side write with an executor one.
        self._persisted_end = self._next_block_start - 1
        self._persist_lock = threading.Lock()
        self._prefetched: tuple[int, int] | None = None  # durable, not yet in use
        self._prefetching: asyncio.Future[None] | None = None

    def _read_next_block_start(self) -> int:
        try:
            raw = self.state_file.read_text()
        except FileNotFoundError:
            return 0
        # A damaged file must stop the broker: guessing could reuse ids (the write is atomic,
        # so this only happens if someone edited it).
        try:
            doc = json.loads(raw)
            end = int(doc["block_end"])
        except (ValueError, KeyError, TypeError) as e:
            raise RuntimeError(f"producer id block file {self.state_file} is unreadable: {e}") from e
        return end + 1

    def _persist(self, block_start: int, block_end: int) -> None:
        with self._persist_lock:
            if block_end <= self._persisted_end:
                return  # a later block is durable already: rewriting this one would lower the mark
            data = json.dumps({"version": _VERSION, "block_start": block_start, "block_end": block_end}).encode()
            self.state_file.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(self.state_file, data)
            self._persisted_end = block_end

    def _claim_block(self) -> tuple[int, int]:
        """The next block's (first, last) ids, taken from memory only (not yet durable)."""
        start = self._next_block_start
        end = start + self.block_size - 1
        if end > MAX_PRODUCER_ID:
            raise RuntimeError("producer id space exhausted")
        self._next_block_start = end + 1
        return start, end

    def _reserve_block(self) -> None:
        if self._prefetched is not None:
            start, end = self._prefetched
            self._prefetched = None
        elif self.block_source is not None:
            self.prefetch()
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "waiting for a producer-id block from etcd")
        else:
            start, end = self._claim_block()
            self._persist(start, end)  # durable before any id of the block escapes
        self._next, self._end = start, end + 1

    def generate(self) -> int:
        """The next unused producer id (fsyncs on the caller's thread only when a new block is
        needed and no prefetched one is ready)."""
        if self._next >= self._end:
            self._reserve_block()
        pid = self._next
        self._next += 1
        used = self._next - (self._end - self.block_size)
        if used * 100 >= self.block_size * self.PREFETCH_AT_PERCENT:
            self.prefetch()
        return pid

    def prefetch(self) -> None:
        """Reserve the next block in the default executor if none is ready or on its way.
        Needs a running event loop (the broker's); without one it does nothing."""
        if self._prefetched is not None or self._prefetching is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self.block_source is not None:
            self._prefetch_from_source(loop)
            return
        try:
            start, end = self._claim_block()
        except RuntimeError:
            return  # exhausted: generate raises when the current block runs out
        fut = loop.run_in_executor(None, self._persist, start, end)
        self._prefetching = fut

        def done(f: asyncio.Future[None]) -> None:
            self._prefetching = None
            if f.cancelled() or f.exception() is not None:
                # The block is skipped; the next reservation writes a later one (or fails loudly).
                log.warning("reserving producer ids %d..%d failed: %s", start, end,
                            "cancelled" if f.cancelled() else f.exception())
                return
            self._prefetched = (start, end)

        fut.add_done_callback(done)

    def _prefetch_from_source(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self.block_source is not None
        fut = asyncio.ensure_future(self.block_source(), loop=loop)
        self._prefetching = fut

        def done(f: asyncio.Future[tuple[int, int]]) -> None:
            self._prefetching = None
            if f.cancelled() or f.exception() is not None:
                log.warning("taking a producer-id block failed: %s", "cancelled" if f.cancelled() else f.exception())
                return
            self._prefetched = f.result()

        fut.add_done_callback(done)

    async def ready(self) -> None:
        """Wait for the prefetch in flight (cluster mode: the first block from etcd) to end."""
        if self._prefetching is not None:
            await asyncio.wait([self._prefetching])

    @property
    def current_block(self) -> tuple[int, int] | None:
        """(first, last) ids of the block in use, or None before the first ``generate``."""
        return (self._end - self.block_size, self._end - 1) if self._end else None
