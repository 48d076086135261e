"""The Spark source's raw range reader (issue 32): the records of an offset range fetched over a plain
socket and decoded by the compiled ``spark_jobs._record_columns`` straight into Arrow buffers, with
no librdkafka ``Message`` and no Python object per record.

``kafka_io.read_range`` uses it when :func:`usable` says so: the compiled decoder imports (it does
not on executors that received only the shipped zip, which holds no compiled code), the query's
``kafka.security.protocol`` is PLAINTEXT (no TLS or SASL to speak here), record headers are not
asked for (``includeHeaders``), and the source option ``rawReader`` is not false (``wanted``).

It reads as Kafka's consumer reads (the Fetcher's rules): Metadata names the partition's leader;
FetchRequest v12 at the query's ``kafka.isolation.level`` (read_committed unless set), no fetch
session; batches wholly below the fetch position are skipped; under read_committed a batch with a
producer id first adds to the aborted set every aborted transaction of the answer starting at or
before its last offset, an ABORT marker takes its producer out of the set, and a transactional
batch of a producer in the set is dropped; control batches are skipped; compressed batches are
decoded whole with the codec libraries the broker uses (gzip, snappy raw or xerial-framed, lz4
frames, zstd). CRCs are not checked (librdkafka's ``check.crcs`` is off by default too; a query that
sets it reads through librdkafka); a batch of an older format (magic < 2) hands over to librdkafka.
Batch headers are parsed here, not with storage.batch: design.md keeps ``spark_jobs`` (shipped to
executors) off the broker's ``storage`` package.

Anything but a plain answer ends the raw read with :class:`Fallback`: an error code (leader moved,
offset out of range, ...), a broker that cannot be reached or answers what cannot be decoded, or an
answer with no records while the range is unfinished. ``read_range`` then reads the rest of the
range, from :attr:`RawRangeReader.next_offset`, through librdkafka, which has the rules for those
cases (data loss, leader changes, timeouts). Rows are handed out only per whole fetched batch, and
``next_offset`` only moves past what was handed out, so nothing is read twice or skipped.
"""

from __future__ import annotations

import socket
import struct
import zlib
from collections.abc import Iterator, Mapping

import pyarrow as pa
from kafka.protocol.metadata import MetadataRequest
from kafka.record.util import decode_varint as _varint  # Kafka's zigzag varint: (value, next position)

from protocol.api_table import get_spec
from protocol.fast_codecs import DecodeError, decode_fetch_response, encode_fetch_request_v12
from protocol.headers import encode_request

try:
    from spark_jobs._record_columns import Columns
except ImportError:  # not built, or running from the shipped zip
    Columns = None

API_METADATA, API_FETCH = 3, 1
METADATA_VERSION, FETCH_VERSION = 12, 12
READ_COMMITTED = 1
FETCH_MAX_BYTES = 64 * 1024 * 1024  # as range_consumer_config's fetch.max.bytes
PARTITION_MAX_BYTES = 4 * 1024 * 1024  # and max.partition.fetch.bytes
FETCH_MAX_WAIT_MS = 100  # and fetch.wait.max.ms
# A v2 record batch's fixed header (Kafka's DefaultRecordBatch): base offset, batch length, partition
# leader epoch, magic, CRC, attributes, last offset delta, base and max timestamps, producer id and
# epoch, base sequence, record count.
_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = _HEADER.size  # 61
LOG_OVERHEAD = 12  # base offset + batch length: not counted in the batch length
_COMPRESSION, _TIMESTAMP_TYPE, _TRANSACTIONAL, _CONTROL = 0x07, 0x08, 0x10, 0x20
CONTROL_TYPE_ABORT = 0
_XERIAL = b"\x82SNAPPY\x00"
SOCKET_TIMEOUT_S = 30.0
CLIENT_ID = "kbroker-spark-raw-reader"

_TS_US = pa.timestamp("us", tz="UTC")


class Fallback(Exception):  # noqa: N818 - a signal to read_range, not an error of the query
    """The raw read stops here; the rest of the range goes through librdkafka."""


def usable(conf: Mapping[str, str], include_headers: bool, wanted: bool = True) -> bool:
    """Whether the raw reader can serve a range read with these settings (see the module docstring)."""
    if Columns is None or include_headers or not wanted:
        return False
    if str(conf.get("check.crcs", "false")).lower() == "true":
        return False  # asked for CRC checks: librdkafka makes them
    return str(conf.get("security.protocol", "plaintext")).lower() == "plaintext"


def bootstrap_addresses(conf: Mapping[str, str]) -> list[tuple[str, int]]:
    """The (host, port) entries of ``bootstrap.servers`` (listener prefixes and IPv6 brackets dropped)."""
    out = []
    for item in str(conf.get("bootstrap.servers", "")).split(","):
        item = item.strip()
        if "://" in item:
            item = item.split("://", 1)[1]
        host, _, port = item.rpartition(":")
        if host and port.isdigit():
            out.append((host.strip("[]"), int(port)))
    return out


class _Connection:
    """One blocking connection, one request at a time."""

    def __init__(self, host: str, port: int) -> None:
        self.address = (host, port)
        self.sock = socket.create_connection((host, port), timeout=SOCKET_TIMEOUT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._corr = 0

    def request(self, api_key: int, version: int, body: bytes) -> memoryview:
        """The response body (after the flexible response header every request here has)."""
        self._corr += 1
        self.sock.sendall(encode_request(api_key, version, self._corr, CLIENT_ID, body, True))
        size = struct.unpack(">i", self._read(4))[0]
        frame = self._read(size)
        if struct.unpack_from(">i", frame, 0)[0] != self._corr:
            raise Fallback("answer to another request")
        return memoryview(frame)[5:]  # correlation id, empty tagged fields

    def _read(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if k == 0:
                raise Fallback("connection closed by the broker")
            got += k
        return buf

    def close(self) -> None:
        self.sock.close()


def _leader_address(conn: _Connection, topic: str, partition: int) -> tuple[str, int]:
    req = MetadataRequest(version=METADATA_VERSION, topics=[MetadataRequest.MetadataRequestTopic(
        version=METADATA_VERSION, topic_id=None, name=topic)], allow_auto_topic_creation=False,
        include_topic_authorized_operations=False)
    body = conn.request(API_METADATA, METADATA_VERSION, bytes(req.encode(version=METADATA_VERSION)))
    spec = get_spec(API_METADATA)
    assert spec is not None
    resp = spec.response.decode(body, version=METADATA_VERSION)
    brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
    for t in resp.topics:
        if t.name != topic or t.error_code:
            continue
        for p in t.partitions:
            if p.partition_index == partition and not p.error_code and p.leader_id in brokers:
                return brokers[p.leader_id]
    raise Fallback(f"no leader known for {topic}-{partition}")


def _first_offset(aborted: tuple[int, int]) -> int:
    return aborted[1]  # (producer id, first offset)


class _Batch:
    """What the reader needs of one batch's header, and where the batch sits in the answer."""

    __slots__ = ("position", "size", "base_offset", "next_offset", "last_offset", "attributes", "base_timestamp",
                 "max_timestamp", "producer_id", "records_count")

    def __init__(self, position: int, fields: tuple) -> None:
        (self.base_offset, length, _epoch, _magic, _crc, self.attributes, last_delta, self.base_timestamp,
         self.max_timestamp, self.producer_id, _pepoch, _seq, self.records_count) = fields
        self.position, self.size = position, length + LOG_OVERHEAD
        self.last_offset = self.base_offset + last_delta
        self.next_offset = self.last_offset + 1


def _batches(records: memoryview) -> Iterator[_Batch]:
    """The whole v2 batches of a fetch answer's records, in order (a trailing partial one is left out,
    as consumers do: the next fetch starts there)."""
    pos, n = 0, len(records)
    while n - pos >= HEADER_SIZE:
        fields = _HEADER.unpack_from(records, pos)
        if fields[3] != 2:
            raise Fallback(f"a batch of message format {fields[3]} at offset {fields[0]}")
        if fields[1] < HEADER_SIZE - LOG_OVERHEAD or pos + fields[1] + LOG_OVERHEAD > n:
            return
        b = _Batch(pos, fields)
        yield b
        pos += b.size


def _decompress(codec: int, payload: memoryview) -> bytes:
    """A compressed batch's records section, decoded whole."""
    try:
        if codec == 1:
            return zlib.decompress(payload, 16 + zlib.MAX_WBITS)
        if codec == 2:
            import cramjam

            data = bytes(payload)
            if not data.startswith(_XERIAL):
                return bytes(cramjam.snappy.decompress_raw(data))
            out, pos = [], 16  # magic, version, compatible version; then (length, block) pairs
            while pos < len(data):
                size = int.from_bytes(data[pos:pos + 4], "big")
                out.append(bytes(cramjam.snappy.decompress_raw(data[pos + 4:pos + 4 + size])))
                pos += 4 + size
            return b"".join(out)
        if codec == 3:
            import lz4.frame

            return lz4.frame.decompress(payload)
        if codec == 4:
            import zstandard

            out, rest = [], bytes(payload)
            while rest:  # one frame per decompressobj; a payload may hold several
                d = zstandard.ZstdDecompressor().decompressobj()
                out.append(d.decompress(rest))
                rest = d.unused_data
            return b"".join(out)
    except Exception as e:  # noqa: BLE001 - each library has its own errors; librdkafka decides
        raise Fallback(f"undecodable codec {codec} payload: {type(e).__name__}: {e}") from None
    raise Fallback(f"unknown compression codec {codec}")


def _is_abort_marker(records: memoryview, batch: _Batch) -> bool:
    """Whether a control batch is an ABORT marker (its one record's key: version, type)."""
    pos = batch.position + HEADER_SIZE
    _, pos = _varint(records, pos)  # record length
    pos += 1  # attributes
    _, pos = _varint(records, pos)  # timestamp delta
    _, pos = _varint(records, pos)  # offset delta
    klen, pos = _varint(records, pos)
    if klen < 4:
        return False
    return struct.unpack_from(">h", records, pos + 2)[0] == CONTROL_TYPE_ABORT


class RawRangeReader:
    """Reads ``topic``/``partition`` offsets [start, end) as Arrow batches of ``schema`` (the source's
    schema without headers). ``next_offset``: where a librdkafka read would continue after a Fallback."""

    def __init__(self, conf: Mapping[str, str], topic: str, partition: int, start: int, end: int,
                 schema: pa.Schema, batch_rows: int) -> None:
        self.conf, self.topic, self.partition = conf, topic, partition
        self.next_offset, self.end = start, end
        self.schema, self.batch_rows = schema, batch_rows
        # kafka.isolation.level (the source defaults it to read_committed); read_uncommitted sees
        # aborted transactions' records too (control batches stay hidden, as in Kafka's consumer).
        self.isolation = 0 if str(conf.get("isolation.level", "read_committed")).lower() == "read_uncommitted" \
            else READ_COMMITTED
        self._conn: _Connection | None = None

    def _connect(self) -> _Connection:
        errors = []
        for host, port in bootstrap_addresses(self.conf):
            try:
                conn = _Connection(host, port)
            except OSError as e:
                errors.append(f"{host}:{port}: {e}")
                continue
            try:
                leader = _leader_address(conn, self.topic, self.partition)
                if leader == conn.address:
                    return conn
                conn.close()
                return _Connection(*leader)
            except BaseException:
                conn.close()
                raise
        raise Fallback(f"no bootstrap server answered ({'; '.join(errors) or 'none configured'})")

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Arrow batches until the range is read; raises Fallback (or OSError) where librdkafka must go on."""
        assert Columns is not None
        cols = Columns()
        try:
            self._conn = self._connect()
            aborted_producers: set[int] = set()
            while self.next_offset < self.end:
                request = encode_fetch_request_v12(
                    -1, FETCH_MAX_WAIT_MS, 1, FETCH_MAX_BYTES, self.isolation, 0, -1,
                    [(self.topic, [(self.partition, -1, self.next_offset, -1, -1, PARTITION_MAX_BYTES)])], [])
                part = self._fetch(request.body)
                records = part.records
                if not records:
                    raise Fallback(f"no records at offset {self.next_offset} (high watermark {part.high_watermark}, "
                                   f"last stable offset {part.last_stable_offset})")
                before = self.next_offset
                yield from self._decode(records, part.aborted_transactions or [], aborted_producers, cols)
                if self.next_offset == before:
                    raise Fallback(f"an answer with no whole batch at offset {before}")
        finally:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _fetch(self, body: bytes):  # noqa: ANN202 - protocol.fast_codecs.FetchPartitionIn
        assert self._conn is not None
        try:
            resp = decode_fetch_response(self._conn.request(API_FETCH, FETCH_VERSION, body), FETCH_VERSION)
        except DecodeError as e:
            raise Fallback(f"undecodable fetch answer: {e}") from None
        if resp.error_code:
            raise Fallback(f"fetch answered error {resp.error_code}")
        for t in resp.responses:
            for p in t.partitions:
                if t.topic == self.topic and p.partition_index == self.partition:
                    if p.error_code:
                        raise Fallback(f"fetch of {self.topic}-{self.partition} answered error {p.error_code}")
                    return p
        raise Fallback("fetch answer without the partition")

    def _decode(self, records: memoryview, aborted: list[tuple[int, int]], aborted_producers: set[int],
                cols) -> Iterator[pa.RecordBatch]:  # noqa: ANN001 - spark_jobs._record_columns.Columns
        aborted = sorted(aborted, key=_first_offset)  # the answer's (producer id, first offset) pairs
        pending = 0  # index into aborted of the next one not yet taken in
        pos = self.next_offset  # read up to here; next_offset moves only past rows handed out
        for h in _batches(records):
            if h.last_offset < pos:
                continue
            if pos >= self.end:
                break
            control = h.attributes & _CONTROL
            if h.producer_id >= 0 and self.isolation == READ_COMMITTED:
                while pending < len(aborted) and aborted[pending][1] <= h.last_offset:
                    aborted_producers.add(aborted[pending][0])
                    pending += 1
                if control:
                    if _is_abort_marker(records, h):
                        aborted_producers.discard(h.producer_id)
                elif h.attributes & _TRANSACTIONAL and h.producer_id in aborted_producers:
                    pos = h.next_offset  # an aborted transaction's records: dropped
                    if not cols.rows():
                        self.next_offset = pos
                    continue
            if not control and h.records_count:
                start, stop = h.position + HEADER_SIZE, h.position + h.size
                data: bytes | memoryview = records
                codec = h.attributes & _COMPRESSION
                if codec:
                    data = _decompress(codec, records[start:stop])
                    start, stop = 0, len(data)
                lat = h.max_timestamp if h.attributes & _TIMESTAMP_TYPE else -1
                try:
                    cols.add(data, start, stop, h.records_count, h.base_offset, h.base_timestamp, lat, pos, self.end)
                except ValueError as e:
                    raise Fallback(f"batch at offset {h.base_offset}: {e}") from None
            pos = h.next_offset
            if cols.rows() >= self.batch_rows:
                yield self._arrow(cols)
            if not cols.rows():
                self.next_offset = pos
        if cols.rows():
            yield self._arrow(cols)
            self.next_offset = pos

    def _arrow(self, cols) -> pa.RecordBatch:  # noqa: ANN001 - spark_jobs._record_columns.Columns
        n, offs, stamps, types, kvalid, koffs, kdata, vvalid, voffs, vdata = cols.finish()
        buf = pa.py_buffer

        def binary(valid: bytes | None, offsets: bytes, data: bytes) -> pa.Array:
            return pa.Array.from_buffers(pa.binary(), n, [None if valid is None else buf(valid), buf(offsets),
                                                          buf(data)])

        arrays = [
            binary(kvalid, koffs, kdata),
            binary(vvalid, voffs, vdata),
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            pa.Array.from_buffers(pa.int64(), n, [None, buf(offs)]),
            pa.Array.from_buffers(_TS_US, n, [None, buf(stamps)]),
            pa.Array.from_buffers(pa.int32(), n, [None, buf(types)]),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
