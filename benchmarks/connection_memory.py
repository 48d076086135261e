"""Per-connection memory that outlives the connection, measured with tracemalloc (not RSS).

Runs a broker in this process, opens N connections (half of them sending one ApiVersions request,
half idle), closes them, waits until the server has dropped them, and compares tracemalloc
snapshots taken before and after. Also reports the memory held *while* the connections are open.
Usage: .venv/bin/python -m benchmarks.connection_memory [N]
"""

from __future__ import annotations

import asyncio
import gc
import socket
import sys
import tempfile
import tracemalloc

from kafka.protocol.metadata import ApiVersionsRequest

from broker.broker import Broker
from broker.config import BrokerConfig
from tests.helpers.broker_proc import free_port
from tests.helpers.wire import encode_request


async def _run(n: int) -> None:
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        cfg = BrokerConfig.load(None, {"listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": d})
        broker = Broker(cfg)
        await broker.start()
        try:
            frame = encode_request(ApiVersionsRequest(version=0), 0, 1)

            loop = asyncio.get_running_loop()

            async def one_round() -> tracemalloc.Snapshot | None:
                # Raw sockets on the client side, so the client allocates next to nothing in Python.
                socks = []
                for i in range(n):
                    s = socket.socket()
                    s.setblocking(False)
                    await loop.sock_connect(s, ("127.0.0.1", port))
                    if i % 2 == 0:
                        await loop.sock_sendall(s, frame)
                        await loop.sock_recv(s, 65536)
                    socks.append(s)
                while len(broker.server.connections) < n:
                    await asyncio.sleep(0.01)
                gc.collect()
                held = tracemalloc.take_snapshot() if tracemalloc.is_tracing() else None
                for s in socks:
                    s.close()
                del socks, s
                while broker.server.connections:
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.1)
                gc.collect()
                return held

            await one_round()  # warm-up: imports, caches, codegen
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.take_snapshot()
            held = await one_round()
            after = tracemalloc.take_snapshot()
            tracemalloc.stop()
            open_cost = sum(s.size_diff for s in held.compare_to(before, "filename"))
            leak = sum(s.size_diff for s in after.compare_to(before, "filename"))
            print(f"{n} connections: {open_cost / n:.0f} B per open connection, "
                  f"{leak / n:.1f} B per closed connection not returned (total {leak} B)")
            for stat in after.compare_to(before, "lineno")[:5]:
                print("   ", stat)
            from broker.server import KafkaConnection
            live = [o for o in gc.get_objects() if isinstance(o, KafkaConnection)]
            transports = [o for o in gc.get_objects() if isinstance(o, asyncio.Transport)]
            server_side = [t for t in transports if (t.get_extra_info("sockname") or (0, 0))[1] == port]
            print(f"live KafkaConnection objects after close: {len(live)}; live transports: {len(transports)} "
                  f"({len(server_side)} server-side)")
            if transports:
                print("   e.g.", transports[0], gc.get_referrers(transports[0])[:3])
        finally:
            await broker.stop()


if __name__ == "__main__":
    asyncio.run(_run(int(sys.argv[1]) if len(sys.argv) > 1 else 1000))
