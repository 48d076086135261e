"""Time index (``<base>.timeindex``): 12-byte entries (timestamp int64, relative offset int32).

An entry is added only when the segment's max timestamp grows (at offset-index points, and a
final one when the segment becomes inactive or is closed), so timestamps are strictly
increasing and offsets non-decreasing. An entry (T, O) says every record before the batch
ending at O has a timestamp < T: a lookup for T starts scanning at the batch containing O.
"""

from __future__ import annotations

import operator
import struct
from array import array
from bisect import bisect_left, bisect_right
from itertools import chain

from storage.offset_index import IndexCorruptError, SparseIndex

_ENTRY = struct.Struct(">qi")


class TimeIndex(SparseIndex):
    entry_size = 12
    key_code = "q"
    value_code = "i"
    entry_struct = _ENTRY

    def _decode(self, data: bytes, n: int) -> tuple[array, array]:
        flat = struct.unpack(">" + "qi" * n, data) if n else ()
        return array("q", flat[0::2]), array("i", flat[1::2])

    def _encode(self, start: int, end: int) -> bytes:
        k = end - start
        pairs = chain.from_iterable(zip(self._keys[start:end], self._values[start:end], strict=True))  # type: ignore[index]
        return struct.pack(">" + "qi" * k, *pairs)

    def _check(self, keys: array, values: array) -> None:
        if not all(map(operator.lt, keys, keys[1:])):
            raise IndexCorruptError(f"time index file {self.path}: timestamps are not strictly increasing")
        if not all(map(operator.le, values, values[1:])) or (values and values[0] < 0):
            raise IndexCorruptError(f"time index file {self.path}: offsets are decreasing or negative")

    def check_against_log(self, next_offset_bound: int | None = None) -> tuple[int, int] | None:
        """Cheap open-time check; returns the last entry as (timestamp, absolute offset)."""
        last = self.read_last_entry()
        if last is None:
            return None
        ts, rel = last
        if rel < 0 or (next_offset_bound is not None and self.base_offset + rel >= next_offset_bound):
            raise IndexCorruptError(f"time index file {self.path}: last entry offset {self.base_offset + rel} out of range")
        return ts, self.base_offset + rel

    # --- queries ------------------------------------------------------------------------------

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, absolute offset) of the last entry."""
        self._ensure()
        if not self._keys:
            return None
        return self._keys[-1], self.base_offset + self._values[-1]  # type: ignore[index]

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, absolute offset) of the largest entry with timestamp <= target, or (-1, base)."""
        self._ensure()
        i = bisect_right(self._keys, timestamp) - 1  # type: ignore[arg-type]
        if i < 0:
            return -1, self.base_offset
        return self._keys[i], self.base_offset + self._values[i]  # type: ignore[index]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        keys = self._keys
        if keys is None:
            self._ensure()
            keys = self._keys
        if keys and timestamp <= keys[-1]:  # type: ignore[index]
            return
        if timestamp < 0:
            return
        rel = offset - self.base_offset
        if self._values and rel < self._values[-1]:  # type: ignore[index]
            raise ValueError(f"time index append of offset {offset} below last entry in {self.path}")
        keys.append(timestamp)  # type: ignore[union-attr]
        self._values.append(rel)  # type: ignore[union-attr]

    def truncate_to(self, offset: int) -> None:
        """Remove entries for offsets >= offset."""
        self._ensure()
        self._truncate_entries(bisect_left(self._values, offset - self.base_offset))  # type: ignore[arg-type]

    def entries(self) -> list[tuple[int, int]]:
        self._ensure()
        return [(t, self.base_offset + r) for t, r in zip(self._keys, self._values, strict=True)]  # type: ignore[arg-type]
