"""A null broker that also answers the transaction APIs: the client's ceiling for commits/s.

``benchmarks/null_broker.py`` stores nothing and has no transactions; this adds canned answers for
AddPartitionsToTxn (v0-3) and EndTxn (v0-3), so that ``txn_bench.py``'s commits phase
(confluent-kafka: begin, 10 produces over 4 partitions, commit) runs against it. Every
transaction then costs only the client, the machine and the minimal per-request work of a
Python asyncio server: the round-trip floor that no broker can beat on this machine with this
client. No group APIs, so consume-transform-produce does not run against it.

    .venv/bin/python benchmarks/null_txn_broker.py [--transactions 1000]

prints the commits/s of the commits phase against it (a subprocess on 127.0.0.1).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import null_broker as nb  # noqa: E402

from protocol.api_table import get_spec  # noqa: E402
from protocol.headers import parse_request_header  # noqa: E402

TXN_VERSIONS = {24: (0, 3), 26: (0, 3)}


class NullTxnBroker(nb.NullBroker):
    async def request(self, frame: memoryview) -> list[bytes | memoryview] | None:
        h = parse_request_header(frame)
        if h.api_key not in TXN_VERSIONS:
            return await super().request(frame)
        spec, v = get_spec(h.api_key), h.api_version
        lo, hi = TXN_VERSIONS[h.api_key]
        if not lo <= v <= hi:
            raise ConnectionError(f"api key {h.api_key} v{v} not served by the null txn broker")
        req = spec.request.decode(frame[h.body_offset:], version=v)
        return self._encode(h.correlation_id, spec, v, self.txn_response(h.api_key, req, v))

    def api_versions(self, v: int, error: int = 0) -> Any:
        resp = super().api_versions(v, error)
        keys = resp.api_keys
        cls = type(keys[0]) if keys else None
        if cls is not None and not error:
            keys.extend(cls(version=v, api_key=k, min_version=lo, max_version=hi)
                        for k, (lo, hi) in TXN_VERSIONS.items())
        return resp

    @staticmethod
    def txn_response(key: int, req: Any, v: int) -> Any:
        spec = get_spec(key)
        if key == 26:
            return spec.response(version=v, throttle_time_ms=0, error_code=0)
        T = spec.response.AddPartitionsToTxnTopicResult
        P = T.AddPartitionsToTxnPartitionResult
        return spec.response(version=v, throttle_time_ms=0, results_by_topic_v3_and_below=[
            T(version=v, name=t.name, results_by_partition=[
                P(version=v, partition_index=p, partition_error_code=0) for p in t.partitions])
            for t in req.v3_and_below_topics])


def _serve(port: int) -> None:
    try:
        import uvloop
    except ImportError:
        uvloop = None

    async def run() -> None:
        b = NullTxnBroker("127.0.0.1", port, 100)
        print(f"null txn broker on 127.0.0.1:{port}", flush=True)
        await b.serve()

    (uvloop.run if uvloop is not None else asyncio.run)(run())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transactions", type=int, default=1000)
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the subprocess: serve on this port
    args = ap.parse_args()
    if args.serve:
        _serve(args.serve)
        return 0
    import subprocess

    import txn_bench

    port = nb.NullBrokerProcess().port
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port)], stdout=log, stderr=log)
        try:
            import socket
            import time

            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise SystemExit("null txn broker did not start") from None
                    time.sleep(0.05)
            bootstrap = f"127.0.0.1:{port}"
            txn_bench.create_topics(bootstrap, "nulltxn")
            print(txn_bench.bench_commits(bootstrap, "nulltxn", args.transactions, None).describe())
        finally:
            proc.terminate()
            proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
