"""Coordinator record codec (storage/internal_records.py): Kafka's byte layouts, both directions."""

from __future__ import annotations

import struct

import pytest

from storage import internal_records as IR


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack(">h", len(b)) + b


def test_offset_commit_key_and_value_bytes() -> None:
    assert IR.offset_commit_key("g1", "orders", 3) == struct.pack(">h", 1) + _s("g1") + _s("orders") + struct.pack(">i", 3)
    v3 = IR.offset_commit_value(42, 5, "meta", 1234)
    assert v3 == struct.pack(">hqi", 3, 42, 5) + _s("meta") + struct.pack(">q", 1234)
    v1 = IR.offset_commit_value(42, 5, "", 1234, expire_timestamp=9999)
    assert v1 == struct.pack(">hq", 1, 42) + _s("") + struct.pack(">qq", 1234, 9999)
    t, key, version, value = IR.decode_record(IR.OFFSETS_TOPIC, IR.offset_commit_key("g1", "orders", 3), v1)
    assert (t, key, version) == (1, {"group": "g1", "topic": "orders", "partition": 3}, 1)
    assert value == {"offset": 42, "metadata": "", "commitTimestamp": 1234, "expireTimestamp": 9999}


def test_group_metadata_roundtrip_all_versions() -> None:
    data = {"protocolType": "consumer", "generation": 4, "protocol": "range", "leader": "m-1",
            "currentStateTimestamp": 99, "members": [{
                "memberId": "m-1", "groupInstanceId": "i-1", "clientId": "c", "clientHost": "/127.0.0.1",
                "rebalanceTimeout": 300000, "sessionTimeout": 10000, "subscription": b"\x00\x01",
                "assignment": b""}]}
    for version in range(5):
        raw = IR.group_metadata_value(data, version)
        got_version, got = IR.decode(IR.GROUP_METADATA_VALUE, raw)
        assert got_version == version
        assert got["generation"] == 4 and got["members"][0]["memberId"] == "m-1"
        assert ("groupInstanceId" in got["members"][0]) == (version >= 3)
    # Version 3 is byte-identical to the layout Kafka writes (checked field by field).
    raw = IR.group_metadata_value(data, 3)
    expected = (struct.pack(">h", 3) + _s("consumer") + struct.pack(">i", 4) + _s("range") + _s("m-1")
                + struct.pack(">q", 99) + struct.pack(">i", 1) + _s("m-1") + _s("i-1") + _s("c") + _s("/127.0.0.1")
                + struct.pack(">ii", 300000, 10000) + struct.pack(">i", 2) + b"\x00\x01" + struct.pack(">i", 0))
    assert raw == expected
    # Version 4 is flexible: compact strings and tagged-field sections.
    assert IR.group_metadata_value(data, 4)[2:3] == bytes([len("consumer") + 1])


def test_null_nullable_and_tombstones() -> None:
    data = {"protocolType": "", "generation": 0, "protocol": None, "leader": None, "members": []}
    assert IR.decode(IR.GROUP_METADATA_VALUE, IR.group_metadata_value(data))[1]["protocol"] is None
    assert IR.decode_record(IR.OFFSETS_TOPIC, IR.group_metadata_key("g"), None) == (2, {"group": "g"}, -1, None)
    with pytest.raises(ValueError):
        IR.encode(IR.OFFSET_COMMIT_VALUE, 3, {"offset": 1, "leaderEpoch": -1, "metadata": None, "commitTimestamp": 0})


def test_transaction_log_tagged_fields() -> None:
    value = {"producerId": 7, "producerEpoch": 1, "transactionTimeoutMs": 60000, "transactionStatus": 2,
             "transactionPartitions": [{"topic": "t", "partitionIds": [0, 1]}],
             "transactionLastUpdateTimestampMs": 5, "transactionStartTimestampMs": 4, "nextProducerId": 10}
    raw = IR.encode(IR.TRANSACTION_LOG_VALUE, 1, value)
    _, got = IR.decode(IR.TRANSACTION_LOG_VALUE, raw)
    assert got["nextProducerId"] == 10 and "previousProducerId" not in got  # defaults are not written
    assert got["transactionPartitions"] == [{"topic": "t", "partitionIds": [0, 1]}]


def test_consumer_protocol_assignment_and_dump_text() -> None:
    raw = IR.encode_assignment({"t": [2, 0]})
    assert IR.decode_assignment(raw) == {"assignedPartitions": [{"topic": "t", "partitions": [0, 2]}], "userData": None}
    key, payload = IR.decode_coordinator_record(IR.OFFSETS_TOPIC, 0, IR.offset_commit_key("g", "t", 0),
                                                IR.offset_commit_value(1, -1, "", 2))
    assert key == '{"type":"1","data":{"group":"g","topic":"t","partition":0}}'
    assert payload == '{"version":"3","data":{"offset":1,"leaderEpoch":-1,"metadata":"","commitTimestamp":2}}'
    assert IR.decode_coordinator_record(IR.OFFSETS_TOPIC, 5, b"\x00\x63zz", b"")[0] == \
        "Unknown record type 99 at offset 5, skipping."
