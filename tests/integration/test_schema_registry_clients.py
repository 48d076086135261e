"""Issue 30 acceptance 1 (single node): confluent-kafka's SchemaRegistryClient with its Avro, JSON
Schema and Protobuf serializers and deserializers, pointed at kbroker's registry with nothing
changed but the URL: auto-registration, use.latest.version and schema references, records
produced and consumed through the broker."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

from tests.helpers.schema_registry import (
    consume_deserialized,
    http,
    produce_serialized,
    protobuf_classes,
    registry_overrides,
    url_of,
)

USER_AVRO = json.dumps({"type": "record", "name": "User", "namespace": "kbtest", "fields": [
    {"name": "name", "type": "string"}, {"name": "age", "type": "int"}]})
ADDRESS_AVRO = json.dumps({"type": "record", "name": "Address", "namespace": "kbtest",
                           "fields": [{"name": "city", "type": "string"}]})
PERSON_AVRO = json.dumps({"type": "record", "name": "Person", "namespace": "kbtest", "fields": [
    {"name": "name", "type": "string"}, {"name": "home", "type": "kbtest.Address"}]})
USER_JSON = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "User", "type": "object",
                        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                        "required": ["name"]})


@pytest.fixture
def kb(broker_factory):
    return broker_factory(registry_overrides())


def test_avro_auto_registration_round_trip(kb):
    client = SchemaRegistryClient({"url": url_of(kb)})
    ser = AvroSerializer(client, USER_AVRO)
    values = [{"name": f"n{i}", "age": i} for i in range(5)]
    assert produce_serialized(kb.bootstrap, "users-avro", ser, values) == [None] * 5
    assert client.get_subjects() == ["users-avro-value"]
    latest = client.get_latest_version("users-avro-value")
    assert (latest.version, latest.schema_id) == (1, 1) and latest.guid
    # A fresh client (no cache) reads the writer schema by id from the registry.
    de = AvroDeserializer(SchemaRegistryClient({"url": url_of(kb)}))
    assert consume_deserialized(kb.bootstrap, "users-avro", de, 5) == values


def test_avro_use_latest_version_and_references(kb):
    client = SchemaRegistryClient({"url": url_of(kb)})
    addr = client.register_schema_full_response("kbtest.Address", Schema(ADDRESS_AVRO, "AVRO"))
    person = Schema(PERSON_AVRO, "AVRO", [SchemaReference("kbtest.Address", "kbtest.Address", addr.version)])
    pid = client.register_schema("people-value", person)
    assert client.get_referenced_by("kbtest.Address", addr.version) == [pid]
    ser = AvroSerializer(client, None, conf={"auto.register.schemas": False, "use.latest.version": True})
    values = [{"name": "ada", "home": {"city": "London"}}, {"name": "kurt", "home": {"city": "Brno"}}]
    assert produce_serialized(kb.bootstrap, "people", ser, values) == [None, None]
    de = AvroDeserializer(SchemaRegistryClient({"url": url_of(kb)}))
    assert consume_deserialized(kb.bootstrap, "people", de, 2) == values
    # The referenced version cannot go while a schema uses it (42206).
    status, body = http(url_of(kb), "DELETE", "/subjects/kbtest.Address/versions/1")
    assert (status, body["error_code"]) == (422, 42206)


def test_json_schema_round_trip(kb):
    client = SchemaRegistryClient({"url": url_of(kb)})
    ser = JSONSerializer(USER_JSON, client)
    values = [{"name": "a", "age": 1}, {"name": "b"}]
    assert produce_serialized(kb.bootstrap, "users-json", ser, values) == [None, None]
    assert client.get_latest_version("users-json-value").schema.schema_type == "JSON"
    de = JSONDeserializer(None, schema_registry_client=SchemaRegistryClient({"url": url_of(kb)}))
    assert consume_deserialized(kb.bootstrap, "users-json", de, 2) == values
    # use.latest.version with the JSON serializer: the registered schema is used as is.
    ser2 = JSONSerializer(USER_JSON, client, conf={"auto.register.schemas": False, "use.latest.version": True})
    assert produce_serialized(kb.bootstrap, "users-json", ser2, [{"name": "c"}]) == [None]


def test_protobuf_round_trip_with_reference_and_well_known_import(kb):
    classes = protobuf_classes()
    User, Address = classes["User"], classes["Address"]
    client = SchemaRegistryClient({"url": url_of(kb)})
    ser = ProtobufSerializer(User, client)
    values = []
    for i in range(3):
        u = User(name=f"u{i}", tags=["x", str(i)])
        u.address.CopyFrom(Address(city=f"c{i}"))
        u.at.seconds = 1700000000 + i
        values.append(u)
    assert produce_serialized(kb.bootstrap, "users-pb", ser, values) == [None] * 3
    # The import became a reference to its own subject; the well-known import did not.
    assert sorted(client.get_subjects()) == ["kbtest/address.proto", "users-pb-value"]
    latest = client.get_latest_version("users-pb-value")
    assert [r.name for r in latest.schema.references] == ["kbtest/address.proto"]
    assert "message User" in latest.schema.schema_str  # stored as .proto text
    de = ProtobufDeserializer(User, {"use.deprecated.format": False})
    assert consume_deserialized(kb.bootstrap, "users-pb", de, 3) == values
    # A reader that takes the writer schema from the registry (format=serialized) gets a
    # descriptor it can load: the same id answers both forms.
    status, doc = http(url_of(kb), "GET", f"/schemas/ids/{latest.schema_id}?format=serialized")
    assert status == 200 and "message" not in doc["schema"]
    # (A client of its own: the client caches "latest" per subject whatever the format asked.)
    ser_latest = ProtobufSerializer(User, SchemaRegistryClient({"url": url_of(kb)}),
                                    conf={"auto.register.schemas": False, "use.latest.version": True})
    assert produce_serialized(kb.bootstrap, "users-pb", ser_latest, values[:1]) == [None]
