"""A small asyncio Kafka request client: one connection, pipelined requests, kafka-python structs.

Used by kbroker's own tools (admin CLI), by tests that speak raw protocol, and later between
brokers. Not a general-purpose Kafka client.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from typing import Any

from .api_table import get_spec
from .headers import encode_request


class ProtocolClient:
    def __init__(self, host: str, port: int, *, client_id: str = "kbroker-client") -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._corr = itertools.count(1)
        self._pending: dict[int, tuple[asyncio.Future[Any], Any, int]] = {}
        self._reader_task: asyncio.Task[None] | None = None

    async def connect(self) -> ProtocolClient:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        self._reader_task = asyncio.create_task(self._read_loop())
        return self

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except OSError:
                pass
        if self._reader_task is not None:
            self._reader_task.cancel()

    async def __aenter__(self) -> ProtocolClient:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(self, request: Any, version: int) -> Any:
        """Send ``request`` (a kafka-python ApiMessage) at ``version``; return the decoded response."""
        spec = get_spec(request.API_KEY)
        assert spec is not None
        if self._writer is None or self._reader_task is None or self._reader_task.done():
            raise ConnectionError("not connected")
        corr = next(self._corr)
        body = bytes(request.encode(version=version))
        frame = encode_request(spec.api_key, version, corr, self.client_id, body, spec.request_flexible(version))
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[corr] = (fut, spec, version)
        self._writer.write(frame)
        if spec.api_key == 0 and getattr(request, "acks", 1) == 0:
            del self._pending[corr]
            return None
        return await fut

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                size = struct.unpack(">i", await self._reader.readexactly(4))[0]
                data = await self._reader.readexactly(size)
                corr = struct.unpack_from(">i", data, 0)[0]
                fut, spec, version = self._pending.pop(corr)
                pos = 5 if spec.response_header_flexible(version) else 4
                fut.set_result(spec.response.decode(memoryview(data)[pos:], version=version))
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            for fut, _, _ in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(f"connection closed: {e}"))
            self._pending.clear()
