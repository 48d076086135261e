"""Sparse offset index (``<base>.index``): 8-byte entries (relative offset int32, position int32).

Also home of `SparseIndex`, the in-memory + file machinery shared with the time index.
Entries live in two `array`s (compact, C-speed bisect); the file is append-only and only
written when the segment is flushed, rolled or closed, so a closed index is exactly
``entries * entry_size`` bytes like the one Kafka trims on close. An index that is lost or
torn in a crash is rebuilt from the log during recovery, as Kafka does.

Loading is lazy: opening a segment only checks the file size and last entry (cheap); the
full sanity check (strictly increasing entries) runs on first use.
"""

from __future__ import annotations

import operator
import os
import struct
import sys
import threading
from array import array
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path

_LITTLE = sys.byteorder == "little"


class IndexCorruptError(Exception):
    """An index file fails its sanity check (Kafka: CorruptIndexException)."""


class SparseIndex:
    """Sorted (key, value) entries with an append-only big-endian file behind them."""

    entry_size = 0
    key_code = "i"  # array typecodes
    value_code = "i"
    entry_struct = struct.Struct(">ii")

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int, *, new: bool = False) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.entry_size)
        self._keys: array | None = None
        self._values: array | None = None
        self._persisted = 0  # entries already in the file
        # flush() may run in an executor while the loop rolls/closes the segment: serialise the
        # writes of pending entries so none is written twice.
        self._write_lock = threading.Lock()
        # Called instead of raising when a lazy load finds the file corrupt; the segment
        # sets it to rebuild its indexes from the log (which refills this index).
        self.on_corrupt: Callable[[IndexCorruptError], None] | None = None
        if new:
            with open(path, "wb"):
                pass
            self._keys, self._values = array(self.key_code), array(self.value_code)

    # --- state -------------------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        return self._keys is not None

    def _ensure(self) -> None:
        if self._keys is None:
            try:
                self.load()
            except IndexCorruptError as e:
                if self.on_corrupt is None:
                    raise
                self.on_corrupt(e)
                if self._keys is None:
                    raise

    def __len__(self) -> int:
        self._ensure()
        return len(self._keys)  # type: ignore[arg-type]

    @property
    def is_full(self) -> bool:
        keys = self._keys
        if keys is None:
            self._ensure()
            keys = self._keys
        return len(keys) >= self.max_entries  # type: ignore[arg-type]

    def file_entries(self) -> int:
        try:
            size = os.path.getsize(self.path)
        except FileNotFoundError as e:
            raise IndexCorruptError(f"index file {self.path} is missing") from e
        if size % self.entry_size:
            raise IndexCorruptError(
                f"index file {self.path} has size {size}, not a multiple of the entry size {self.entry_size}"
            )
        return size // self.entry_size

    def read_last_entry(self) -> tuple[int, int] | None:
        """(key, value) of the last entry on disk, with only the size check; None if empty."""
        n = self.file_entries()
        if n == 0:
            return None
        with open(self.path, "rb") as f:
            f.seek((n - 1) * self.entry_size)
            return self.entry_struct.unpack(f.read(self.entry_size))  # type: ignore[return-value]

    def load(self) -> None:
        """Read every entry and run the full sanity check."""
        n = self.file_entries()
        with open(self.path, "rb") as f:
            data = f.read(n * self.entry_size)
        keys, values = self._decode(data, n)
        self._check(keys, values)
        self._keys, self._values = keys, values
        self._persisted = n

    def _decode(self, data: bytes, n: int) -> tuple[array, array]:
        raise NotImplementedError

    def _encode(self, start: int, end: int) -> bytes:
        raise NotImplementedError

    def _check(self, keys: array, values: array) -> None:
        raise NotImplementedError

    # --- mutation -----------------------------------------------------------------------------

    def reset(self) -> None:
        """Drop every entry (file truncated to zero)."""
        with self._write_lock:
            with open(self.path, "wb"):
                pass
            self._keys, self._values = array(self.key_code), array(self.value_code)
            self._persisted = 0

    def _truncate_entries(self, n: int) -> None:
        self._ensure()
        with self._write_lock:
            del self._keys[n:]  # type: ignore[index]
            del self._values[n:]  # type: ignore[index]
            if self._persisted > n:
                os.truncate(self.path, n * self.entry_size)
                self._persisted = n

    def flush(self) -> None:
        """Write entries appended since the last flush (plain writes; fsync is SegmentSync's)."""
        if self._keys is None:
            return
        with self._write_lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        n = len(self._keys)  # type: ignore[arg-type]
        if n > self._persisted:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                data = self._encode(self._persisted, n)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                self._persisted = n
            finally:
                os.close(fd)

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def delete_file(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


class OffsetIndex(SparseIndex):
    """relative offset (int32) -> position (int32) of the batch whose last offset it is."""

    entry_size = 8
    key_code = "i"
    value_code = "i"
    entry_struct = struct.Struct(">ii")

    def _decode(self, data: bytes, n: int) -> tuple[array, array]:
        flat = array("i")
        flat.frombytes(data)
        if _LITTLE:
            flat.byteswap()
        return flat[0::2], flat[1::2]

    def _encode(self, start: int, end: int) -> bytes:
        flat = array("i", bytes(8 * (end - start)))
        flat[0::2] = self._keys[start:end]  # type: ignore[index]
        flat[1::2] = self._values[start:end]  # type: ignore[index]
        if _LITTLE:
            flat.byteswap()
        return flat.tobytes()

    def _check(self, keys: array, values: array) -> None:
        if keys and keys[0] < 0:
            raise IndexCorruptError(f"index file {self.path}: negative relative offset {keys[0]}")
        if not all(map(operator.lt, keys, keys[1:])):
            raise IndexCorruptError(f"index file {self.path}: offsets are not strictly increasing")
        if not all(map(operator.lt, values, values[1:])) or (values and values[0] < 0):
            raise IndexCorruptError(f"index file {self.path}: positions are not strictly increasing")

    def check_against_log(self, log_size: int) -> None:
        """Cheap open-time check: size, last entry offset >= base and position inside the log."""
        last = self.read_last_entry()
        if last is not None:
            rel, pos = last
            if rel < 0 or pos < 0 or pos >= log_size:
                raise IndexCorruptError(
                    f"index file {self.path}: last entry (offset {self.base_offset + rel}, position {pos})"
                    f" lies outside the log of {log_size} bytes"
                )

    # --- queries ------------------------------------------------------------------------------

    def lookup(self, offset: int) -> tuple[int, int]:
        """(absolute offset, position) of the largest entry <= offset, or (base, 0)."""
        self._ensure()
        i = bisect_right(self._keys, offset - self.base_offset) - 1  # type: ignore[arg-type]
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._keys[i], self._values[i]  # type: ignore[index]

    def last_entry(self) -> tuple[int, int] | None:
        self._ensure()
        if not self._keys:
            return None
        return self.base_offset + self._keys[-1], self._values[-1]  # type: ignore[index]

    def append(self, offset: int, position: int) -> None:
        keys = self._keys
        if keys is None:
            self._ensure()
            keys = self._keys
        rel = offset - self.base_offset
        if keys and rel <= keys[-1]:  # type: ignore[index]
            raise ValueError(f"offset index append of {offset} not larger than last entry in {self.path}")
        keys.append(rel)  # type: ignore[union-attr]
        self._values.append(position)  # type: ignore[union-attr]

    def truncate_to(self, offset: int) -> None:
        """Remove entries for offsets >= offset."""
        self._ensure()
        from bisect import bisect_left

        self._truncate_entries(bisect_left(self._keys, offset - self.base_offset))  # type: ignore[arg-type]

    def entries(self) -> list[tuple[int, int]]:
        self._ensure()
        return [(self.base_offset + k, v) for k, v in zip(self._keys, self._values, strict=True)]  # type: ignore[arg-type]
