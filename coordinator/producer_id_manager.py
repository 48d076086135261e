"""Producer-id allocator that never hands out an id twice, across restarts and kill -9.

Ids are reserved in blocks (Kafka's ProducerIdManager hands out blocks of 1000 from the
controller). The end of the newest reserved block is persisted — tmp file, fsync, rename,
directory fsync — *before* any id of that block is returned, so after a crash the next
process starts at the following block: a few ids may be skipped, none is reused.

File format (JSON, like Kafka's old ``/latest_producer_id_block`` znode):
``{"version": 1, "block_start": <first id>, "block_end": <last id, inclusive>}``.
"""

from __future__ import annotations

import json
from pathlib import Path

from storage.checkpoints import atomic_write_bytes

_VERSION = 1
MAX_PRODUCER_ID = (1 << 63) - 1


class ProducerIdManager:
    def __init__(self, state_file: Path, block_size: int = 1000) -> None:
        if block_size <= 0:
            raise ValueError("block_size must be positive")
        self.state_file = Path(state_file)
        self.block_size = block_size
        # Ids in [_next, _end) belong to the block reserved by this process; empty until first use.
        self._next = 0
        self._end = 0
        self._next_block_start = self._read_next_block_start()

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
        data = json.dumps({"version": _VERSION, "block_start": block_start, "block_end": block_end}).encode()
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self.state_file, data)

    def _reserve_block(self) -> None:
        start = self._next_block_start
        end = start + self.block_size - 1
        if end > MAX_PRODUCER_ID:
            raise RuntimeError("producer id space exhausted")
        self._persist(start, end)  # durable before any id of the block escapes
        self._next, self._end = start, end + 1
        self._next_block_start = end + 1

    def generate(self) -> int:
        """The next unused producer id (fsyncs only when a new block is reserved)."""
        if self._next >= self._end:
            self._reserve_block()
        pid = self._next
        self._next += 1
        return pid

    @property
    def current_block(self) -> tuple[int, int] | None:
        """(first, last) ids of the block in use, or None before the first ``generate``."""
        return (self._end - self.block_size, self._end - 1) if self._end else None
