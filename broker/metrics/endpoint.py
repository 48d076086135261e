"""The HTTP endpoint Prometheus scrapes (``kbroker.prometheus.listener``, e.g.
``http://127.0.0.1:9404``), served on the broker's own event loop.

One GET per connection (``/metrics`` or ``/``), answered with prometheus_client's text exposition
of a registry holding broker.metrics.collector's collector and prometheus_client's ProcessCollector
(``process_*``: CPU seconds, resident and virtual memory, open and maximum fds, start time, read
from ``/proc/self`` on Linux at each scrape, as every prometheus-client process exposes them). Serving on the loop keeps the
design's rule that partition and coordinator state is touched by no other thread; a scrape costs
the loop the time to render the families (milliseconds for hundreds of partitions).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from broker.metrics.collector import BrokerCollector
from broker.metrics.stats import LoopMonitor

log = logging.getLogger("broker.metrics")

_MAX_HEADER = 16384
_READ_TIMEOUT_S = 10.0


def parse_listener(value: str) -> tuple[str, int]:
    """``http://HOST:PORT`` (or ``HOST:PORT``) -> (host, port); raises ValueError otherwise."""
    url = urlsplit(value if "://" in value else f"http://{value}")
    if url.scheme != "http" or url.port is None or url.path not in ("", "/"):
        raise ValueError(f"kbroker.prometheus.listener must look like http://HOST:PORT, got {value!r}")
    return url.hostname or "", url.port


class MetricsEndpoint:
    def __init__(self, broker: Any, listener: str) -> None:
        self.host, self.port = parse_listener(listener)
        self.loop_monitor = LoopMonitor()
        self.collector = BrokerCollector(broker, self.loop_monitor)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)  # type: ignore[arg-type]
        # The process_* families a Python exporter serves by default (the default registry has them;
        # this private registry does not, so they are added here). A few small /proc reads per scrape.
        ProcessCollector(registry=self.registry)
        self._server: asyncio.base_events.Server | None = None
        self.bound: tuple[str, int] | None = None

    async def start(self) -> tuple[str, int]:
        self.loop_monitor.start()
        self._server = await asyncio.start_server(self._serve, self.host or None, self.port, reuse_address=True)
        addr = self._server.sockets[0].getsockname()
        self.bound = (addr[0], addr[1])
        log.info("prometheus metrics on http://%s:%s/metrics", addr[0], addr[1])
        return self.bound

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        await self.loop_monitor.stop()

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
            if len(head) > _MAX_HEADER:
                raise ValueError("header too large")
            method, target = head.split(b"\r\n", 1)[0].split(b" ")[:2]
            path = target.split(b"?", 1)[0]
            if method not in (b"GET", b"HEAD"):
                status, body, ctype = b"405 Method Not Allowed", b"GET only\n", b"text/plain"
            elif path not in (b"/metrics", b"/"):
                status, body, ctype = b"404 Not Found", b"try /metrics\n", b"text/plain"
            else:
                status, body, ctype = b"200 OK", self.render(), CONTENT_TYPE_LATEST.encode()
            writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype + b"\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n")
            if method != b"HEAD":
                writer.write(body)
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, ConnectionError):
            pass
        except Exception:  # a scrape must never take the broker down
            log.exception("metrics scrape failed")
        finally:
            writer.close()
