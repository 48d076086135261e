"""The Spark sink's raw writer: one task's transaction written from its Arrow columns, without a
librdkafka ``produce()`` (and a Python object) per row (issue 32, the sink's half of the path the
raw reader started).

``RawTransaction`` is a transactional producer over the protocol client (``SinkProducer``, the 2pc
sink's producer, initialised without ``enable2Pc``) running on an event loop thread of its own, so
the task's thread encodes the next Arrow batch while the previous one is on the wire. Each Arrow
batch is encoded by the compiled ``encode_records`` (spark_jobs/_record_columns.c) into v2
records split by partition: keyed rows by Java's murmur2 partitioner (where librdkafka's
``murmur2_random`` and Spark's Kafka sink put them), keyless rows of one Arrow batch all to one
partition, the next batch to the next one (librdkafka's sticky partitioning does the same per
linger interval), in chunks of at most ``MAX_CHUNK_BYTES`` of records. Python adds a 61-byte batch
header per chunk (transactional, producer id and epoch, the partition's next sequence number,
CRC-32C) and sends the chunks as Produce v9 requests, acks=all, per Arrow batch one request per
leader and per chunk of a partition (a request carries one batch per partition), at most
``MAX_IN_FLIGHT`` requests outstanding;
``write`` waits while ``MAX_BUFFERED`` bytes are encoded but not yet answered, so a task faster than
the broker does not buffer its whole input.

Errors, as librdkafka's idempotent producer treats them: a chunk answered NOT_LEADER_OR_FOLLOWER,
LEADER_NOT_AVAILABLE, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS(_AFTER_APPEND) or lost with its
connection is sent again, with the same sequence number, to the partition's leader of fresh
metadata, in sequence order after every request in flight has been answered (chunks behind it in
the same partition, answered OUT_OF_ORDER_SEQUENCE_NUMBER, go again behind it);
DUPLICATE_SEQUENCE_NUMBER means the broker already has the chunk. Any other error fails the task
(``TwoPhaseError``, from the next ``write`` or the commit): Spark retries it, and the retry's InitProducerId fences this producer and
aborts its transaction.

The 2pc sink (spark_jobs/sink_2pc.py) uses it too, with ``two_phase=True``: InitProducerId asks
for enable2Pc, and a task ends with ``prepare`` (every chunk acknowledged, the transaction left
open for the driver to complete) instead of ``commit``; and ``headers``, the same headers on every
row (its batch-id header).

Compression (``compression.type`` or its alias ``compression.codec``: gzip, snappy, lz4 or zstd,
at ``compression.level`` when given, else the codec's default as librdkafka uses it) is applied per
chunk, on the task's thread (the codecs release the GIL): the records section of each batch is
compressed and the codec set in its attributes, as a producer's batch. lz4 is an LZ4 frame with
independent blocks (Kafka's framing for v2 batches), gzip a gzip member, snappy one raw snappy
block as librdkafka writes it (no xerial framing; Kafka's and every client's decoders take both;
snappy has no levels).

It serves the common case only; ``usable`` says when: the compiled module is importable, the
connection is PLAINTEXT, the compression is none, gzip, snappy, lz4 or zstd, and the rows have only
``key``, ``value`` and ``headers`` columns (one topic, partitioned by key; a row's own headers come
before the fixed ones). Everything else, and the writer option ``rawWriter=false``, goes through
librdkafka as before.
"""

from __future__ import annotations

import asyncio
import struct
import threading
import time
import zlib
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
from crc32c import crc32c
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.util import encode_varint

from protocol.errors import ErrorCode

from .raw_reader import bootstrap_addresses
from .twopc_producer import PreparedTxnState, SinkProducer, TwoPhaseError

try:
    from ._record_columns import encode_records
except ImportError:  # not built (or an executor that only has the shipped zip): librdkafka writes
    encode_records = None

T = TypeVar("T")

# Records per batch: librdkafka's batch.size default. With the 61-byte batch header that stays under
# the broker's default message.max.bytes (1,048,588); 1 MiB of records did not (MESSAGE_TOO_LARGE).
MAX_CHUNK_BYTES = 1_000_000
MAX_IN_FLIGHT = 5  # Produce requests outstanding, as librdkafka's max.in.flight for idempotence
MAX_BUFFERED = 32 << 20  # bytes encoded but not yet answered: write() waits above it
_RESEND = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT,
           ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND}
_LOST = -1  # a chunk whose request's connection broke before the answer
_HELD = -2  # a chunk not sent because an earlier one of its partition failed
# What the flush sends again (OUT_OF_ORDER_SEQUENCE_NUMBER too, but only behind a failed chunk).
_SEND_AGAIN = _RESEND | {_LOST, _HELD}
_PRE = struct.Struct(">qiibI")  # base offset, batch length, partition leader epoch, magic, CRC
_HEAD = struct.Struct(">hiqqqhii")  # attributes .. record count: what the CRC covers before the records
_TRANSACTIONAL = 0x10


def _compression(conf: Mapping[str, str]) -> str:
    return str(conf.get("compression.type", conf.get("compression.codec", "none"))).lower()


def _gzip(level: int) -> Callable[[bytes], bytes]:
    def compress(data: bytes) -> bytes:
        c = zlib.compressobj(level, zlib.DEFLATED, 31)  # wbits 16 + 15: a gzip member
        return c.compress(data) + c.flush()
    return compress


def _lz4(level: int) -> Callable[[bytes], bytes]:
    import lz4.frame

    def compress(data: bytes) -> bytes:
        return lz4.frame.compress(data, compression_level=level, block_linked=False)
    return compress


def _snappy(_level: int) -> Callable[[bytes], bytes]:
    import snappy

    return snappy.compress  # a raw block, as librdkafka's rd_kafka_snappy_compress_iov


def _zstd(level: int) -> Callable[[bytes], bytes]:
    import zstandard

    compressor = zstandard.ZstdCompressor(level=level)  # one per writer: a task's thread uses it
    return compressor.compress


# codec -> (attribute bits, librdkafka's default level for compression.level=-1, compressor factory)
_CODECS: dict[str, tuple[int, int, Callable[[int], Callable[[bytes], bytes]]]] = {
    "gzip": (1, 6, _gzip), "snappy": (2, 0, _snappy), "lz4": (3, 0, _lz4), "zstd": (4, 3, _zstd)}


def usable(conf: Mapping[str, str], column_names: Sequence[str], wanted: bool = True) -> bool:
    """Whether the raw writer can write a task with these settings and columns (module docstring)."""
    if encode_records is None or not wanted:
        return False
    if not set(column_names) <= {"key", "value", "headers"}:
        return False
    if _compression(conf) not in ("none", *_CODECS):
        return False
    return str(conf.get("security.protocol", "plaintext")).lower() == "plaintext"


def headers_section(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    """The headers part of a v2 record: the count, then each header's key and value (a null value
    as length -1), each length a zigzag varint (kafka-python's encoder)."""
    out = bytearray()
    encode_varint(len(headers), out.append)
    for key, value in headers:
        raw = key.encode()
        encode_varint(len(raw), out.append)
        out += raw
        encode_varint(-1 if value is None else len(value), out.append)
        out += value or b""
    return bytes(out)


_HEADERS_TYPE = pa.list_(pa.struct([("key", pa.binary()), ("value", pa.binary())]))


def _row_headers(column: pa.Array) -> tuple[Any, ...] | None:
    """The buffers of a headers column (Spark's Kafka sink: array<struct<key: string, value: binary>>)
    for encode_records' ``row_headers``; None when no row has a header."""
    if column.null_count == len(column):
        return None
    if column.type != _HEADERS_TYPE:
        column = column.cast(_HEADERS_TYPE)  # string keys, large lists or binaries: the same bytes
    validity, offsets = column.buffers()[:2]
    if column.null_count == 0:
        validity = None
    entries = column.values  # what the list offsets index, whatever the list's own slice
    entry_validity = entries.buffers()[0] if entries.null_count else None
    return (validity, offsets, column.offset, len(entries), entry_validity, entries.offset,
            *_binary_buffers(entries.field(0)), *_binary_buffers(entries.field(1)))


def _binary_buffers(column: pa.Array) -> tuple[Any, Any, Any, int]:
    """(validity, int32 offsets, data, slice offset) of a string or binary column."""
    if not (pa.types.is_binary(column.type) or pa.types.is_string(column.type)):
        column = column.cast(pa.binary())
    validity, offsets, data = column.buffers()[:3]
    if column.null_count == 0:
        validity = None
    return validity, offsets, data if data is not None else b"", column.offset


@dataclass
class _Chunk:
    topic: str
    partition: int
    sequence: int
    count: int
    batch: bytes


class RawTransaction:
    """A task's transactional producer (module docstring): ``init``, then per transaction ``begin``,
    ``write`` each Arrow batch, ``marker``, ``commit`` (or ``abort``; with ``two_phase``, ``prepare``);
    ``close`` at the end."""

    def __init__(self, conf: Mapping[str, str], transactional_id: str, *, transaction_timeout_ms: int = 60000,
                 retry_deadline_s: float = 60.0, two_phase: bool = False,
                 headers: Sequence[tuple[str, bytes | None]] = ()) -> None:
        self.transactional_id = transactional_id
        self.two_phase = two_phase
        # Every row's headers (the 2pc sink's batch-id header): encoded once, copied into each record.
        self._headers = headers_section(headers)
        self.transaction_timeout_ms = transaction_timeout_ms
        self.retry_deadline_s = retry_deadline_s
        addresses = bootstrap_addresses(conf)
        if not addresses:
            raise ValueError(f"no host:port in bootstrap.servers {conf.get('bootstrap.servers')!r}")
        self._producer = SinkProducer(addresses[0], transactional_id, retry_deadline_s=retry_deadline_s)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kbroker-raw-writer", daemon=True)
        self._thread.start()
        self._queue: asyncio.Queue[list[_Chunk] | asyncio.Future[None]] | None = None
        self._sender: asyncio.Future[None] | None = None
        self._next_keyless: dict[str, int] = {}
        # Bytes queued or in flight (write() waits while MAX_BUFFERED are), and the first error of
        # the sending, raised by the next write() as well as by the commit.
        self._room = threading.Condition()
        self._buffered = 0
        self._send_error: BaseException | None = None
        self._counts: dict[str, int] = {}
        codec = _compression(conf)
        self._codec, self._compress = 0, None
        if codec in _CODECS:
            bits, default_level, factory = _CODECS[codec]
            level = int(conf.get("compression.level", -1))
            self._codec, self._compress = bits, factory(default_level if level < 0 else level)

    @property
    def producer_id(self) -> int:
        return self._producer.producer_id

    @property
    def epoch(self) -> int:
        return self._producer.epoch

    # --- the task's side -----------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def init(self) -> None:
        """InitProducerId: fences every earlier producer of this id and aborts what it left open
        (a prepared transaction too, with ``two_phase``)."""
        self._call(self._producer.start(enable_2pc=self.two_phase, transaction_timeout_ms=self.transaction_timeout_ms))

    def begin(self) -> None:
        with self._room:  # a new transaction: nothing buffered, no error of an earlier one
            self._buffered = 0
            self._send_error = None
        self._call(self._begin())

    def write(self, batch: pa.RecordBatch, topic: str) -> int:
        """Encode ``batch`` (key, value and headers columns) and queue its chunks for sending; its row count."""
        n = batch.num_rows
        if n == 0:
            return 0
        count = self._counts.get(topic)
        if count is None:
            count = self._counts[topic] = self._call(self._producer.partition_count(topic))
        names = batch.schema.names
        value = _binary_buffers(batch.column(names.index("value")))
        key = _binary_buffers(batch.column(names.index("key"))) if "key" in names else (None, None, None, 0)
        row_headers = _row_headers(batch.column(names.index("headers"))) if "headers" in names else None
        keyless = self._next_keyless.get(topic, zlib.crc32(self.transactional_id.encode()) % count) % count
        self._next_keyless[topic] = keyless + 1
        encoded = encode_records(*value, *key, n, count, keyless, MAX_CHUNK_BYTES, self._headers, row_headers)
        self._queue_chunks([self._chunk(topic, p, c, records) for p, c, records in encoded])
        return n

    def _queue_chunks(self, chunks: list[_Chunk]) -> None:
        if self._sender is None:  # set and cleared by begin() and flush(), both waited for here
            raise RuntimeError("begin() first (no transaction is being written)")
        size = sum(len(c.batch) for c in chunks)
        with self._room:
            if not self._room.wait_for(lambda: self._buffered < MAX_BUFFERED or self._send_error is not None,
                                       timeout=self.retry_deadline_s):
                raise TimeoutError(f"no Produce answered within {self.retry_deadline_s} s")
            if self._send_error is not None:
                raise self._send_error
            self._buffered += size
        self._loop.call_soon_threadsafe(self._put, chunks)

    def _release(self, chunks: list[_Chunk], error: BaseException | None = None) -> None:
        """``chunks`` left the buffer (answered, failed or dropped); ``error``: the sending failed."""
        with self._room:
            self._buffered -= sum(len(c.batch) for c in chunks)
            if error is not None and self._send_error is None:
                self._send_error = error
            self._room.notify_all()

    def marker(self, topic: str, partition: int, key: bytes, value: bytes) -> None:
        """One record (the sink's commit marker) to ``topic``/``partition`` in this transaction."""
        tp = (topic, partition)
        seq = self._producer._sequences.get(tp, 0)
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True,
                                            producer_id=self._producer.producer_id,
                                            producer_epoch=self._producer.epoch, base_sequence=seq,
                                            batch_size=1 << 30)
        builder.append(0, timestamp=int(time.time() * 1000), key=key, value=value, headers=[])
        self._producer._sequences[tp] = seq + 1
        self._queue_chunks([_Chunk(topic, partition, seq, 1, bytes(builder.build()))])

    def flush(self) -> None:
        """Wait until every chunk written is acknowledged; the transaction stays open (``begin`` to
        write more)."""
        self._call(self._flush())

    def commit(self) -> None:
        """Wait for every chunk's acknowledgement, then EndTxn(commit)."""
        self._call(self._end(True))

    def abort(self) -> None:
        self._call(self._end(False))

    def prepare(self) -> PreparedTxnState:
        """``two_phase``: wait for every chunk's acknowledgement (acks=all, so the transaction is
        durable) and leave the transaction open; what completes it later (KIP-939's prepare)."""
        if not self.two_phase:
            raise RuntimeError("prepare() needs two_phase=True (InitProducerId with enable2Pc)")
        self._call(self._flush())
        return self._call(self._producer.prepare())

    def close(self) -> None:
        try:
            self._call(self._close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    def _chunk(self, topic: str, partition: int, count: int, records: bytes) -> _Chunk:
        p = self._producer
        tp = (topic, partition)
        seq = p._sequences.get(tp, 0)
        p._sequences[tp] = seq + count
        now = int(time.time() * 1000)
        if self._compress is not None:
            records = self._compress(records)
        head = _HEAD.pack(_TRANSACTIONAL | self._codec, count - 1, now, now, p.producer_id, p.epoch, seq, count)
        crc = crc32c(records, crc32c(head))
        pre = _PRE.pack(0, 49 + len(records), -1, 2, crc)
        return _Chunk(topic, partition, seq, count, b"".join((pre, head, records)))

    # --- the loop's side -----------------------------------------------------------------------

    async def _begin(self) -> None:
        if self._producer.producer_id < 0:
            raise RuntimeError("init() first")
        self._queue = asyncio.Queue()
        self._failed: list[tuple[_Chunk, int]] = []
        self._in_flight: set[asyncio.Future[None]] = set()
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._sender = asyncio.ensure_future(self._send_loop())

    def _put(self, item: list[_Chunk] | asyncio.Future[None]) -> None:
        assert self._queue is not None, "begin() first"
        self._queue.put_nowait(item)

    async def _send_loop(self) -> None:
        """Sends queued chunks in queue order (so each partition's sequence numbers go out in order).

        The first error (``_send_error``) stops the sending; the flush that ends the transaction
        raises it."""
        assert self._queue is not None
        while True:
            item = await self._queue.get()
            if isinstance(item, asyncio.Future):
                await asyncio.gather(*self._in_flight)
                try:
                    if self._send_error is not None:
                        raise self._send_error
                    await self._resend_failed()
                except BaseException as e:  # handed to the committing task
                    item.set_exception(e)
                else:
                    item.set_result(None)
                return
            if self._send_error is None:
                try:
                    await self._send(item)
                except Exception as e:
                    self._release(item, e)
            else:
                self._release(item)  # not sent: the transaction fails

    async def _send(self, item: list[_Chunk]) -> None:
        await self._producer.add_partitions((c.topic, c.partition) for c in item)
        p = self._producer
        by_leader: dict[tuple[str, int], list[_Chunk]] = {}
        for c in item:
            if (c.topic, c.partition) not in p._leaders:
                try:
                    await p._metadata(c.topic)  # once per topic
                except (ConnectionError, OSError, TwoPhaseError):  # the flush sends it again, with retries
                    self._failed.append((c, _LOST))
                    self._release([c])
                    continue
            by_leader.setdefault(p._leaders[(c.topic, c.partition)], []).append(c)
        for addr, chunks in by_leader.items():
            client = p._clients.get(addr)
            if client is not None and not client.connected:
                # Its requests in flight are lost: know which before a new connection sends chunks
                # that would overtake them in their partitions.
                await asyncio.gather(*self._in_flight)
            try:
                await p._client(addr)  # connected here, once: the requests below share the connection
            except (ConnectionError, OSError):  # the flush sends them again, with retries
                self._failed += [(c, _LOST) for c in chunks]
                self._release(chunks)
                continue
            blocked = {(c.topic, c.partition) for c, _ in self._failed}
            held = [c for c in chunks if (c.topic, c.partition) in blocked]
            self._failed += [(c, _HELD) for c in held]  # behind a failed chunk: sent after it, at the flush
            self._release(held)
            # A Produce request carries one batch per partition (Kafka refuses more): a partition's
            # second chunk goes in the next request, which follows on the same connection.
            requests: list[list[_Chunk]] = []
            seen: dict[tuple[str, int], int] = {}
            for c in chunks:
                tp = (c.topic, c.partition)
                if tp in blocked:
                    continue
                n = seen[tp] = seen.get(tp, -1) + 1
                if n == len(requests):
                    requests.append([])
                requests[n].append(c)
            for request in requests:
                await self._slots.acquire()
                fut = asyncio.ensure_future(self._produce(addr, request))
                self._in_flight.add(fut)
                fut.add_done_callback(self._in_flight.discard)

    async def _produce(self, addr: tuple[str, int], chunks: list[_Chunk]) -> None:
        """One Produce request; chunks not acknowledged go to ``_failed`` with their error code."""
        error = None
        try:
            for c, code in zip(chunks, await self._request(addr, chunks), strict=True):
                if code not in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
                    self._failed.append((c, code))
                    if code not in _SEND_AGAIN and code != ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
                        error = TwoPhaseError(f"Produce {c.topic}-{c.partition}", code)
        finally:
            self._slots.release()
            self._release(chunks, error)

    async def _request(self, addr: tuple[str, int], chunks: list[_Chunk], *, connect: bool = False) -> list[int]:
        """Error codes of ``chunks`` sent to the broker at ``addr`` in one Produce v9 request, on the
        connection the sender opened (``connect``: opening one if needed; only where requests go
        one at a time, since two connections would not keep a partition's chunks in order)."""
        P = ProduceRequest.TopicProduceData
        topics: dict[str, list[Any]] = {}
        for c in chunks:
            topics.setdefault(c.topic, []).append(P.PartitionProduceData(version=9, index=c.partition, records=c.batch))
        req = ProduceRequest(version=9, transactional_id=self.transactional_id, acks=-1, timeout_ms=30000,
                             topic_data=[P(version=9, name=t, partition_data=ps) for t, ps in topics.items()])
        try:
            client = await self._producer._client(addr) if connect else self._producer._clients.get(addr)
            if client is None:
                raise ConnectionError(f"no connection to {addr}")
            resp = await client.request(req, 9, timeout_s=self.retry_deadline_s)
        except (ConnectionError, OSError, TimeoutError):
            await self._forget(addr)
            return [_LOST] * len(chunks)
        codes = {(t.name, p.index): p.error_code for t in resp.responses for p in t.partition_responses}
        return [codes.get((c.topic, c.partition), ErrorCode.UNKNOWN_SERVER_ERROR) for c in chunks]

    async def _forget(self, addr: tuple[str, int]) -> None:
        """Close the connection to ``addr`` (kept in place, not connected: the sender sees it and
        waits for every request in flight before another connection sends anything)."""
        client = self._producer._clients.get(addr)
        if client is not None:
            await client.close()

    async def _resend_failed(self) -> None:
        """Send again, in each partition's sequence order, what was not acknowledged (module docstring)."""
        failed = sorted(self._failed, key=lambda f: (f[0].topic, f[0].partition, f[0].sequence))
        self._failed = []
        behind: set[tuple[str, int]] = set()  # partitions whose earlier chunk failed
        for chunk, code in failed:
            tp = (chunk.topic, chunk.partition)
            if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and tp not in behind:
                raise TwoPhaseError(f"Produce {tp[0]}-{tp[1]}", code)
            if code not in _SEND_AGAIN and code != ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
                raise TwoPhaseError(f"Produce {tp[0]}-{tp[1]}", code)
            behind.add(tp)
            deadline = time.monotonic() + self.retry_deadline_s
            backoff = 0.05
            while True:
                self._producer._leaders.pop(tp, None)
                try:
                    await self._producer._leader(*tp)
                except TwoPhaseError:
                    code = ErrorCode.LEADER_NOT_AVAILABLE
                except OSError:  # the leader (or bootstrap) not reachable yet: try again
                    code = _LOST
                else:
                    [code] = await self._request(self._producer._leaders[tp], [chunk], connect=True)
                if code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
                    break
                if code not in _SEND_AGAIN or time.monotonic() > deadline:
                    raise TwoPhaseError(f"Produce {tp[0]}-{tp[1]}", code)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    async def _flush(self) -> None:
        if self._sender is None:
            return
        done: asyncio.Future[None] = self._loop.create_future()
        self._put(done)
        try:
            await done
        finally:
            await self._sender
            self._sender = None
            self._queue = None

    async def _end(self, commit: bool) -> None:
        try:
            await self._flush()
        except BaseException:
            if commit:
                raise
        await self._producer._end(commit)

    async def _close(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
            for fut in list(self._in_flight):
                fut.cancel()
        await self._producer.close()

