"""One asyncio lock per key, dropped when no one holds or waits for it.

The coordinators serialize the changes of one group (or one share-partition's state) this way:
change in memory, write, answer, one at a time per key, as Kafka's coordinator runtime serializes
a partition's writes. Entries live only while in use, so idle keys cost nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Hashable


class KeyedLocks:
    def __init__(self) -> None:
        self._entries: dict[Hashable, list] = {}  # key -> [asyncio.Lock, holders and waiters]

    @contextlib.asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0 and self._entries.get(key) is entry:
                del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)
