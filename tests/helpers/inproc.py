"""A real broker in the test's own process and event loop, for driving request handlers directly.

``in_process_broker`` starts ``broker.broker.Broker`` on a temporary log dir with its listener on
an ephemeral loopback port: real logs, replica manager, coordinators and metadata store, nothing
mocked. Tests call handler coroutines with ``request_context(broker, api_key, version)``, which
hands them the broker's ``BrokerServices`` (the narrow interface handlers see), or serve a whole
request struct with ``call`` (encoded and decoded on both sides as on the wire), and can inspect
or instrument the parts in between.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.handlers import HANDLERS, RawResponse, RequestContext, load_handlers
from protocol.api_table import get_spec
from storage.log import FileSlice


@contextlib.asynccontextmanager
async def in_process_broker(log_dir: Path, overrides: dict[str, str] | None = None) -> AsyncIterator[Broker]:
    props = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(log_dir), "node.id": "1",
             "group.initial.rebalance.delay.ms": "0", **(overrides or {})}
    load_handlers()
    broker = Broker(BrokerConfig.load(None, props))
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


def request_context(broker: Broker, api_key: int, version: int, *, principal: str = "User:ANONYMOUS",
                    listener: str = "PLAINTEXT") -> RequestContext:
    return RequestContext(broker.services, api_key, version, 1, "in-process-test", "127.0.0.1", 1, 1,
                          principal, listener)


async def call(broker: Broker, request: Any, version: int, **context: Any) -> Any:
    """Serve ``request`` (a kafka-python request struct) as the server would, in process: encoded,
    decoded by the handler's own decoder, handled with the broker's services, and the response
    encoded and decoded again (record ranges a Fetch leaves in the segment files are read). None
    when no response is due."""
    key = request.API_KEY
    spec = get_spec(key)
    reg = HANDLERS[key]
    assert spec is not None and reg.min_version <= version <= reg.max_version
    body = memoryview(bytearray(request.encode(version=version)))
    decoded = reg.decoder(body, version) if reg.decoder is not None else spec.request.decode(body, version=version)
    response = await reg.handler(request_context(broker, key, version, **context), decoded)
    if response is None:
        return None
    if isinstance(response, RawResponse):
        data = b"".join(c.read() if isinstance(c, FileSlice) else bytes(c) for c in response.chunks)
    else:
        data = response.encode(version=version)
    return spec.response.decode(data, version=version)


class InProcessClient:
    """protocol.client.ProtocolClient's ``request`` served by ``call``: request helpers written for
    a broker over TCP drive the in-process one unchanged."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def request(self, request: Any, version: int) -> Any:
        return await call(self.broker, request, version)
