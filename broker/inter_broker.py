"""Requests from this broker to other brokers of the cluster (transaction markers, KIP-890
verification): one pipelined connection per remote broker to its advertised address on
``inter.broker.listener.name`` (default: the first listener), opened on demand and dropped on any
connection error so the next request reconnects, possibly to a new address from metadata.

Follower fetchers keep their own connections (broker/replication/fetcher.py): their long polls
must not delay these requests. Connections use the inter-broker listener's security protocol
(TLS, SASL: broker/inter_broker_security.py), as the fetchers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from broker import inter_broker_security
from broker.config import BrokerConfig
from cluster.metadata_store import MetadataStore
from protocol.client import ProtocolClient

log = logging.getLogger("broker.inter_broker")

CONNECT_TIMEOUT_S = 10.0


class InterBrokerClients:
    def __init__(self, node_id: int, config: BrokerConfig, metadata: MetadataStore) -> None:
        self.node_id = node_id
        self.config = config
        self.metadata = metadata
        self._clients: dict[int, tuple[tuple[str, int], ProtocolClient]] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    def address(self, node_id: int) -> tuple[str, int] | None:
        return inter_broker_security.peer_address(self.config, self.metadata, node_id)

    async def _client(self, node_id: int) -> ProtocolClient:
        addr = self.address(node_id)
        if addr is None:
            raise ConnectionError(f"broker {node_id} is not registered")
        known = self._clients.get(node_id)
        if known is not None and known[0] == addr:
            return known[1]
        lock = self._locks.setdefault(node_id, asyncio.Lock())
        async with lock:
            known = self._clients.get(node_id)
            if known is not None and known[0] == addr:
                return known[1]
            if known is not None:
                await self._drop(node_id)
            client = await asyncio.wait_for(inter_broker_security.connect(
                self.config, addr[0], addr[1], client_id=f"broker-{self.node_id}"), CONNECT_TIMEOUT_S)
            self._clients[node_id] = (addr, client)
            return client

    async def _drop(self, node_id: int) -> None:
        known = self._clients.pop(node_id, None)
        if known is not None:
            with contextlib.suppress(Exception):
                await known[1].close()

    async def request(self, node_id: int, request: Any, version: int, timeout_s: float) -> Any:
        """Send ``request`` to broker ``node_id``; ConnectionError / TimeoutError when it cannot."""
        client = await self._client(node_id)
        try:
            # The client's own timer bounds the wait (wait_for would run the request in a task of its
            # own: KIP-890 verifications and markers go through here on every transaction).
            return await client.request(request, version, timeout_s=timeout_s)
        except (ConnectionError, OSError, TimeoutError) as e:
            log.info("request %s to broker %d failed (%r)", type(request).__name__, node_id, e)
            await self._drop(node_id)
            raise ConnectionError(f"broker {node_id}: {e!r}") from e

    async def close(self) -> None:
        for node_id in list(self._clients):
            await self._drop(node_id)
