"""Aborted-transaction index (``<base>.txnindex``): one 34-byte entry per aborted transaction.

Entry: version int16 (0), producerId int64, firstOffset int64, lastOffset int64,
lastStableOffset int64. The entry goes to the segment holding the ABORT marker (lastOffset);
read_committed fetches collect the entries overlapping the returned range. Entries are
written straight through (they are rare and must survive with the marker).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from storage.offset_index import IndexCorruptError

ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
VERSION = 0


@dataclass(slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def pack(self) -> bytes:
        return ENTRY.pack(VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


class TransactionIndex:
    def __init__(self, path: Path, base_offset: int, *, new: bool = False) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None
        if new:
            # The file is created by the first aborted transaction, as Kafka's TransactionIndex
            # opens its channel lazily: most segments never have one, and creating ten thousand
            # partitions would otherwise create ten thousand empty files too.
            if path.exists():
                os.truncate(path, 0)
            self._entries = []

    def load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        if len(data) % ENTRY_SIZE:
            raise IndexCorruptError(f"transaction index {self.path} has size {len(data)}, not a multiple of 34")
        entries = []
        for version, pid, first, last, lso in ENTRY.iter_unpack(data):
            if version != VERSION:
                raise IndexCorruptError(f"transaction index {self.path}: unknown entry version {version}")
            if last < self.base_offset:
                raise IndexCorruptError(f"transaction index {self.path}: last offset {last} below segment base")
            entries.append(AbortedTxn(pid, first, last, lso))
        self._entries = entries

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self.load()
        return self._entries  # type: ignore[return-value]

    def append(self, txn: AbortedTxn) -> None:
        entries = self.entries
        if entries and txn.last_offset < entries[-1].last_offset:
            raise ValueError(
                f"aborted txn last offset {txn.last_offset} below the last indexed {entries[-1].last_offset}"
            )
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, txn.pack())
        finally:
            os.close(fd)
        entries.append(txn)

    def collect(self, start_offset: int, upper_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [start, upper); True once an entry's LSO reaches upper (search complete)."""
        out = []
        for txn in self.entries:
            if txn.last_offset >= start_offset and txn.first_offset < upper_offset:
                out.append(txn)
            if txn.last_stable_offset >= upper_offset:
                return out, True
        return out, False

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker (last offset) is at or beyond offset."""
        entries = self.entries
        keep = [t for t in entries if t.last_offset < offset]
        if len(keep) != len(entries):
            self._entries = keep
            with open(self.path, "wb") as f:
                f.write(b"".join(t.pack() for t in keep))

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def delete_file(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
