"""Issue 30 acceptance 5 (bad input) and 3 (single-node durability), plus the REST API's shapes:
malformed bodies, invalid and oversized schemas, unknown subjects, versions and ids answer the
registry's error codes with a log line and store nothing; registrations survive a kill -9; soft
and permanent deletes, configs and modes behave as Confluent's."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.helpers.schema_registry import http, registry_overrides, url_of, wait_http

AVRO = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})
AVRO2 = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"},
                                                              {"name": "b", "type": "string", "default": ""}]})


@pytest.fixture
def kb(broker_factory):
    return broker_factory(registry_overrides(**{"kbroker.schema.registry.max.schema.bytes": "4096"}))


def _schemas_end(kb) -> int:
    c = Consumer({"bootstrap.servers": kb.bootstrap, "group.id": "probe"})
    try:
        _, high = c.get_watermark_offsets(TopicPartition("_schemas", 0), timeout=10)
        return high
    finally:
        c.close()


def test_bad_input_gets_error_codes_and_stores_nothing(kb):
    url = url_of(kb)
    assert http(url, "POST", "/subjects/s/versions", {"schema": AVRO})[0] == 200
    end = _schemas_end(kb)
    cases = [
        ("POST", "/subjects/s/versions", b"{not json", 400, 400),
        ("POST", "/subjects/s/versions", b"[1, 2]", 422, 422),
        ("POST", "/subjects/s/versions", json.dumps({"schema": 5}).encode(), 422, 422),
        ("POST", "/subjects/s/versions", json.dumps({"schema": "{\"type\": \"recrd\"}"}).encode(), 422, 42201),
        ("POST", "/subjects/s/versions", json.dumps({"schema": "not json at all"}).encode(), 422, 42201),
        ("POST", "/subjects/j/versions", json.dumps({"schema": "{\"type\": 5}", "schemaType": "JSON"}).encode(),
         422, 42201),
        ("POST", "/subjects/p/versions", json.dumps({"schema": "message {", "schemaType": "PROTOBUF"}).encode(),
         422, 42201),
        ("POST", "/subjects/p/versions", json.dumps({"schema": "x", "schemaType": "XML"}).encode(), 422, 42201),
        ("POST", "/subjects/s/versions", json.dumps({"schema": json.dumps(
            {"type": "record", "name": "Big", "doc": "x" * 5000, "fields": []})}).encode(), 422, 42209),
        ("POST", "/subjects/s/versions", b'{"schema": "' + b"x" * (5 << 20) + b'"}', 413, 413),  # body cap 4 MiB
        ("POST", "/subjects/s/versions", json.dumps({"schema": AVRO, "references": [
            {"name": "n", "subject": "missing", "version": 1}]}).encode(), 422, 42201),
        ("POST", "/subjects/s/versions", json.dumps({"schema": AVRO, "id": 77}).encode(), 422, 42205),
        ("POST", "/subjects/s/versions", json.dumps({"schema": json.dumps(
            {"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]})}).encode(), 409, 40901),
        ("GET", "/subjects/nope/versions", None, 404, 40401),
        ("GET", "/subjects/s/versions/9", None, 404, 40402),
        ("GET", "/subjects/s/versions/zero", None, 422, 42202),
        ("GET", "/subjects/s/versions/0", None, 422, 42202),
        ("GET", "/schemas/ids/999", None, 404, 40403),
        ("GET", "/schemas/ids/abc", None, 404, 40403),
        ("GET", "/schemas/guids/00000000-0000-0000-0000-000000000000", None, 404, 40403),
        ("POST", "/subjects/nope", json.dumps({"schema": AVRO}).encode(), 404, 40401),
        ("POST", "/subjects/s", json.dumps({"schema": AVRO2}).encode(), 404, 40403),
        ("PUT", "/config", json.dumps({"compatibility": "SIDEWAYS"}).encode(), 422, 42203),
        ("PUT", "/mode", json.dumps({"mode": "WRITEONLY"}).encode(), 422, 42204),
        ("GET", "/config/s", None, 404, 40408),
        ("DELETE", "/subjects/nope", None, 404, 40401),
        ("DELETE", "/subjects/s/versions/1?permanent=true", None, 404, 40407),
        ("DELETE", "/subjects/s?permanent=true", None, 404, 40405),
    ]
    for method, path, raw, status, code in cases:
        got_status, body = http(url, method, path, raw=raw)
        assert (got_status, body.get("error_code")) == (status, code), (method, path, body)
        assert isinstance(body.get("message"), str) and body["message"]
    assert _schemas_end(kb) == end  # nothing written
    assert http(url, "GET", "/subjects")[1] == ["s"]
    log = kb.log_text()
    assert "-> 422 42201" in log and "-> 400 400" in log and "-> 404 40401" in log


def test_api_lifecycle_and_kill_9_durability(kb):
    url = url_of(kb)
    first = http(url, "POST", "/subjects/a/versions", {"schema": AVRO})[1]
    assert first["id"] == 1 and first["version"] == 1
    assert http(url, "POST", "/subjects/a/versions", {"schema": AVRO})[1]["id"] == 1  # idempotent
    assert http(url, "POST", "/subjects/b/versions", {"schema": AVRO})[1] == {**first, "version": 1}  # same id
    assert http(url, "POST", "/subjects/a/versions", {"schema": AVRO2})[1]["id"] == 2
    assert http(url, "PUT", "/config/a", {"compatibility": "none"})[1] == {"compatibility": "NONE"}
    assert http(url, "GET", "/config/a")[1] == {"compatibilityLevel": "NONE"}
    assert http(url, "POST", "/subjects/a", {"schema": AVRO})[1]["version"] == 1
    assert http(url, "GET", "/schemas/ids/1/versions")[1] == [{"subject": "a", "version": 1},
                                                              {"subject": "b", "version": 1}]
    guid = first["guid"]
    assert http(url, "GET", f"/schemas/guids/{guid}")[1]["id"] == 1
    assert sorted(http(url, "GET", "/schemas/types")[1]) == ["AVRO", "JSON", "PROTOBUF"]
    assert http(url, "GET", "/contexts")[1] == ["."]
    # Soft delete, then permanent delete of subject b.
    assert http(url, "DELETE", "/subjects/b")[1] == [1]
    assert http(url, "GET", "/subjects")[1] == ["a"]
    assert http(url, "GET", "/subjects?deleted=true")[1] == ["a", "b"]
    assert http(url, "DELETE", "/subjects/b")[1]["error_code"] == 40404
    assert http(url, "DELETE", "/subjects/b?permanent=true")[1] == [1]
    assert http(url, "GET", "/subjects?deleted=true")[1] == ["a"]
    assert http(url, "PUT", "/mode/a", {"mode": "READONLY"})[1] == {"mode": "READONLY"}
    assert http(url, "POST", "/subjects/a/versions", {"schema": json.dumps(
        {"type": "record", "name": "R", "fields": []})})[1]["error_code"] == 42205

    kb.restart(kill=True)  # kill -9: everything answered above was in _schemas
    wait_http(url, "/subjects", lambda s, b: s == 200 and b == ["a"])
    assert http(url, "GET", "/subjects/a/versions")[1] == [1, 2]
    assert http(url, "GET", "/schemas/ids/2")[1]["schema"] == json.dumps(json.loads(AVRO2), separators=(",", ":"))
    assert http(url, "GET", "/config/a")[1] == {"compatibilityLevel": "NONE"}
    assert http(url, "GET", "/mode/a")[1] == {"mode": "READONLY"}
    assert http(url, "DELETE", "/mode/a")[1] == {"mode": "READONLY"}
    # Ids keep growing after the restart.
    third = http(url, "POST", "/subjects/c/versions", {"schema": json.dumps(
        {"type": "record", "name": "C", "fields": []})})[1]
    assert third["id"] == 3


def test_import_mode_keeps_given_ids_and_versions(kb):
    url = url_of(kb)
    assert http(url, "PUT", "/mode", {"mode": "IMPORT"})[1] == {"mode": "IMPORT"}
    doc = http(url, "POST", "/subjects/imp/versions", {"schema": AVRO, "id": 100, "version": 5})[1]
    assert (doc["id"], doc["version"]) == (100, 5)
    # The same id with another schema is refused (42207); an incompatible schema is not checked.
    assert http(url, "POST", "/subjects/imp/versions", {"schema": AVRO2, "id": 100, "version": 6})[1][
        "error_code"] == 42207
    assert http(url, "PUT", "/mode", {"mode": "READWRITE"})[1] == {"mode": "READWRITE"}
    assert http(url, "PUT", "/mode", {"mode": "IMPORT"})[1]["error_code"] == 42205  # subjects exist: force
    doc = http(url, "POST", "/subjects/imp/versions", {"schema": AVRO2})[1]
    assert (doc["id"], doc["version"]) == (101, 6)  # ids and versions continue after the imported ones
