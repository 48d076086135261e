"""KIP-848 ConsumerGroup* records (types 3-8, 16): Kafka's byte layouts, built here by hand from
Kafka's JSON schemas (keys: int16 type + int16-length strings; values: int16 version 0, flexible:
compact strings/arrays as uvarint(n + 1), a tagged-field count after every struct)."""

from __future__ import annotations

import struct
import uuid

from coordinator import consumer_records as CR
from coordinator.consumer_protocol import ConsumerGroup, ConsumerMember, MemberState
from storage import internal_records as IR

TID = uuid.UUID("0123456789abcdef0123456789abcdef")


def s16(text: str) -> bytes:  # non-flexible string (keys)
    b = text.encode()
    return struct.pack(">h", len(b)) + b


def cs(text: str | None) -> bytes:  # compact (nullable) string
    if text is None:
        return b"\x00"
    b = text.encode()
    return bytes([len(b) + 1]) + b


def carr(items: list[bytes]) -> bytes:  # compact array of small size
    return bytes([len(items) + 1]) + b"".join(items)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


V0 = struct.pack(">h", 0)
NO_TAGS = b"\x00"


def test_keys_are_type_prefixed_group_and_member() -> None:
    assert IR.consumer_group_key(3, "g1") == struct.pack(">h", 3) + s16("g1")
    assert IR.consumer_group_key(8, "g1", member_id="m-1") == struct.pack(">h", 8) + s16("g1") + s16("m-1")
    assert IR.consumer_group_key(16, "g1", regex="t.*") == struct.pack(">h", 16) + s16("g1") + s16("t.*")
    for t in (3, 4, 6):
        assert IR.decode_record(IR.OFFSETS_TOPIC, IR.consumer_group_key(t, "g"), None) == (t, {"groupId": "g"}, -1, None)
    for t in (5, 7, 8):
        assert IR.decode_record(IR.OFFSETS_TOPIC, IR.consumer_group_key(t, "g", member_id="m"), None)[1] == \
            {"groupId": "g", "memberId": "m"}


def test_values_byte_exact() -> None:
    # 3 ConsumerGroupMetadataValue: Epoch.
    assert IR.consumer_group_value(3, {"epoch": 7}) == V0 + i32(7) + NO_TAGS
    # 4 ConsumerGroupPartitionMetadataValue: Topics [TopicId, TopicName, NumPartitions, PartitionMetadata []].
    v4 = IR.consumer_group_value(4, {"topics": [{"topicId": TID, "topicName": "t", "numPartitions": 3,
                                                 "partitionMetadata": []}]})
    assert v4 == V0 + carr([TID.bytes + cs("t") + i32(3) + carr([]) + NO_TAGS]) + NO_TAGS
    # 5 ConsumerGroupMemberMetadataValue.
    v5 = IR.consumer_group_value(5, {
        "instanceId": None, "rackId": "r1", "clientId": "c", "clientHost": "/127.0.0.1",
        "subscribedTopicNames": ["a", "b"], "subscribedTopicRegex": None, "rebalanceTimeoutMs": 45000,
        "serverAssignor": "uniform"})
    assert v5 == (V0 + cs(None) + cs("r1") + cs("c") + cs("/127.0.0.1") + carr([cs("a"), cs("b")]) + cs(None)
                  + i32(45000) + cs("uniform") + NO_TAGS)
    # 6 ConsumerGroupTargetAssignmentMetadataValue: AssignmentEpoch.
    assert IR.consumer_group_value(6, {"assignmentEpoch": 5}) == V0 + i32(5) + NO_TAGS
    # 7 ConsumerGroupTargetAssignmentMemberValue: TopicPartitions [TopicId, Partitions].
    tp = TID.bytes + carr([i32(0), i32(2)]) + NO_TAGS
    assert IR.consumer_group_value(7, {"topicPartitions": [{"topicId": TID, "partitions": [0, 2]}]}) == \
        V0 + carr([tp]) + NO_TAGS
    # 8 ConsumerGroupCurrentMemberAssignmentValue: MemberEpoch, PreviousMemberEpoch, State (int8),
    # AssignedPartitions, PartitionsPendingRevocation.
    v8 = IR.consumer_group_value(8, {"memberEpoch": 4, "previousMemberEpoch": 3, "state": 1,
                                     "assignedPartitions": [{"topicId": TID, "partitions": [0, 2]}],
                                     "partitionsPendingRevocation": []})
    assert v8 == V0 + i32(4) + i32(3) + b"\x01" + carr([tp]) + carr([]) + NO_TAGS
    # 16 ConsumerGroupRegularExpressionValue: Topics, Version (int64), Timestamp (int64).
    v16 = IR.consumer_group_value(16, {"topics": ["tx"], "version": 9, "timestamp": 1234})
    assert v16 == V0 + carr([cs("tx")]) + struct.pack(">qq", 9, 1234) + NO_TAGS


def test_round_trip_and_newer_tagged_fields() -> None:
    data = {"epoch": 3, "metadataHash": 77}  # the 4.1 MetadataHash tag reads and writes
    raw = IR.consumer_group_value(3, data)
    assert raw == V0 + i32(3) + b"\x01\x00\x08" + struct.pack(">q", 77)
    assert IR.decode_record(IR.OFFSETS_TOPIC, IR.consumer_group_key(3, "g"), raw)[3] == data
    member = {"instanceId": "i", "rackId": None, "clientId": "c", "clientHost": "h", "subscribedTopicNames": [],
              "subscribedTopicRegex": "x.*", "rebalanceTimeoutMs": 1, "serverAssignor": None,
              "classicMemberMetadata": {"supportedProtocols": [{"name": "range", "metadata": b"\x01"}]}}
    assert IR.decode_record(IR.OFFSETS_TOPIC, IR.consumer_group_key(5, "g", member_id="m"),
                            IR.consumer_group_value(5, member))[3] == member


def _group() -> ConsumerGroup:
    g = ConsumerGroup("g", 0)
    g.group_epoch, g.assignment_epoch = 3, 3
    g.subscription_metadata = {"t": (TID, 4)}
    g.resolved_regex = {"t.*": frozenset({"t"})}
    for mid in ("a", "b"):
        g.members[mid] = ConsumerMember(mid, client_id="c", subscribed_topic_names=["t"], member_epoch=3,
                                        previous_member_epoch=2, assigned={TID: {0, 1} if mid == "a" else {2, 3}})
        g.target[mid] = {TID: set(g.members[mid].assigned[TID])}
    g.members["b"].state = MemberState.UNREVOKED_PARTITIONS
    g.members["b"].pending_revocation = {TID: {9}}
    return g


def test_image_diff_and_replay() -> None:
    g = _group()
    first = CR.diff_records("g", {}, CR.image(g), regex_version=1, now_ms=5)
    types = [struct.unpack_from(">h", k)[0] for k, _ in first]
    # Kafka's order: member metadata, regexes, subscription metadata, epoch, targets, target epoch, current.
    assert types == [5, 5, 16, 4, 3, 7, 7, 6, 8, 8]
    replay = CR.GroupReplay()
    for i, (k, v) in enumerate(first):
        rtype, key, _, value = IR.decode_record(IR.OFFSETS_TOPIC, k, v)
        replay.apply(rtype, key, value, i)
    back = replay.build("g", 0, "uniform")
    assert back is not None and CR.image(back) == CR.image(g)
    assert back.members["b"].pending_revocation == {TID: {9}} and back.resolved_regex == g.resolved_regex
    # Only what changed is written; a removed member is tombstoned before the new epoch.
    old = CR.image(g)
    del g.members["b"], g.target["b"]
    g.group_epoch = 4
    changes = [(struct.unpack_from(">h", k)[0], v is None) for k, v in CR.diff_records("g", old, CR.image(g))]
    assert changes == [(8, True), (7, True), (5, True), (3, False)]
    # A deleted group: every key tombstoned, the epoch last; replay forgets the group.
    dead = CR.tombstones("g", CR.image(g))
    assert all(v is None for _, v in dead) and struct.unpack_from(">h", dead[-1][0])[0] == 3
    for i, (k, v) in enumerate(dead):
        rtype, key, _, value = IR.decode_record(IR.OFFSETS_TOPIC, k, v)
        replay.apply(rtype, key, value, 100 + i)
    assert replay.build("g", 0, "uniform") is None


def test_dump_log_text() -> None:
    key = IR.consumer_group_key(7, "g", member_id="m")
    value = IR.consumer_group_value(7, {"topicPartitions": [{"topicId": TID, "partitions": [1]}]})
    k, v = IR.decode_coordinator_record(IR.OFFSETS_TOPIC, 0, key, value)
    assert k == '{"type":"7","data":{"groupId":"g","memberId":"m"}}'
    # Topic ids print as Kafka's Uuid.toString (URL-safe base64, no padding).
    assert v == '{"version":"0","data":{"topicPartitions":[{"topicId":"ASNFZ4mrze8BI0VniavN7w","partitions":[1]}]}}'
    assert IR.decode_coordinator_record(IR.OFFSETS_TOPIC, 0, IR.consumer_group_key(3, "g"), None)[1] == "<DELETE>"
