"""Null brokers that replicate: the ceiling of issue 31's RF=3 produce targets on this machine.

``benchmarks/null_broker.py`` nodes posing as a cluster (``--node-id K --cluster ...``) lead
partition p when ``p % N == K`` and keep nothing. With ``--replicas R`` (R > 1) each node here also
moves every produced byte the way a replicated broker must at the least:

- Metadata names R replicas per partition (the leader and the next R - 1 nodes), all in the ISR;
- the leader of a partition forwards each Produce request that carries it, unchanged, to each of
  its followers over one connection per follower (to the follower's replication listener,
  ``--replication-ports``: frames of size, correlation id and the request's body), and answers an
  ``acks=all`` request only when every follower has received all of it (``acks=1`` at once,
  ``acks=0`` never);
- a follower receives each frame into one reused buffer (``asyncio.BufferedProtocol``: the copy out
  of the kernel that any replica pays, and no other) and answers it once its last byte is in; it
  checks, stores and indexes nothing.

Requests on a client connection are read ahead while earlier ones wait for their followers, and
answered in order, as a broker must pipeline them (kbroker reads up to 4 MiB ahead).

So the client's bytes cross the loopback three times, through three event loops, and nothing else
happens: what the same client reaches against these three processes is the most any 3-process
RF=3 broker on this machine could give it, and its ratio to one null broker (or to the same three
nodes with ``--replicas 1``) bounds what kbroker's RF=3 / single node (RF=1) ratios can reach.
Kafka's followers pull (Fetch) where these are pushed to; both cost one send and one receive per
follower per byte, and a pull adds a round trip per fetch, so the push is the cheaper of the two.
It is a benchmark ceiling only (``benchmarks/replication_ceiling.py``), not a Kafka.

    .venv/bin/python benchmarks/null_replicating_broker.py --port P --node-id K \\
        --cluster HOST:PORT,HOST:PORT,HOST:PORT --replicas 3 --replication-ports P0,P1,P2

(``start_cluster`` below starts such a cluster on free ports.) ``NULL_BROKER_TRACE=FILE`` traces
the client requests, as null_broker.py does, and the frames received from other nodes (api key -1
for a follower's bytes, -2 for a marker).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import null_broker as nb  # noqa: E402
import null_txn_broker as ntb  # noqa: E402

from protocol.api_table import get_spec  # noqa: E402
from protocol.fast_codecs import decode_produce_request  # noqa: E402
from protocol.headers import encode_response_prefix, parse_request_header, skip_tagged_fields  # noqa: E402

_I16, _I32 = nb._I16, nb._I32
# Frames on the replication listeners: size, correlation id, kind, payload.
REPLICA_DATA = 0  # bytes a follower copies: answered once all of them arrived
MARKER = 1  # a transaction marker for the partitions the receiving node leads: answered once replicated
_KIND = {REPLICA_DATA: b"\x00", MARKER: b"\x01"}
TRACE_KEYS = {REPLICA_DATA: -1, MARKER: -2}  # the "api key" of a received frame in NULL_BROKER_TRACE lines
_MARKER_PAYLOAD = bytes(78)  # a v2 control batch with one COMMIT record is 78 bytes
_STATE_PAYLOAD = bytes(160)  # about a one-record __transaction_state batch with a few partitions
_OFFSETS_PAYLOAD = bytes(140)  # about a one-record __consumer_offsets batch
_Answer = tuple[list[bytes | memoryview], Awaitable[Any] | None]  # frames to write, after what


class FollowerLink:
    """The leader's connection to one follower: frames out, their answers matched by correlation id."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._writer: asyncio.StreamWriter | None = None
        self._connecting: asyncio.Future[None] | None = None
        self._pending: dict[int, asyncio.Future[None]] = {}
        self._corr = 0

    async def _connect(self) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._writer = writer
        asyncio.get_running_loop().create_task(self._read(reader))

    async def send(self, body: bytes | memoryview, kind: int = REPLICA_DATA) -> None:
        """Send ``body`` to the follower; return once the follower answered it (``REPLICA_DATA``:
        once all of it arrived; ``MARKER``: once the node has replicated it to its own followers)."""
        if self._writer is None:
            if self._connecting is None:  # one connect, however many sends wait for it
                self._connecting = asyncio.ensure_future(self._connect())
            await asyncio.shield(self._connecting)
        assert self._writer is not None
        self._corr += 1
        corr = self._corr
        fut = self._pending[corr] = asyncio.get_running_loop().create_future()
        self._writer.writelines([_I32.pack(5 + len(body)), _I32.pack(corr), _KIND[kind], body])
        await self._writer.drain()  # returns at once below the transport's high-water mark
        await fut

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                size = _I32.unpack(await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                fut = self._pending.pop(_I32.unpack_from(frame, 0)[0], None)
                if fut is not None and not fut.done():
                    fut.set_result(None)
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(f"follower {self.host}:{self.port} lost: {e}"))
            self._pending.clear()
            self._writer = self._connecting = None


class FollowerProtocol(asyncio.BufferedProtocol):
    """A node's end of another node's link: receives each frame into one reused buffer (the copy
    out of the kernel that any replica pays; no further copy) and answers it once its last byte is
    in, or for a MARKER once the node has replicated it to its own followers."""

    def __init__(self, broker: ReplicatingNullBroker) -> None:
        self.broker = broker
        self._buf = bytearray(1 << 20)
        self._head = bytearray()  # the current frame's first 9 bytes (size, correlation id, kind) so far
        self._left = 0  # bytes of the current frame's payload still to receive
        self._corr = 0  # the current frame's correlation id
        self._kind = REPLICA_DATA
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self._buf)

    def buffer_updated(self, nbytes: int) -> None:
        view = memoryview(self._buf)[:nbytes]
        pos = 0
        acks: list[bytes] = []
        while pos < nbytes:
            if self._left:
                step = min(self._left, nbytes - pos)
                self._left -= step
                pos += step
                if not self._left:  # the whole frame is in
                    self._done(acks)
                continue
            need = 9 - len(self._head)
            self._head += view[pos:pos + need]
            pos += min(need, nbytes - pos)
            if len(self._head) == 9:
                size, self._corr = _I32.unpack_from(self._head, 0)[0], _I32.unpack_from(self._head, 4)[0]
                self._kind = self._head[8]
                self._head.clear()
                self._left = size - 5
                if not self._left:
                    self._done(acks)
        if acks and self._transport is not None:
            self._transport.write(b"".join(acks))

    def _done(self, acks: list[bytes]) -> None:
        ack = _I32.pack(4) + _I32.pack(self._corr)
        if self.broker.trace is not None:  # as a request line, with the frame's pseudo api key
            self.broker.trace_line(TRACE_KEYS[self._kind], 0, self._corr, 0.0)
        if self._kind != MARKER:
            acks.append(ack)
            return
        replicated = self.broker.replicate_marker()

        async def answer() -> None:
            await replicated
            if self._transport is not None:
                self._transport.write(ack)
        asyncio.get_running_loop().create_task(answer())

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None


class ReplicatingNullBroker(nb.NullBroker):
    """A null broker node whose partitions have ``replication_factor`` replicas (see the module doc)."""

    replication_factor = 1  # set from --replicas before the server starts
    replication_ports: list[int] = []  # every node's follower listener, by node id (--replication-ports)

    def __init__(self, host: str, port: int, value_size: int) -> None:
        super().__init__(host, port, value_size)
        self._links: dict[int, FollowerLink] = {}

    def replicas(self, partition: int) -> list[int]:
        if not self.clustered:
            return [self.node_id]
        n = len(self.nodes)
        leader = self.leader(partition)
        return [(leader + k) % n for k in range(min(self.replication_factor, n))]

    def _link(self, node: int) -> FollowerLink:
        link = self._links.get(node)
        if link is None:
            link = self._links[node] = FollowerLink(self.nodes[node][0], self.replication_ports[node])
        return link

    def replicate(self, followers: list[int] | set[int], payload: bytes | memoryview) -> asyncio.Future[Any]:
        """Send ``payload`` to each of ``followers``; done once all have it."""
        return asyncio.gather(*(self._link(k).send(payload) for k in sorted(followers)))

    def own_followers(self) -> set[int]:
        """The followers of the partitions this node leads."""
        return {k for p in range(self.default_partitions) if self.leader(p) == self.node_id
                for k in self.replicas(p)[1:]}

    def replicate_marker(self) -> asyncio.Future[Any]:
        """A transaction marker for the partitions this node leads, replicated to their followers."""
        return self.replicate(self.own_followers(), _MARKER_PAYLOAD)

    def request_wait(self) -> Awaitable[Any] | None:
        """What the answer to the request just handled (by ``request``) waits for; none here."""
        return None

    def _followers(self, req: Any) -> set[int]:
        """The followers of the partitions of ``req`` that this node leads."""
        out: set[int] = set()
        for td in req.topic_data:
            t = self.topics.get(td.name)
            for pd in td.partition_data:
                if t is not None and 0 <= pd.index < len(t.end) and self.leader(pd.index) == self.node_id:
                    out.update(self.replicas(pd.index)[1:])
        return out

    def _produce(self, frame: memoryview) -> _Answer | None:
        h = parse_request_header(frame)
        v = h.api_version
        spec = get_spec(0)
        pos = skip_tagged_fields(frame, h.body_offset) if spec.request_flexible(v) else h.body_offset
        body = frame[pos:]
        req = decode_produce_request(body, v)
        chunks = self.answer_produce(req, v)  # offsets assigned now, in the order requests arrive
        followers = self._followers(req)
        replicated = self.replicate(followers, body) if followers else None  # whatever the acks
        if chunks is None:  # acks=0: no answer
            return None
        wait = replicated if req.acks == -1 else None
        n = sum(len(c) for c in chunks)
        return [encode_response_prefix(h.correlation_id, n, spec.response_header_flexible(v)), *chunks], wait

    async def serve(self) -> None:
        if self.replication_factor > 1:  # the followers' end of the leaders' links
            await asyncio.get_running_loop().create_server(
                lambda: FollowerProtocol(self), self.host, self.replication_ports[self.node_id])
        await super().serve()

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.replication_factor <= 1:
            return await super().connection(reader, writer)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._connections += 1
        conn = self._connections
        answers: asyncio.Queue[_Answer | None] = asyncio.Queue()
        answering = asyncio.get_running_loop().create_task(self._answer_in_order(writer, answers))
        lo, hi = self.versions[0]
        try:
            while True:
                size = _I32.unpack(await reader.readexactly(4))[0]
                frame = memoryview(await reader.readexactly(size))
                t0 = time.perf_counter()
                key, v, corr = _I16.unpack_from(frame, 0)[0], _I16.unpack_from(frame, 2)[0], _I32.unpack_from(frame, 4)[0]
                if key == 0 and lo <= v <= hi:
                    answer = self._produce(frame)
                    if answer is not None:
                        answers.put_nowait(answer)
                else:
                    out = await self.request(frame)
                    wait = self.request_wait()
                    if out:
                        answers.put_nowait((out, wait))
                if self.trace is not None:
                    self.trace_line(key, conn, corr, time.perf_counter() - t0)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            answers.put_nowait(None)
            try:
                await answering
            except Exception:  # noqa: BLE001 - a lost follower: this connection ends, as below
                pass
            writer.close()

    @staticmethod
    async def _answer_in_order(writer: asyncio.StreamWriter, answers: asyncio.Queue[_Answer | None]) -> None:
        try:
            while (item := await answers.get()) is not None:
                out, wait = item
                if wait is not None:
                    await wait
                writer.writelines(out)
                if answers.empty():
                    await writer.drain()
        except Exception:
            writer.close()  # the client sees the connection end, and retries elsewhere or fails
            raise


class ReplicatingNullTxnBroker(ReplicatingNullBroker, ntb.NullTxnBroker):
    """null_txn_broker.py's groups and transactions (node 0 coordinates every group and
    transactional id) on replicating nodes, with the writes a replicated coordinator must make:
    AddPartitionsToTxn, AddOffsetsToTxn and TxnOffsetCommit are answered once their record (a
    transaction state or offsets record of the coordinator's partition, RF as the topics) is on
    every follower; EndTxn once its PrepareCommit is; then the markers go to the leaders of the
    transaction's partitions (a leader answers once its marker is on its followers), and then the
    CompleteCommit record is replicated. The producer's batches are replicated as any produce.
    Left out, as the least a broker could do: the partition-leader checks of KIP-890 (a round trip
    to the coordinator per partition and transaction) and every state check."""

    def __init__(self, host: str, port: int, value_size: int) -> None:
        super().__init__(host, port, value_size)
        self._wait: asyncio.Future[Any] | None = None
        self.txn_leaders: dict[int, set[int]] = {}  # producer id -> nodes leading its transaction's partitions

    def request_wait(self) -> Awaitable[Any] | None:
        wait, self._wait = self._wait, None
        return wait

    def _coordinator_write(self, payload: bytes) -> asyncio.Future[Any]:
        """A record of the coordinator's partition (partition 0's replicas), on all its followers."""
        return self.replicate([k for k in self.replicas(0) if k != self.node_id], payload)

    def add_partitions_to_txn(self, req: Any, v: int) -> Any:
        leaders = self.txn_leaders.setdefault(req.v3_and_below_producer_id, set())
        for t in req.v3_and_below_topics:
            leaders.update(self.leader(p) for p in t.partitions)
        self._wait = self._coordinator_write(_STATE_PAYLOAD)
        return super().add_partitions_to_txn(req, v)

    def add_offsets_to_txn(self, req: Any, v: int) -> Any:
        self.txn_leaders.setdefault(req.producer_id, set()).add(0)  # the group's offsets partition: node 0's
        self._wait = self._coordinator_write(_STATE_PAYLOAD)
        return super().add_offsets_to_txn(req, v)

    def txn_offset_commit(self, req: Any, v: int) -> Any:
        self._wait = self._coordinator_write(_OFFSETS_PAYLOAD)
        return super().txn_offset_commit(req, v)

    def end_txn(self, req: Any, v: int) -> Any:
        prepared = self._wait = self._coordinator_write(_STATE_PAYLOAD)
        leaders = self.txn_leaders.pop(req.producer_id, set())
        asyncio.get_running_loop().create_task(self._complete(prepared, leaders))
        return super().end_txn(req, v)

    async def _complete(self, prepared: asyncio.Future[Any], leaders: set[int]) -> None:
        await prepared
        await asyncio.gather(*(self.replicate_marker() if k == self.node_id else self._link(k).send(_MARKER_PAYLOAD, MARKER)
                               for k in sorted(leaders)))
        await self._coordinator_write(_STATE_PAYLOAD)


def start_cluster(n: int, replicas: int, value_size: int = 1024, partitions: int = nb.DEFAULT_PARTITIONS,
                  envs: list[dict[str, str]] | None = None, transactions: bool = False) -> list[nb.NullBrokerProcess]:
    """``n`` replicating null broker subprocesses posing as one cluster (node ids 0..n-1) whose
    partitions have ``replicas`` replicas, each started; the caller stops them. ``envs``: more
    environment per node; ``transactions``: with null_txn_broker.py's groups and transactions
    (ReplicatingNullTxnBroker)."""
    rports = ",".join(str(nb.free_port()) for _ in range(n))
    return nb.start_cluster(n, value_size, partitions, script=Path(__file__).resolve(), envs=envs, extra_args=[
        "--replicas", str(replicas), "--replication-ports", rports, *(["--transactions"] if transactions else [])])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=19093)
    ap.add_argument("--value-size", type=int, default=1024, help="value bytes of the records Fetch serves")
    ap.add_argument("--partitions", type=int, default=nb.DEFAULT_PARTITIONS)
    ap.add_argument("--node-id", type=int, default=nb.NODE_ID)
    ap.add_argument("--cluster", type=nb.parse_nodes, metavar="HOST:PORT,...", required=True,
                    help="listeners of all nodes, in node-id order (this one's included)")
    ap.add_argument("--replicas", type=int, default=3, help="replicas per partition (leader included)")
    ap.add_argument("--replication-ports", type=lambda t: [int(x) for x in t.split(",")], metavar="PORT,...",
                    help="every node's follower listener on its host, in node-id order (with --replicas > 1)")
    ap.add_argument("--transactions", action="store_true",
                    help="serve groups and transactions too (null_txn_broker.py's, replicated)")
    args = ap.parse_args()
    if not (0 <= args.node_id < len(args.cluster) and args.cluster[args.node_id][1] == args.port):
        ap.error("--cluster must list this node's --port at position --node-id")
    if not 1 <= args.replicas <= len(args.cluster):
        ap.error("--replicas must be between 1 and the number of nodes")
    if args.replicas > 1 and len(args.replication_ports or ()) != len(args.cluster):
        ap.error("--replication-ports must list one port per node of --cluster")
    ReplicatingNullBroker.replication_factor = args.replicas
    ReplicatingNullBroker.replication_ports = args.replication_ports or []
    nb.run_server(ReplicatingNullTxnBroker if args.transactions else ReplicatingNullBroker, args.host, args.port, args.value_size, partitions=args.partitions,
                  node_id=args.node_id, cluster=args.cluster)
    return 0


if __name__ == "__main__":
    sys.exit(main())
