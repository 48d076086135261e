"""Hand-written codecs for the two record-bearing messages (ProduceRequest, FetchResponse), a
follower's FetchRequest, and the Metadata response.

kafka-python's generic codec copies the records field when decoding and again when encoding.
Here a ProduceRequest's records come out as memoryviews into the request frame (writable when
the frame is a bytearray, so offsets are patched in place), and a FetchResponse is produced as a
list of chunks in which the record bytes read from segments are passed through untouched.
Layouts follow Kafka's ProduceRequest.json (v3-v12) and FetchResponse.json (v4-v17); unit tests
check them byte for byte against kafka-python's encoder.
"""

from __future__ import annotations

import struct
from collections.abc import Sized
from dataclasses import dataclass

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_PROD_HEAD = struct.Struct(">hi")  # acks, timeout_ms


class DecodeError(ValueError):
    pass


def _uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 35:
            raise DecodeError("varint too long")


def _skip_tags(buf: memoryview, pos: int) -> int:
    n, pos = _uvarint(buf, pos)
    for _ in range(n):
        _, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        pos += size
    return pos


def _enc_uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@dataclass(slots=True)
class ProducePartition:
    index: int
    records: memoryview | None


@dataclass(slots=True)
class ProduceTopic:
    name: str
    partition_data: list[ProducePartition]


@dataclass(slots=True)
class ProduceRequestData:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[ProduceTopic]


def decode_produce_request(body: memoryview, version: int) -> ProduceRequestData:
    """Decode ProduceRequest v3-v12; records stay views into ``body``."""
    try:
        return _decode_produce(body, version)
    except (IndexError, struct.error, UnicodeDecodeError) as e:
        raise DecodeError(f"malformed ProduceRequest v{version}: {e}") from None


def _decode_produce(buf: memoryview, version: int) -> ProduceRequestData:
    flexible = version >= 9
    end = len(buf)
    pos = 0

    def string(nullable: bool, name: str) -> str | None:
        nonlocal pos
        if flexible:
            n, pos = _uvarint(buf, pos)
            n -= 1
        else:
            n = _I16.unpack_from(buf, pos)[0]
            pos += 2
        if n < 0:
            if not nullable:
                raise DecodeError(f"non-nullable field {name} was serialized as null")
            return None
        if pos + n > end:
            raise DecodeError("string past end of request")
        s = str(buf[pos : pos + n], "utf-8")
        pos += n
        return s

    def count(name: str) -> int:
        # topic_data and partition_data are not nullable in any version (ProduceRequest.json).
        nonlocal pos
        if flexible:
            n, pos = _uvarint(buf, pos)
            n -= 1
        else:
            n = _I32.unpack_from(buf, pos)[0]
            pos += 4
        if n < 0:
            raise DecodeError(f"non-nullable field {name} was serialized as null")
        return n

    txn_id = string(True, "TransactionalId")
    acks, timeout = _PROD_HEAD.unpack_from(buf, pos)
    pos += 6
    topics = []
    for _ in range(count("TopicData")):
        name = string(False, "TopicData[].Name")
        parts = []
        for _ in range(count("TopicData[].PartitionData")):
            index = _I32.unpack_from(buf, pos)[0]
            pos += 4
            if flexible:
                n, pos = _uvarint(buf, pos)
                n -= 1
            else:
                n = _I32.unpack_from(buf, pos)[0]
                pos += 4
            if n < 0:
                records = None
            else:
                if pos + n > end:
                    raise DecodeError("records past end of request")
                records = buf[pos : pos + n]
                pos += n
            if flexible:
                pos = _skip_tags(buf, pos)
            parts.append(ProducePartition(index, records))
        if flexible:
            pos = _skip_tags(buf, pos)
        topics.append(ProduceTopic(name, parts))  # type: ignore[arg-type]  # not None: non-nullable
    if flexible:
        pos = _skip_tags(buf, pos)
    return ProduceRequestData(txn_id, acks, timeout, topics)


# --- FetchRequest v12 (a follower's) ---------------------------------------------------------------


@dataclass(slots=True)
class EncodedRequest:
    """A request body encoded by hand, for protocol.client.ProtocolClient.request (which asks an
    ApiMessage for API_KEY and encode(version))."""

    API_KEY: int
    version: int
    body: bytes

    def encode(self, version: int) -> bytes:
        if version != self.version:
            raise ValueError(f"encoded at v{self.version}, asked for v{version}")
        return self.body


_FETCH_REQ_HEAD = struct.Struct(">iiiibii")  # replica_id, max_wait_ms, min_bytes, max_bytes, isolation, session id, epoch
_FETCH_REQ_PART = struct.Struct(">iiqiqi")  # partition, current_leader_epoch, fetch_offset, last_fetched_epoch,
#                                             log_start_offset, partition_max_bytes (then an empty tag section)


def encode_fetch_request_v12(replica_id: int, max_wait_ms: int, min_bytes: int, max_bytes: int, isolation_level: int,
                             session_id: int, session_epoch: int,
                             topics: list[tuple[str, list[tuple[int, int, int, int, int, int]]]],
                             forgotten: list[tuple[str, list[int]]], rack_id: str = "") -> EncodedRequest:
    """FetchRequest v12 body (Kafka's FetchRequest.json; no tagged fields set: ClusterId stays
    null) as a follower's fetcher sends it, every fetch, without one kafka-python struct object
    per topic and partition. ``topics``: (name, [(partition, current_leader_epoch, fetch_offset,
    last_fetched_epoch, log_start_offset, partition_max_bytes)]); ``forgotten``: (name, [partition])."""
    out = bytearray(_FETCH_REQ_HEAD.pack(replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level,
                                         session_id, session_epoch))
    out += _enc_uvarint(len(topics) + 1)
    pack = _FETCH_REQ_PART.pack
    for name, parts in topics:
        out += _compact_str(name)
        out += _enc_uvarint(len(parts) + 1)
        for part in parts:
            out += pack(*part)
            out.append(0)  # partition tagged fields
        out.append(0)  # topic tagged fields
    out += _enc_uvarint(len(forgotten) + 1)
    for name, indexes in forgotten:
        out += _compact_str(name)
        out += _int32s(indexes, True)
        out.append(0)
    out += _compact_str(rack_id)
    out.append(0)  # request tagged fields
    return EncodedRequest(1, 12, bytes(out))


# --- FetchResponse ------------------------------------------------------------------------------


@dataclass(slots=True)
class FetchPartitionOut:
    index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: list[tuple[int, int]] | None  # (producer_id, first_offset); None = null
    records: bytes | memoryview | Sized  # Sized: a storage.log.FileSlice, passed through to the writer
    # v12+ tagged fields: DivergingEpoch (tag 0, a follower's log diverges: (epoch, end offset))
    # and CurrentLeader (tag 1, KIP-951: (leader id, leader epoch) with NOT_LEADER_OR_FOLLOWER).
    diverging_epoch: tuple[int, int] | None = None
    current_leader: tuple[int, int] | None = None


_PART_HEAD = struct.Struct(">ihqqq")
_PART_HEAD_V4 = struct.Struct(">ihqq")
_ABORTED = struct.Struct(">qq")
_FETCH_HEAD = struct.Struct(">ihi")


def _tagged(fields: list[tuple[int, bytes]]) -> bytes:
    """A tagged-field section: count, then (tag, size, bytes) in tag order."""
    out = bytearray(_enc_uvarint(len(fields)))
    for tag, data in fields:
        out += _enc_uvarint(tag) + _enc_uvarint(len(data)) + data
    return bytes(out)


def _compact_str(value: str | None) -> bytes:
    if value is None:
        return b"\0"
    raw = value.encode()
    return _enc_uvarint(len(raw) + 1) + raw


def encode_fetch_response(version: int, error_code: int, session_id: int,
                          topics: list[tuple[str | None, object, list[FetchPartitionOut]]],
                          node_endpoints: list[tuple[int, str, int, str | None]] | None = None,
                          ) -> list[bytes | memoryview | Sized]:
    """FetchResponse v4-v17 body as chunks (record chunks as given: bytes, or file slices for
    the server to send from the file); ``topics`` holds (name, topic_id uuid, partitions);
    ``node_endpoints`` (v16+, KIP-951): (node id, host, port, rack) of leaders named in
    CurrentLeader fields."""
    flexible = version >= 12
    out: list[bytes | memoryview | Sized] = []
    head = bytearray()
    if version >= 7:
        head += _FETCH_HEAD.pack(0, error_code, session_id)
    else:
        head += _I32.pack(0)
    head += _enc_uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics))
    for name, topic_id, parts in topics:
        if version >= 13:
            head += topic_id.bytes if topic_id is not None else b"\0" * 16  # type: ignore[attr-defined]
        else:
            raw = (name or "").encode()
            head += (_enc_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw
        head += _enc_uvarint(len(parts) + 1) if flexible else _I32.pack(len(parts))
        for p in parts:
            if version >= 5:
                head += _PART_HEAD.pack(p.index, p.error_code, p.high_watermark, p.last_stable_offset,
                                        p.log_start_offset)
            else:
                head += _PART_HEAD_V4.pack(p.index, p.error_code, p.high_watermark, p.last_stable_offset)
            if p.aborted is None:
                head += b"\0" if flexible else _I32.pack(-1)
            else:
                head += _enc_uvarint(len(p.aborted) + 1) if flexible else _I32.pack(len(p.aborted))
                for pid, first in p.aborted:
                    head += _ABORTED.pack(pid, first)
                    if flexible:
                        head += b"\0"
            if version >= 11:
                head += _I32.pack(-1)  # preferred_read_replica
            n = len(p.records)
            head += _enc_uvarint(n + 1) if flexible else _I32.pack(n)
            if n:
                out.append(bytes(head))
                out.append(p.records)
                head = bytearray()
            if flexible:
                tags = []
                if p.diverging_epoch is not None:
                    tags.append((0, _I32.pack(p.diverging_epoch[0]) + _I64.pack(p.diverging_epoch[1]) + b"\0"))
                if p.current_leader is not None:
                    tags.append((1, _I32.pack(p.current_leader[0]) + _I32.pack(p.current_leader[1]) + b"\0"))
                head += _tagged(tags) if tags else b"\0"  # partition tagged fields
        if flexible:
            head += b"\0"  # topic tagged fields
    if flexible:
        if node_endpoints and version >= 16:
            body = bytearray(_enc_uvarint(len(node_endpoints) + 1))
            for node, host, port, rack in node_endpoints:
                body += _I32.pack(node) + _compact_str(host) + _I32.pack(port) + _compact_str(rack) + b"\0"
            head += _tagged([(0, bytes(body))])
        else:
            head += b"\0"  # top-level tagged fields
    out.append(bytes(head))
    return out


# --- FetchResponse, decoded (a follower's fetcher) ------------------------------------------------


@dataclass(slots=True)
class DivergingEpoch:
    epoch: int
    end_offset: int


@dataclass(slots=True)
class FetchPartitionIn:
    """One partition of a decoded FetchResponse, with kafka-python's attribute names (the fetcher
    reads either); ``records`` is a memoryview into the response frame, not a copy."""

    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[tuple[int, int]] | None
    records: memoryview | None
    diverging_epoch: DivergingEpoch | None = None
    current_leader: tuple[int, int] | None = None


@dataclass(slots=True)
class FetchTopicIn:
    topic: str
    partitions: list[FetchPartitionIn]


@dataclass(slots=True)
class FetchResponseIn:
    throttle_time_ms: int
    error_code: int
    session_id: int
    responses: list[FetchTopicIn]


_FETCH_HEAD_IN = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id
_PART_HEAD_IN = struct.Struct(">ihqqq")
_DIVERGING = struct.Struct(">iq")
_LEADER = struct.Struct(">ii")


def decode_fetch_response(body: memoryview, version: int) -> FetchResponseIn:
    """FetchResponse v12 (what kbroker's follower fetchers send, by topic name) without copying
    the records. Other versions are left to kafka-python's codec."""
    if version != 12:
        raise DecodeError(f"decode_fetch_response handles v12, not v{version}")
    try:
        return _decode_fetch_v12(body)
    except (IndexError, struct.error) as e:
        raise DecodeError(f"truncated FetchResponse v12: {e}") from None


def _decode_fetch_v12(buf: memoryview) -> FetchResponseIn:
    throttle, error, session = _FETCH_HEAD_IN.unpack_from(buf, 0)
    pos = _FETCH_HEAD_IN.size
    n_topics, pos = _uvarint(buf, pos)
    topics = []
    for _ in range(n_topics - 1):
        n, pos = _uvarint(buf, pos)
        name = bytes(buf[pos:pos + n - 1]).decode()
        pos += n - 1
        n_parts, pos = _uvarint(buf, pos)
        parts = []
        for _ in range(n_parts - 1):
            index, code, hw, lso, log_start = _PART_HEAD_IN.unpack_from(buf, pos)
            pos += _PART_HEAD_IN.size
            n_aborted, pos = _uvarint(buf, pos)
            aborted = None
            if n_aborted:
                aborted = []
                for _ in range(n_aborted - 1):
                    aborted.append(_ABORTED.unpack_from(buf, pos))
                    pos = _skip_tags(buf, pos + _ABORTED.size)
            pos += 4  # preferred_read_replica
            size, pos = _uvarint(buf, pos)
            records = None
            if size:
                records = buf[pos:pos + size - 1]
                if len(records) != size - 1:
                    raise DecodeError("records past the end of the response")
                pos += size - 1
            p = FetchPartitionIn(index, code, hw, lso, log_start, aborted, records)
            n_tags, pos = _uvarint(buf, pos)
            for _ in range(n_tags):
                tag, pos = _uvarint(buf, pos)
                tag_size, pos = _uvarint(buf, pos)
                if tag == 0:
                    p.diverging_epoch = DivergingEpoch(*_DIVERGING.unpack_from(buf, pos))
                elif tag == 1:
                    p.current_leader = _LEADER.unpack_from(buf, pos)
                pos += tag_size
            parts.append(p)
        pos = _skip_tags(buf, pos)  # topic tagged fields
        topics.append(FetchTopicIn(name, parts))
    _skip_tags(buf, pos)  # top-level tagged fields (node endpoints)
    return FetchResponseIn(throttle, error, session, topics)


# --- MetadataResponse ----------------------------------------------------------------------------

# (error_code, partition_index, leader_id, leader_epoch, replica_nodes, isr_nodes, offline_replicas)
MetadataPartitionOut = tuple[int, int, int, int, list[int], list[int], list[int]]
# (error_code, name, topic_id (uuid or None), is_internal, partitions, authorized_operations)
MetadataTopicOut = tuple[int, "str | None", object, bool, list[MetadataPartitionOut], int]

_INT32_MIN = -(2**31)
_PART_META = struct.Struct(">hiii")
_PART_META_V0 = struct.Struct(">hii")


def _str(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\0" if flexible else _I16.pack(-1)
    raw = value.encode()
    return (_enc_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw


def _count(n: int, flexible: bool) -> bytes:
    return _enc_uvarint(n + 1) if flexible else _I32.pack(n)


def _int32s(values: list[int], flexible: bool) -> bytes:
    return _count(len(values), flexible) + struct.pack(f">{len(values)}i", *values)


def encode_metadata_response(version: int, brokers: list[tuple[int, str, int, str | None]], cluster_id: str | None,
                             controller_id: int, topics: list[MetadataTopicOut],
                             cluster_authorized_operations: int = _INT32_MIN) -> bytes:
    """MetadataResponse v0-v12 body (Kafka's MetadataResponse.json) from plain tuples: a response
    for ten thousand partitions is built in a few milliseconds instead of through one generic
    struct object per partition. Authorized operations of INT32_MIN mean "not requested"."""
    flexible = version >= 9
    out = bytearray()
    if version >= 3:
        out += _I32.pack(0)  # throttle_time_ms
    out += _count(len(brokers), flexible)
    for node, host, port, rack in brokers:
        out += _I32.pack(node) + _str(host, flexible) + _I32.pack(port)
        if version >= 1:
            out += _str(rack, flexible)
        if flexible:
            out += b"\0"
    if version >= 2:
        out += _str(cluster_id, flexible)
    if version >= 1:
        out += _I32.pack(controller_id)
    out += _count(len(topics), flexible)
    tags = b"\0" if flexible else b""
    for error, name, topic_id, internal, parts, ops in topics:
        out += _I16.pack(error) + _str(name, flexible)
        if version >= 10:
            out += topic_id.bytes if topic_id is not None else bytes(16)  # type: ignore[attr-defined]
        if version >= 1:
            out.append(1 if internal else 0)
        out += _count(len(parts), flexible)
        for p_error, index, leader, epoch, replicas, isr, offline in parts:
            if version >= 7:
                out += _PART_META.pack(p_error, index, leader, epoch)
            else:
                out += _PART_META_V0.pack(p_error, index, leader)
            out += _int32s(replicas, flexible) + _int32s(isr, flexible)
            if version >= 5:
                out += _int32s(offline, flexible)
            out += tags
        if version >= 8:
            out += _I32.pack(ops)
        out += tags
    if 8 <= version <= 10:
        out += _I32.pack(cluster_authorized_operations)
    out += tags
    return bytes(out)
