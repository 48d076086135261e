"""The registry's copy of ``_schemas``: replays the local replica into a RegistryState and, on
the primary, appends new records.

Followers replay up to the high watermark (committed records only). The primary replays up to
its log end before it writes, since as leader everything in its log will be committed or its
leadership lost. A broker without a replica (more brokers than replicas) reads ``_schemas`` from
its leader as a consumer would, in short polls. Whenever the replica's identity changes (topic recreated, new leader epoch,
leadership gained or lost) after records past the high watermark were applied, or the log was
truncated below what was replayed, the state is rebuilt from the start of the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from registry import errors as E
from registry import records as R
from registry.access import RegistryAccess
from registry.state import RegistryState
from storage.batch import build_batch, decode_records

log = logging.getLogger("registry.store")


class SchemaStore:
    def __init__(self, access: RegistryAccess, *, write_timeout_s: float = 10.0) -> None:
        self.access = access
        self.state = RegistryState()
        self.next_offset = 0
        self.write_timeout_s = write_timeout_s
        self._identity: tuple | None = None
        self._uncommitted = False  # applied records past the high watermark
        self._task: asyncio.Task[None] | None = None
        self.bad_records = 0
        self._progress = asyncio.Event()  # set (and replaced) whenever the tail loop finished a round
        self._remote_hw = 0

    # --- replay ----------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._tail(), name="schema-registry-replay")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _tail(self) -> None:
        while True:
            try:
                if self.access.partition_identity() is not None or self.access.topic_id() is None:
                    self.catch_up()
                    self._round_done()
                    await self.access.wait_for_change(1.0)
                else:
                    await self._remote_round()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("replaying %s failed; retrying", "_schemas")
                await asyncio.sleep(1.0)

    def _round_done(self) -> None:
        self._progress.set()
        self._progress = asyncio.Event()

    async def _remote_round(self) -> None:
        ident = ("remote", self.access.topic_id())
        if ident != self._identity:
            if self._identity is not None:
                self._reset("the _schemas topic changed")
            self._identity = ident
        got = await self.access.fetch_remote(self.next_offset)
        if got is None:
            self._round_done()
            await asyncio.sleep(0.5)
            return
        batches, hw = got
        self._remote_hw = hw
        if hw < self.next_offset:  # the leader's log no longer has what was replayed
            self._reset("the _schemas log was truncated")
            return
        for header, raw in batches:
            if header.base_offset >= hw:
                break
            if not header.is_control:
                for rec in decode_records(raw):
                    if self.next_offset <= rec.offset < hw:
                        self._apply(rec.offset, rec.key, rec.value)
                        self.next_offset = rec.offset + 1
            self.next_offset = max(self.next_offset, min(header.last_offset + 1, hw))
        self._round_done()
        if self.next_offset >= hw:
            await asyncio.sleep(0.3)  # caught up: poll again soon (short polls keep the shared connection free)

    def _reset(self, why: str) -> None:
        log.info("rebuilding the schema registry state from the start of _schemas (%s)", why)
        self.state = RegistryState()
        self.next_offset = 0
        self._uncommitted = False

    def catch_up(self, *, to_log_end: bool = False) -> None:
        """Apply the local replica's records up to the high watermark (``to_log_end``: up to the
        log end, the primary before a write)."""
        ident = self.access.partition_identity()
        if ident is None:
            if self._identity is not None:
                self._identity = None
                self._reset("_schemas has no replica here any more")
            return
        if ident != self._identity:
            if self._identity is not None and (self._uncommitted or ident[0] != self._identity[0]):
                self._reset("the _schemas replica changed")
            self._identity = ident
        start, end, hw = self.access.log_start_offset(), self.access.log_end_offset(), self.access.high_watermark()
        if self.next_offset > end:
            self._reset("the _schemas log was truncated")
        if self.next_offset < start:  # records below the log start are gone (DeleteRecords)
            self.next_offset = start
        bound = end if to_log_end else hw
        if self.next_offset >= bound:
            return
        for header, raw in self.access.iter_batches(self.next_offset):
            if header.base_offset >= bound:
                break
            if header.is_control:
                self.next_offset = header.last_offset + 1
                continue
            for rec in decode_records(raw):
                if rec.offset < self.next_offset:
                    continue
                if rec.offset >= bound:
                    break
                self._apply(rec.offset, rec.key, rec.value)
                self.next_offset = rec.offset + 1
            if self.next_offset >= bound:
                break
            self.next_offset = max(self.next_offset, header.last_offset + 1)
        self.next_offset = max(self.next_offset, min(bound, end))
        if bound > hw:
            self._uncommitted = True

    def _apply(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            self.bad_records += 1
            log.warning("_schemas offset %d has no key; skipped", offset)
            return
        try:
            self.state.apply(key, value)
        except R.BadRecord as e:
            self.bad_records += 1
            log.warning("_schemas offset %d is not a registry record (%s); skipped", offset, e)

    def _local(self) -> bool:
        return self.access.partition_identity() is not None

    async def wait_replayed(self, offset: int, timeout_s: float) -> bool:
        """Wait until the local state includes everything before ``offset``."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self._local():
                self.catch_up()
            if self.next_offset >= offset:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            progress = self._progress
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(progress.wait(), min(left, 0.5))

    def maybe_behind(self) -> bool:
        """Something committed may not be applied here yet (a validation miss then settles first)."""
        return not self._local() or self.next_offset < self.access.log_end_offset()

    async def settle(self, timeout_s: float) -> None:
        """Wait (bounded) until what this replica already holds is committed and applied: a read
        or a validation after another broker's write sees it. Without a replica: one more read
        from the leader."""
        if self._local():
            await self.wait_replayed(self.access.log_end_offset(), timeout_s)
            return
        for _ in range(2):  # the round in flight may have started before the write
            progress = self._progress
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(progress.wait(), timeout_s / 2)

    # --- writes (primary only) ---------------------------------------------------------------------

    def is_primary(self) -> bool:
        return self.access.is_leader()

    async def write(self, records: list[tuple[bytes, bytes | None]]) -> int:
        """Append ``records`` in one batch and apply them; returns the offset after them."""
        batch = build_batch(records)
        try:
            end = await asyncio.wait_for(self.access.append(batch), self.write_timeout_s)
        except TimeoutError:
            raise E.timeout("Write to the Kafka store timed out") from None
        except Exception as e:  # noqa: BLE001 - a Kafka error from the append
            code = getattr(e, "code", None)
            name = getattr(code, "name", code)
            raise E.store_error(f"Error while writing to _schemas: {name or type(e).__name__}: {e}") from None
        self.catch_up(to_log_end=True)
        return end
