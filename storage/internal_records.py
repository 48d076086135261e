"""Kafka's coordinator record schemas (__consumer_offsets, __transaction_state, __share_group_state),
encode and decode.

A record's key starts with an int16 "record type" (Kafka's key version), which picks the key and
value schema; the value starts with its own int16 schema version. Schemas are tables of
``Field``s mirroring Kafka's JSON message definitions (versions, nullable versions, tagged
fields, nested structs), so adding a record type is adding a table, not writing a codec.
Used by the group coordinator (write + replay), the transaction coordinator, the share coordinator
and ``dump-log``.
"""

from __future__ import annotations

import base64
import json
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_TOPIC = "__transaction_state"
SHARE_STATE_TOPIC = "__share_group_state"

# __consumer_offsets record types (the key's version prefix).
OFFSET_COMMIT_LEGACY = 0
OFFSET_COMMIT = 1
GROUP_METADATA = 2
# KIP-848 consumer groups (Kafka 3.9 / 4.0 layouts).
CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
CONSUMER_GROUP_REGULAR_EXPRESSION = 16
# KIP-932 share groups (Kafka 4.1 / 4.2 layouts).
SHARE_GROUP_MEMBER_METADATA = 10
SHARE_GROUP_METADATA = 11
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
SHARE_GROUP_STATE_PARTITION_METADATA = 15

# __share_group_state record types (the share coordinator's).
SHARE_SNAPSHOT = 0
SHARE_UPDATE = 1


# --- schema tables -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Field:
    """One schema field. ``type``: int8/16/32/64, bool, string, bytes, uuid, []int32, []string,
    struct or []struct (with ``fields``). Versions are inclusive ranges, ``hi`` None = open."""

    name: str
    type: str
    lo: int = 0
    hi: int | None = None
    nullable_lo: int | None = None  # first version where null is allowed
    default: Any = None
    tag: int | None = None  # tagged field (flexible versions only)
    fields: tuple[Field, ...] = ()

    def present(self, version: int) -> bool:
        return self.lo <= version and (self.hi is None or version <= self.hi)

    def nullable(self, version: int) -> bool:
        return self.nullable_lo is not None and version >= self.nullable_lo


def F(name: str, type_: str, versions: str = "0+", *, nullable: str | None = None, default: Any = None,
      tag: int | None = None, fields: tuple[Field, ...] = ()) -> Field:
    lo, hi = _versions(versions)
    nlo = None if nullable is None else _versions(nullable)[0]
    return Field(name, type_, lo, hi, nlo, default, tag, fields)


def _versions(spec: str) -> tuple[int, int | None]:
    if spec.endswith("+"):
        return int(spec[:-1]), None
    if "-" in spec:
        a, b = spec.split("-")
        return int(a), int(b)
    return int(spec), int(spec)


@dataclass(frozen=True, slots=True)
class Schema:
    name: str
    fields: tuple[Field, ...]
    max_version: int
    first_flexible: int | None = None  # None: never flexible

    def flexible(self, version: int) -> bool:
        return self.first_flexible is not None and version >= self.first_flexible


# --- primitive codec -----------------------------------------------------------------------------


class _Reader:
    def __init__(self, buf: bytes | memoryview, pos: int = 0) -> None:
        self.buf = bytes(buf)
        self.pos = pos

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError(f"buffer underflow reading {n} bytes at {self.pos}")
        v = self.buf[self.pos:self.pos + n]
        self.pos += n
        return v

    def unpack(self, fmt: str) -> Any:
        s = struct.Struct(fmt)
        return s.unpack(self.take(s.size))[0]

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise ValueError("varint too long")


def _write_uvarint(out: bytearray, v: int) -> None:
    while v & ~0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


_FIXED = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q", "bool": ">?"}


def _read_length(r: _Reader, flexible: bool, short: bool) -> int:
    if flexible:
        return r.uvarint() - 1
    return r.unpack(">h" if short else ">i")


def _write_length(out: bytearray, n: int, flexible: bool, short: bool) -> None:
    if flexible:
        _write_uvarint(out, n + 1)
    else:
        out += struct.pack(">h" if short else ">i", n)


def _read_value(r: _Reader, f: Field, version: int, flexible: bool) -> Any:
    t = f.type
    if t in _FIXED:
        return r.unpack(_FIXED[t])
    if t == "uuid":
        return uuid.UUID(bytes=r.take(16))
    if t == "string":
        n = _read_length(r, flexible, short=True)
        return None if n < 0 else r.take(n).decode("utf-8")
    if t == "bytes":
        n = _read_length(r, flexible, short=False)
        return None if n < 0 else r.take(n)
    if t == "struct":
        if f.nullable(version) and r.unpack(">b") < 0:  # a nullable struct is prefixed by -1 / 1
            return None
        return _read_struct(r, f.fields, version, flexible)
    if t.startswith("[]"):
        n = _read_length(r, flexible, short=False)
        if n < 0:
            return None
        inner = Field(f.name, t[2:], fields=f.fields)
        return [_read_value(r, inner, version, flexible) for _ in range(n)]
    raise ValueError(f"unknown field type {t}")


def _write_value(out: bytearray, f: Field, value: Any, version: int, flexible: bool) -> None:
    t = f.type
    if t in _FIXED:
        out += struct.pack(_FIXED[t], value)
    elif t == "uuid":
        out += (value or uuid.UUID(int=0)).bytes
    elif t in ("string", "bytes"):
        if value is None:
            if not f.nullable(version):
                raise ValueError(f"{f.name} is not nullable in version {version}")
            _write_length(out, -1, flexible, short=t == "string")
            return
        data = value.encode("utf-8") if t == "string" else bytes(value)
        _write_length(out, len(data), flexible, short=t == "string")
        out += data
    elif t == "struct":
        if f.nullable(version):
            out += struct.pack(">b", -1 if value is None else 1)
            if value is None:
                return
        _write_struct(out, f.fields, value, version, flexible)
    elif t.startswith("[]"):
        if value is None:
            _write_length(out, -1, flexible, short=False)
            return
        _write_length(out, len(value), flexible, short=False)
        inner = Field(f.name, t[2:], fields=f.fields)
        for item in value:
            _write_value(out, inner, item, version, flexible)
    else:
        raise ValueError(f"unknown field type {t}")


def _read_struct(r: _Reader, fields: tuple[Field, ...], version: int, flexible: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    tagged = {f.tag: f for f in fields if f.tag is not None and f.present(version)}
    for f in fields:
        if f.tag is None and f.present(version):
            out[f.name] = _read_value(r, f, version, flexible)
    if flexible:
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            data = r.take(size)
            tf = tagged.get(tag)
            if tf is not None:  # unknown tags are skipped, as Kafka does
                out[tf.name] = _read_value(_Reader(data), tf, version, flexible)
    return out


def _write_struct(out: bytearray, fields: tuple[Field, ...], data: dict[str, Any], version: int,
                  flexible: bool) -> None:
    tagged: list[tuple[int, bytes]] = []
    for f in fields:
        if not f.present(version):
            continue
        value = data.get(f.name, f.default)
        if f.tag is not None:
            if flexible and value is not None and value != f.default:
                buf = bytearray()
                _write_value(buf, f, value, version, flexible)
                tagged.append((f.tag, bytes(buf)))
            continue
        _write_value(out, f, value, version, flexible)
    if flexible:
        _write_uvarint(out, len(tagged))
        for tag, buf in sorted(tagged):
            _write_uvarint(out, tag)
            _write_uvarint(out, len(buf))
            out += buf


def encode(schema: Schema, version: int, data: dict[str, Any], *, with_version: bool = True) -> bytes:
    """Serialize ``data`` (field name -> value) at ``version``, prefixed by the int16 version."""
    if not 0 <= version <= schema.max_version:
        raise ValueError(f"{schema.name} has no version {version}")
    out = bytearray(struct.pack(">h", version) if with_version else b"")
    _write_struct(out, schema.fields, data, version, schema.flexible(version))
    return bytes(out)


def decode(schema: Schema, buf: bytes | memoryview, version: int | None = None) -> tuple[int, dict[str, Any]]:
    """(version, fields) of a serialized ``schema``; reads the int16 version prefix unless given.
    Versions newer than we know are read with the newest layout (Kafka's forward-compat rule)."""
    r = _Reader(buf)
    if version is None:
        version = r.unpack(">h")
    if version < 0:
        raise ValueError(f"invalid {schema.name} version {version}")
    layout = min(version, schema.max_version)
    return version, _read_struct(r, schema.fields, layout, schema.flexible(layout))


# --- Kafka's coordinator record schemas ----------------------------------------------------------

OFFSET_COMMIT_KEY = Schema("OffsetCommitKey", (
    F("group", "string"), F("topic", "string"), F("partition", "int32")), max_version=1)
OFFSET_COMMIT_VALUE = Schema("OffsetCommitValue", (
    F("offset", "int64"),
    F("leaderEpoch", "int32", "3+", default=-1),
    F("metadata", "string"),
    F("commitTimestamp", "int64"),
    F("expireTimestamp", "int64", "1", default=-1),
), max_version=4, first_flexible=4)

GROUP_METADATA_KEY = Schema("GroupMetadataKey", (F("group", "string"),), max_version=2)
_MEMBER_METADATA = (
    F("memberId", "string"),
    F("groupInstanceId", "string", "3+", nullable="3+"),
    F("clientId", "string"),
    F("clientHost", "string"),
    F("rebalanceTimeout", "int32", "1+", default=-1),
    F("sessionTimeout", "int32"),
    F("subscription", "bytes"),
    F("assignment", "bytes"),
)
GROUP_METADATA_VALUE = Schema("GroupMetadataValue", (
    F("protocolType", "string"),
    F("generation", "int32"),
    F("protocol", "string", nullable="0+"),
    F("leader", "string", nullable="0+"),
    F("currentStateTimestamp", "int64", "2+", default=-1),
    F("members", "[]struct", fields=_MEMBER_METADATA),
), max_version=4, first_flexible=4)

TRANSACTION_LOG_KEY = Schema("TransactionLogKey", (F("transactionalId", "string"),), max_version=0)
TRANSACTION_LOG_VALUE = Schema("TransactionLogValue", (
    F("producerId", "int64"),
    F("producerEpoch", "int16"),
    F("transactionTimeoutMs", "int32"),
    F("transactionStatus", "int8"),
    F("transactionPartitions", "[]struct", nullable="0+",
      fields=(F("topic", "string"), F("partitionIds", "[]int32"))),
    F("transactionLastUpdateTimestampMs", "int64"),
    F("transactionStartTimestampMs", "int64"),
    F("previousProducerId", "int64", "1+", default=-1, tag=0),
    F("nextProducerId", "int64", "1+", default=-1, tag=1),
    F("clientTransactionVersion", "int16", "1+", default=0, tag=2),
    # KIP-939 (Kafka trunk): the epoch of the producer that recovered a prepared transaction.
    F("nextProducerEpoch", "int16", "1+", default=-1, tag=3),
), max_version=1, first_flexible=1)

# KIP-848 consumer group records (Kafka's ConsumerGroup*Key / *Value.json as of 3.9 / 4.0; the
# tagged fields added later are known so that a newer log reads, and are never written). Keys are
# never flexible; values are flexible from version 0.
_CG_KEY = Schema("ConsumerGroupKey", (F("groupId", "string"),), max_version=32767)
_CG_MEMBER_KEY = Schema("ConsumerGroupMemberKey", (F("groupId", "string"), F("memberId", "string")),
                        max_version=32767)
CONSUMER_GROUP_METADATA_VALUE = Schema("ConsumerGroupMetadataValue", (
    F("epoch", "int32"),
    F("metadataHash", "int64", default=0, tag=0),  # KIP-1101 (4.1)
    F("creationTimeMs", "int64", default=-1, tag=1),  # KIP-1282
), max_version=0, first_flexible=0)
CONSUMER_GROUP_PARTITION_METADATA_VALUE = Schema("ConsumerGroupPartitionMetadataValue", (
    F("topics", "[]struct", fields=(
        F("topicId", "uuid"), F("topicName", "string"), F("numPartitions", "int32"),
        F("partitionMetadata", "[]struct", fields=(F("partition", "int32"), F("racks", "[]string"))))),
), max_version=0, first_flexible=0)
CONSUMER_GROUP_MEMBER_METADATA_VALUE = Schema("ConsumerGroupMemberMetadataValue", (
    F("instanceId", "string", nullable="0+"),
    F("rackId", "string", nullable="0+"),
    F("clientId", "string"),
    F("clientHost", "string"),
    F("subscribedTopicNames", "[]string"),
    F("subscribedTopicRegex", "string", nullable="0+"),
    F("rebalanceTimeoutMs", "int32", default=-1),
    F("serverAssignor", "string", nullable="0+"),
    F("classicMemberMetadata", "struct", nullable="0+", tag=0, fields=(
        F("supportedProtocols", "[]struct", fields=(F("name", "string"), F("metadata", "bytes"))),)),
), max_version=0, first_flexible=0)
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = Schema("ConsumerGroupTargetAssignmentMetadataValue", (
    F("assignmentEpoch", "int32"),
    F("assignmentTimestamp", "int64", default=0, tag=0),  # KIP-1263 (4.3)
), max_version=0, first_flexible=0)
_CG_TOPIC_PARTITIONS = (F("topicId", "uuid"), F("partitions", "[]int32"))
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = Schema("ConsumerGroupTargetAssignmentMemberValue", (
    F("topicPartitions", "[]struct", fields=_CG_TOPIC_PARTITIONS),
), max_version=0, first_flexible=0)
_CG_ASSIGNED_PARTITIONS = (*_CG_TOPIC_PARTITIONS,
                           F("assignmentEpochs", "[]int32", nullable="0+", tag=0))  # KIP-1251
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = Schema("ConsumerGroupCurrentMemberAssignmentValue", (
    F("memberEpoch", "int32"),
    F("previousMemberEpoch", "int32"),
    F("state", "int8"),  # Kafka's MemberState: 0 stable, 1 unrevoked, 2 unreleased partitions
    F("assignedPartitions", "[]struct", fields=_CG_ASSIGNED_PARTITIONS),
    F("partitionsPendingRevocation", "[]struct", fields=_CG_ASSIGNED_PARTITIONS),
), max_version=0, first_flexible=0)
CONSUMER_GROUP_REGULAR_EXPRESSION_KEY = Schema("ConsumerGroupRegularExpressionKey", (
    F("groupId", "string"), F("regularExpression", "string")), max_version=32767)
CONSUMER_GROUP_REGULAR_EXPRESSION_VALUE = Schema("ConsumerGroupRegularExpressionValue", (
    F("topics", "[]string"),
    F("version", "int64"),  # the metadata version the regex was resolved at
    F("timestamp", "int64"),
), max_version=0, first_flexible=0)

# KIP-932 share group records (Kafka's ShareGroup*Key / *Value.json, Kafka 4.2): keys are never
# flexible, values flexible from version 0; no tagged fields.
SHARE_GROUP_MEMBER_METADATA_VALUE = Schema("ShareGroupMemberMetadataValue", (
    F("rackId", "string", nullable="0+"),
    F("clientId", "string"),
    F("clientHost", "string"),
    F("subscribedTopicNames", "[]string"),
), max_version=0, first_flexible=0)
SHARE_GROUP_METADATA_VALUE = Schema("ShareGroupMetadataValue", (
    F("epoch", "int32"),
    F("metadataHash", "int64"),
), max_version=0, first_flexible=0)
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = Schema("ShareGroupTargetAssignmentMetadataValue", (
    F("assignmentEpoch", "int32"),
), max_version=0, first_flexible=0)
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = Schema("ShareGroupTargetAssignmentMemberValue", (
    F("topicPartitions", "[]struct", fields=_CG_TOPIC_PARTITIONS),
), max_version=0, first_flexible=0)
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = Schema("ShareGroupCurrentMemberAssignmentValue", (
    F("memberEpoch", "int32"),
    F("previousMemberEpoch", "int32"),
    F("state", "int8"),
    F("assignedPartitions", "[]struct", fields=_CG_TOPIC_PARTITIONS),
), max_version=0, first_flexible=0)
_SG_TOPIC_PARTITIONS_INFO = (F("topicId", "uuid"), F("topicName", "string"), F("partitions", "[]int32"))
SHARE_GROUP_STATE_PARTITION_METADATA_VALUE = Schema("ShareGroupStatePartitionMetadataValue", (
    F("initializingTopics", "[]struct", fields=_SG_TOPIC_PARTITIONS_INFO),
    F("initializedTopics", "[]struct", fields=_SG_TOPIC_PARTITIONS_INFO),
    F("deletingTopics", "[]struct", fields=(F("topicId", "uuid"), F("topicName", "string"))),
), max_version=0, first_flexible=0)

# __share_group_state (Kafka's share-coordinator ShareSnapshot / ShareUpdate records).
SHARE_STATE_KEY = Schema("ShareStateKey", (F("groupId", "string"), F("topicId", "uuid"), F("partition", "int32")),
                         max_version=32767)
_STATE_BATCH = (F("firstOffset", "int64"), F("lastOffset", "int64"), F("deliveryState", "int8"),
                F("deliveryCount", "int16"))
SHARE_SNAPSHOT_VALUE = Schema("ShareSnapshotValue", (
    F("snapshotEpoch", "int32"),
    F("stateEpoch", "int32"),
    F("leaderEpoch", "int32"),
    F("startOffset", "int64"),
    F("createTimestamp", "int64"),
    F("writeTimestamp", "int64"),
    F("stateBatches", "[]struct", fields=_STATE_BATCH),
), max_version=0, first_flexible=0)
SHARE_UPDATE_VALUE = Schema("ShareUpdateValue", (
    F("snapshotEpoch", "int32"),
    F("leaderEpoch", "int32"),
    F("startOffset", "int64"),
    F("stateBatches", "[]struct", fields=_STATE_BATCH),
), max_version=0, first_flexible=0)

# The consumer protocol's embedded subscription / assignment (JoinGroup metadata, SyncGroup bytes).
_TOPIC_PARTITION = (F("topic", "string"), F("partitions", "[]int32"))
CONSUMER_SUBSCRIPTION = Schema("ConsumerProtocolSubscription", (
    F("topics", "[]string"),
    F("userData", "bytes", nullable="0+"),
    F("ownedPartitions", "[]struct", "1+", fields=_TOPIC_PARTITION),
    F("generationId", "int32", "2+", default=-1),
    F("rackId", "string", "3+", nullable="3+"),
), max_version=3)
CONSUMER_ASSIGNMENT = Schema("ConsumerProtocolAssignment", (
    F("assignedPartitions", "[]struct", fields=_TOPIC_PARTITION),
    F("userData", "bytes", nullable="0+"),
), max_version=3)

# record type -> (key schema, value schema), per internal topic
OFFSETS_RECORDS: dict[int, tuple[Schema, Schema]] = {
    OFFSET_COMMIT_LEGACY: (OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE),
    OFFSET_COMMIT: (OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE),
    GROUP_METADATA: (GROUP_METADATA_KEY, GROUP_METADATA_VALUE),
    CONSUMER_GROUP_METADATA: (_CG_KEY, CONSUMER_GROUP_METADATA_VALUE),
    CONSUMER_GROUP_PARTITION_METADATA: (_CG_KEY, CONSUMER_GROUP_PARTITION_METADATA_VALUE),
    CONSUMER_GROUP_MEMBER_METADATA: (_CG_MEMBER_KEY, CONSUMER_GROUP_MEMBER_METADATA_VALUE),
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: (_CG_KEY, CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE),
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: (_CG_MEMBER_KEY, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE),
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: (_CG_MEMBER_KEY, CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE),
    CONSUMER_GROUP_REGULAR_EXPRESSION: (CONSUMER_GROUP_REGULAR_EXPRESSION_KEY, CONSUMER_GROUP_REGULAR_EXPRESSION_VALUE),
    SHARE_GROUP_MEMBER_METADATA: (_CG_MEMBER_KEY, SHARE_GROUP_MEMBER_METADATA_VALUE),
    SHARE_GROUP_METADATA: (_CG_KEY, SHARE_GROUP_METADATA_VALUE),
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA: (_CG_KEY, SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE),
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER: (_CG_MEMBER_KEY, SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE),
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT: (_CG_MEMBER_KEY, SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE),
    SHARE_GROUP_STATE_PARTITION_METADATA: (_CG_KEY, SHARE_GROUP_STATE_PARTITION_METADATA_VALUE),
}
CONSUMER_GROUP_RECORD_TYPES = frozenset(range(CONSUMER_GROUP_METADATA, CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT + 1)) \
    | {CONSUMER_GROUP_REGULAR_EXPRESSION}
SHARE_GROUP_RECORD_TYPES = frozenset(range(SHARE_GROUP_MEMBER_METADATA, SHARE_GROUP_STATE_PARTITION_METADATA + 1))
TRANSACTION_RECORDS: dict[int, tuple[Schema, Schema]] = {0: (TRANSACTION_LOG_KEY, TRANSACTION_LOG_VALUE)}
SHARE_STATE_RECORDS: dict[int, tuple[Schema, Schema]] = {
    SHARE_SNAPSHOT: (SHARE_STATE_KEY, SHARE_SNAPSHOT_VALUE),
    SHARE_UPDATE: (SHARE_STATE_KEY, SHARE_UPDATE_VALUE),
}


def records_for(topic: str) -> dict[int, tuple[Schema, Schema]]:
    if topic == TRANSACTION_TOPIC:
        return TRANSACTION_RECORDS
    if topic == SHARE_STATE_TOPIC:
        return SHARE_STATE_RECORDS
    return OFFSETS_RECORDS


# --- typed helpers -------------------------------------------------------------------------------


class UnknownRecordType(ValueError):
    def __init__(self, record_type: int) -> None:
        super().__init__(f"Unknown record type {record_type}")
        self.record_type = record_type


def encode_key(record_type: int, data: dict[str, Any], topic: str = OFFSETS_TOPIC) -> bytes:
    key_schema, _ = records_for(topic)[record_type]
    return encode(key_schema, record_type, data)


def decode_record(topic: str, key: bytes | memoryview, value: bytes | memoryview | None
                  ) -> tuple[int, dict[str, Any], int, dict[str, Any] | None]:
    """(record type, key fields, value version, value fields or None for a tombstone)."""
    record_type = struct.unpack_from(">h", key, 0)[0]
    schemas = records_for(topic).get(record_type)
    if schemas is None:
        raise UnknownRecordType(record_type)
    key_schema, value_schema = schemas
    _, key_data = decode(key_schema, key)
    if value is None:
        return record_type, key_data, -1, None
    version, value_data = decode(value_schema, value)
    return record_type, key_data, version, value_data


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return encode_key(OFFSET_COMMIT, {"group": group, "topic": topic, "partition": partition})


def offset_commit_value(offset: int, leader_epoch: int, metadata: str, commit_timestamp: int,
                        expire_timestamp: int = -1) -> bytes:
    """Kafka writes version 1 only when an explicit expire timestamp was requested, else version 3."""
    version = 1 if expire_timestamp >= 0 else 3
    return encode(OFFSET_COMMIT_VALUE, version, {
        "offset": offset, "leaderEpoch": leader_epoch, "metadata": metadata,
        "commitTimestamp": commit_timestamp, "expireTimestamp": expire_timestamp})


def group_metadata_key(group: str) -> bytes:
    return encode_key(GROUP_METADATA, {"group": group})


def group_metadata_value(data: dict[str, Any], version: int = 3) -> bytes:
    return encode(GROUP_METADATA_VALUE, version, data)


def consumer_group_key(record_type: int, group_id: str, member_id: str | None = None,
                       regex: str | None = None) -> bytes:
    """The key of a KIP-848 record: the group id, plus the member id (types 5, 7, 8) or the
    regular expression (type 16)."""
    data: dict[str, Any] = {"groupId": group_id}
    if member_id is not None:
        data["memberId"] = member_id
    if regex is not None:
        data["regularExpression"] = regex
    return encode_key(record_type, data)


def consumer_group_value(record_type: int, data: dict[str, Any]) -> bytes:
    """A KIP-848 record value at version 0 (the only one Kafka 3.9 / 4.0 write)."""
    return encode(OFFSETS_RECORDS[record_type][1], 0, data)


def share_state_key(record_type: int, group_id: str, topic_id: uuid.UUID, partition: int) -> bytes:
    """The key of a __share_group_state record (ShareSnapshot 0 / ShareUpdate 1)."""
    return encode(SHARE_STATE_KEY, record_type, {"groupId": group_id, "topicId": topic_id, "partition": partition})


def share_state_value(record_type: int, data: dict[str, Any]) -> bytes:
    return encode(SHARE_STATE_RECORDS[record_type][1], 0, data)


def decode_subscription(data: bytes) -> dict[str, Any]:
    return decode(CONSUMER_SUBSCRIPTION, data)[1]


def decode_assignment(data: bytes) -> dict[str, Any]:
    return decode(CONSUMER_ASSIGNMENT, data)[1]


def encode_assignment(partitions: dict[str, list[int]], user_data: bytes | None = None, version: int = 0) -> bytes:
    return encode(CONSUMER_ASSIGNMENT, version, {
        "assignedPartitions": [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(partitions.items())],
        "userData": user_data})


# --- dump-log text (Kafka's coordinator record formatter) ----------------------------------------


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, bytes):
        return _b64(obj)
    if isinstance(obj, uuid.UUID):
        # Kafka's Uuid.toString(): URL-safe base64 without padding.
        return base64.urlsafe_b64encode(obj.bytes).decode("ascii").rstrip("=")
    return obj


def _dump_group_metadata(value: dict[str, Any]) -> dict[str, Any]:
    """As Kafka does for protocol type "consumer": show subscription/assignment decoded, and
    keep the base64 bytes when they do not decode."""
    consumer = value.get("protocolType") == "consumer"
    decoders: dict[str, Callable[[bytes], dict[str, Any]]] = {
        "subscription": decode_subscription, "assignment": decode_assignment}
    for m in value.get("members") or []:
        for name, dec in decoders.items():
            raw = m.get(name)
            if consumer and raw:
                try:
                    m[name] = _jsonable(dec(raw))
                    continue
                except (ValueError, UnicodeDecodeError, struct.error):
                    pass
            m[name] = _b64(raw)
    return value


# TransactionLogValue v1's tagged fields (KIP-890 part 2, KIP-939) with their defaults.
_TXN_TAGGED_DEFAULTS = {"previousProducerId": -1, "nextProducerId": -1, "clientTransactionVersion": 0,
                        "nextProducerEpoch": -1}
TWO_PC_TIMEOUT_MS = 2147483647  # Kafka marks a two-phase-commit (KIP-939) transaction by this timeout


def _dump_transaction_value(version: int, data: dict[str, Any]) -> dict[str, Any]:
    """dump-log of a __transaction_state value: a v1 value lists every tagged field (the TV2
    previous/next producer id and client transaction version, KIP-939's nextProducerEpoch), also
    at its default, and a 2PC transaction gets ``"twoPhaseCommit":true`` beside ``version`` (a
    kbroker addition: Kafka's formatter leaves the reader to spot the Integer.MAX_VALUE timeout)."""
    if version >= 1:
        for name, default in _TXN_TAGGED_DEFAULTS.items():
            data.setdefault(name, default)
    return {"twoPhaseCommit": True} if data.get("transactionTimeoutMs") == TWO_PC_TIMEOUT_MS else {}


def _json(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def decode_coordinator_record(topic: str, offset: int, key: bytes | None, value: bytes | None
                              ) -> tuple[str, str | None]:
    """(key text, payload text) for a record of an internal topic, in Kafka's dump format."""
    if key is None:
        return (f"Failed to decode message at offset {offset} (message had a missing key)", None)
    try:
        record_type, key_data, version, value_data = decode_record(topic, key, value)
        key_text = _json({"type": str(record_type), "data": _jsonable(key_data)})
        if value_data is None:
            return (key_text, "<DELETE>")
        if topic != TRANSACTION_TOPIC and record_type == GROUP_METADATA:
            value_data = _dump_group_metadata(value_data)
        payload: dict[str, Any] = {"version": str(version), "data": _jsonable(value_data)}
        if topic == TRANSACTION_TOPIC:
            payload.update(_dump_transaction_value(version, payload["data"]))
        return (key_text, _json(payload))
    except UnknownRecordType as e:
        return (f"Unknown record type {e.record_type} at offset {offset}, skipping.", None)
    except (ValueError, UnicodeDecodeError, struct.error) as e:
        return (f"Error at offset {offset}, skipping. {e}", None)
