"""Issue 30 acceptance 4: broker-side schema validation (confluent.value.schema.validation /
confluent.key.schema.validation). Raw bytes, an unknown id, an id registered for another subject
or an unknown guid -> INVALID_RECORD with record_errors and nothing of the batch stored; records
of a serializing producer, header-carried ids and tombstones pass; a topic without the configs
takes anything."""

from __future__ import annotations

import json
import struct

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer

from protocol.errors import ErrorCode
from storage import batch as B
from tests.helpers.schema_registry import produce_serialized, registry_overrides, url_of
from tests.helpers.wire import RawConnection
from tests.integration.test_produce_validation import create_topic, list_offset, produce

LATEST = -1
SCHEMA = json.dumps({"type": "record", "name": "V", "fields": [{"name": "n", "type": "int"}]})
OTHER = json.dumps({"type": "record", "name": "Other", "fields": [{"name": "s", "type": "string"}]})


@pytest.fixture
def kb(broker_factory):
    return broker_factory(registry_overrides())


def _framed(schema_id: int, payload: bytes = b"\x02") -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + payload


def test_validated_topic_refuses_unregistered_records_and_takes_serialized_ones(kb):
    topic = "validated"
    create_topic(kb.bootstrap, topic, {"confluent.value.schema.validation": "true"})
    client = SchemaRegistryClient({"url": url_of(kb)})
    good_id = client.register_schema(f"{topic}-value", Schema(SCHEMA, "AVRO"))
    other_id = client.register_schema("elsewhere-value", Schema(OTHER, "AVRO"))
    guid = client.get_latest_version(f"{topic}-value").guid
    with RawConnection(kb.bootstrap) as conn:
        # One batch: a good record between bad ones -> the whole batch is refused, per-record errors.
        batch = B.build_batch([(None, b"raw bytes"), (None, _framed(good_id)), (None, _framed(9999)),
                               (None, _framed(other_id)), (None, b"\x01" + b"\x00" * 16 + b"\x02")])
        resp = produce(conn, topic, batch)
        assert resp.error_code == ErrorCode.INVALID_RECORD
        assert [e.batch_index for e in resp.record_errors] == [0, 2, 3, 4]
        messages = [e.batch_index_error_message for e in resp.record_errors]
        assert "has no schema id" in messages[0]
        assert "9999 is not registered for subject 'validated-value'" in messages[1]
        assert f"{other_id} is not registered" in messages[2]
        assert "guid" in messages[3]
        assert resp.error_message == messages[0]
        assert list_offset(conn, topic, LATEST).offset == 0
        # Registered id, registered guid (magic byte 1), header-carried id, tombstone: stored.
        import uuid
        ok = B.build_batch([(None, _framed(good_id)), (None, b"\x01" + uuid.UUID(guid).bytes + b"\x02"),
                            (b"k", None),
                            (None, b"no prefix here", [("__value_schema_id", b"\x01" + uuid.UUID(guid).bytes)])])
        resp = produce(conn, topic, ok)
        assert resp.error_code == 0, resp
        assert list_offset(conn, topic, LATEST).offset == 4
        # Produce v7 has no record_errors: the code alone.
        assert produce(conn, topic, B.build_batch([(None, b"x")]), version=7).error_code == ErrorCode.INVALID_RECORD

    # librdkafka: raw bytes fail with INVALID_RECORD, a serializing producer goes through.
    errors = produce_serialized(kb.bootstrap, topic, None, [b"plain"])
    assert [e.code() for e in errors] == [KafkaError.INVALID_RECORD]
    ser = AvroSerializer(client, SCHEMA)
    assert produce_serialized(kb.bootstrap, topic, ser, [{"n": 1}, {"n": 2}]) == [None, None]
    assert "refused by schema validation" in kb.log_text()


def test_key_validation_and_config_changes(kb):
    topic = "keys"
    create_topic(kb.bootstrap, topic)
    client = SchemaRegistryClient({"url": url_of(kb)})
    key_id = client.register_schema(f"{topic}-key", Schema(SCHEMA, "AVRO"))
    p = Producer({"bootstrap.servers": kb.bootstrap, "linger.ms": 0, "retries": 0, "enable.idempotence": False})

    def send(key: bytes | None, value: bytes) -> object:
        out: list = []
        p.produce(topic, key=key, value=value, on_delivery=lambda err, msg: out.append(err))
        p.flush(30)
        return out[0]

    assert send(b"raw", b"raw") is None  # validation off: anything goes
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": kb.bootstrap})

    def set_validation(value: str) -> None:
        res = ConfigResource("topic", topic, incremental_configs=[ConfigEntry(
            "confluent.key.schema.validation", value, incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(30)

    set_validation("true")
    err = send(b"raw", b"raw")
    assert err is not None and err.code() == KafkaError.INVALID_RECORD
    assert send(_framed(key_id), b"any value") is None  # values are not checked
    assert send(None, b"null keys pass") is None
    set_validation("false")
    assert send(b"raw", b"raw") is None


def test_validation_without_a_registry_refuses(broker_factory):
    kb = broker_factory()
    create_topic(kb.bootstrap, "v", {"confluent.value.schema.validation": "true"})
    with RawConnection(kb.bootstrap) as conn:
        resp = produce(conn, "v", B.build_batch([(None, _framed(1))]))
        assert resp.error_code == ErrorCode.INVALID_RECORD
        assert "kbroker.schema.registry.listener is not set" in resp.error_message
