"""Bounded protocol-client connections for the tools that speak the Kafka protocol themselves
(groups, transactions, features, healthcheck): the requests confluent-kafka's AdminClient cannot send.

A connection must open within ``CONNECT_TIMEOUT_S`` and every request be answered within
``TIMEOUT_S`` (cli/common.py): a broker that accepts connections but never answers makes the tool
fail with one line ("no answer from H:P within 15 s") instead of hanging. Connections are kept per
broker address and closed together. PLAINTEXT only for now (the tools pass no TLS/SASL settings to
the protocol client): a ``--command-config`` asking for another ``security.protocol`` is refused
with one line before any connection.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Coroutine
from typing import Any

from cli.common import CONNECT_TIMEOUT_S, TIMEOUT_S, CliError, bootstrap_addresses, load_properties


def require_plaintext(command_config: str | None, tool: str) -> None:
    """Refuse a --command-config whose security.protocol is not PLAINTEXT (one line, before connecting)."""
    if not command_config:
        return
    protocol = load_properties(command_config).get("security.protocol", "PLAINTEXT")
    if protocol.upper() != "PLAINTEXT":
        raise CliError(f"security.protocol={protocol} is not supported by {tool} yet (PLAINTEXT only)")


def run_protocol_tool(tool: str, command: str, command_config: str | None,
                      work: Coroutine[Any, Any, int]) -> int:
    """Run a tool's coroutine under one overall deadline; every failure is one line on stderr."""
    try:
        require_plaintext(command_config, tool)
        return asyncio.run(asyncio.wait_for(work, TIMEOUT_S * 4))
    except TimeoutError:
        print(f"{tool} {command}: no answer within {TIMEOUT_S * 4:g} s", file=sys.stderr)
        return 1
    except (CliError, OSError, ValueError) as e:
        print(f"{tool} {command}: {e}", file=sys.stderr)
        return 1
    finally:
        work.close()  # never awaited when the config is refused: no "was never awaited" warning


class BoundedClient:
    """One connection; each request bounded by TIMEOUT_S, a closed connection reported as one line."""

    def __init__(self, client: Any) -> None:
        self.client = client

    @property
    def address(self) -> str:
        return f"{self.client.host}:{self.client.port}"

    async def request(self, request: Any, version: int) -> Any:
        try:
            return await asyncio.wait_for(self.client.request(request, version), TIMEOUT_S)
        except TimeoutError:
            raise CliError(f"no answer from {self.address} within {TIMEOUT_S:g} s") from None
        except (ConnectionError, asyncio.IncompleteReadError, EOFError) as e:
            raise CliError(f"{self.address} closed the connection ({type(e).__name__}: {e})") from None


class ProtocolSession:
    """Connections by broker address, starting from the first bootstrap server."""

    def __init__(self, bootstrap: str, client_id: str) -> None:
        self.bootstrap = bootstrap_addresses(bootstrap)[0]
        self.client_id = client_id
        self._clients: dict[tuple[str, int], BoundedClient] = {}

    async def client(self, addr: tuple[str, int] | None = None) -> BoundedClient:
        from protocol.client import ProtocolClient

        host, port = addr or self.bootstrap
        c = self._clients.get((host, port))
        if c is None:
            try:
                raw = await asyncio.wait_for(ProtocolClient(host, port, client_id=self.client_id).connect(),
                                             CONNECT_TIMEOUT_S)
            except TimeoutError:
                raise CliError(f"cannot connect to {host}:{port}: no answer within {CONNECT_TIMEOUT_S:g} s") from None
            except OSError as e:
                # asyncio's strerror is "Connect call failed (...)": say what the errno means.
                why = os.strerror(e.errno) if e.errno else (e.strerror or str(e))
                raise CliError(f"cannot connect to {host}:{port}: {why}") from None
            c = self._clients[(host, port)] = BoundedClient(raw)
        return c

    async def request(self, request: Any, version: int, addr: tuple[str, int] | None = None) -> Any:
        return await (await self.client(addr)).request(request, version)

    async def close(self) -> None:
        for c in self._clients.values():
            try:
                await asyncio.wait_for(c.client.close(), CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError):
                pass
        self._clients.clear()
