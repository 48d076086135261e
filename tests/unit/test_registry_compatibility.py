"""Issue 30 acceptance 2: compatibility verdicts per format and level, table-driven.

Each row is an evolution (old schema -> new schema) with the verdict of BACKWARD (the new schema
reads data written with the old one) and FORWARD (the old schema reads data written with the new
one); FULL must be both, NONE always passes, and the *_TRANSITIVE rows check every earlier version.
The ``source`` of every row names where its verdict comes from:
- AVRO-SPEC: the Avro specification, "Schema Resolution"
  (https://avro.apache.org/docs/1.12.0/specification/#schema-resolution);
- CONFLUENT-AVRO: Confluent's "Schema Evolution and Compatibility" page, "Avro" summary table
  (https://docs.confluent.io/platform/current/schema-registry/fundamentals/schema-evolution.html);
- CONFLUENT-JSON: Confluent's JSON Schema compatibility rules (the same page, "JSON Schema", and the
  strict set of compatible changes of schema-registry's json/diff/SchemaDiff.java);
- CONFLUENT-PROTO: Confluent's Protobuf compatibility rules (the same page, "Protobuf", and
  protobuf/diff/SchemaDiff.COMPATIBLE_CHANGES), which follow the Protocol Buffers guide
  "Updating A Message Type" (https://protobuf.dev/programming-guides/proto3/#updating).
"""

from __future__ import annotations

import json

import pytest

from registry import records as R
from registry.service import LEVELS, SchemaRegistry
from registry.state import RegistryState


class _Store:  # the compatibility check reads nothing but the (empty) state
    state = RegistryState()


REG = SchemaRegistry(_Store())  # type: ignore[arg-type]


def verdict(schema_type: str, history: list[str], new: str, level: str) -> bool:
    previous = [R.SchemaValue("s", i + 1, i + 1, text, schema_type) for i, text in enumerate(history)]
    parsed = REG.parse(schema_type, new, [])
    return not REG._compat_errors(level, parsed, previous)  # noqa: SLF001


def avro(*fields: dict, name: str = "R") -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "t", "fields": list(fields)})


def enum(*symbols: str) -> str:
    return avro({"name": "e", "type": {"type": "enum", "name": "E", "symbols": list(symbols)}})


def jobj(props: dict, *, required: list[str] | None = None, closed: bool = False) -> str:
    doc: dict = {"type": "object", "properties": props}
    if required:
        doc["required"] = required
    if closed:
        doc["additionalProperties"] = False
    return json.dumps(doc)


def proto(body: str, package: str = "t", syntax: str = "proto3") -> str:
    return f'syntax = "{syntax}";\npackage {package};\n{body}\n'


A = {"name": "a", "type": "int"}
B_DEFAULT = {"name": "b", "type": "string", "default": ""}
B_NO_DEFAULT = {"name": "b", "type": "string"}

# (case, type, old, new, BACKWARD ok, FORWARD ok, source)
CASES = [
    ("avro add field with default", "AVRO", avro(A), avro(A, B_DEFAULT), True, True, "AVRO-SPEC, CONFLUENT-AVRO"),
    ("avro add field without default", "AVRO", avro(A), avro(A, B_NO_DEFAULT), False, True,
     "AVRO-SPEC (reader field without default missing in writer is an error), CONFLUENT-AVRO"),
    ("avro remove field with default", "AVRO", avro(A, B_DEFAULT), avro(A), True, True, "CONFLUENT-AVRO"),
    ("avro remove field without default", "AVRO", avro(A, B_NO_DEFAULT), avro(A), True, False,
     "AVRO-SPEC (writer field not in reader is ignored), CONFLUENT-AVRO"),
    ("avro promote int to long", "AVRO", avro(A), avro({"name": "a", "type": "long"}), True, False,
     "AVRO-SPEC (int is promotable to long, float, double)"),
    ("avro demote long to int", "AVRO", avro({"name": "a", "type": "long"}), avro(A), False, True, "AVRO-SPEC"),
    ("avro promote string to bytes", "AVRO", avro({"name": "a", "type": "string"}),
     avro({"name": "a", "type": "bytes"}), True, True, "AVRO-SPEC (string and bytes promote both ways)"),
    ("avro enum symbol added", "AVRO", enum("A", "B"), enum("A", "B", "C"), True, False,
     "AVRO-SPEC (writer symbol unknown to the reader is an error without an enum default)"),
    ("avro enum symbol removed", "AVRO", enum("A", "B", "C"), enum("A", "B"), False, True, "AVRO-SPEC"),
    ("avro field made optional (union with null)", "AVRO", avro({"name": "a", "type": "string"}),
     avro({"name": "a", "type": ["null", "string"], "default": None}), True, False,
     "AVRO-SPEC (a non-union writer is read by the matching union branch; a union writer needs every branch "
     "readable)"),
    ("avro field renamed without alias", "AVRO", avro(A), avro({"name": "z", "type": "int"}), False, False,
     "AVRO-SPEC (fields match by name; neither side has a default for the other's field)"),
    ("avro field type changed to string", "AVRO", avro(A), avro({"name": "a", "type": "string"}), False, False,
     "AVRO-SPEC"),
    ("json optional property added to open model", "JSON", jobj({"a": {"type": "string"}}),
     jobj({"a": {"type": "string"}, "b": {"type": "integer"}}), False, True,
     "CONFLUENT-JSON (OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL is not compatible; removal from an open "
     "model is)"),
    ("json optional property added to closed model", "JSON", jobj({"a": {"type": "string"}}, closed=True),
     jobj({"a": {"type": "string"}, "b": {"type": "integer"}}, closed=True), True, False,
     "CONFLUENT-JSON (OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL compatible, "
     "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL not)"),
    ("json property type changed", "JSON", jobj({"a": {"type": "string"}}), jobj({"a": {"type": "integer"}}),
     False, False, "CONFLUENT-JSON (TYPE_CHANGED)"),
    ("json integer widened to number", "JSON", jobj({"a": {"type": "integer"}}), jobj({"a": {"type": "number"}}),
     True, False, "CONFLUENT-JSON (TYPE_EXTENDED compatible, TYPE_NARROWED not)"),
    ("json enum extended", "JSON", json.dumps({"enum": ["x", "y"]}), json.dumps({"enum": ["x", "y", "z"]}),
     True, False, "CONFLUENT-JSON (ENUM_ARRAY_EXTENDED compatible, ENUM_ARRAY_NARROWED not)"),
    ("json maxLength increased", "JSON", json.dumps({"type": "string", "maxLength": 5}),
     json.dumps({"type": "string", "maxLength": 10}), True, False,
     "CONFLUENT-JSON (MAX_LENGTH_INCREASED compatible, MAX_LENGTH_DECREASED not)"),
    ("json existing property made required", "JSON", jobj({"a": {"type": "string"}}),
     jobj({"a": {"type": "string"}}, required=["a"]), False, True,
     "CONFLUENT-JSON (REQUIRED_ATTRIBUTE_ADDED not compatible, REQUIRED_ATTRIBUTE_REMOVED compatible)"),
    ("json type widened to a union", "JSON", json.dumps({"type": "string"}),
     json.dumps({"oneOf": [{"type": "string"}, {"type": "integer"}]}), True, False,
     "CONFLUENT-JSON (SUM_TYPE_EXTENDED compatible, SUM_TYPE_NARROWED not)"),
    ("proto field added", "PROTOBUF", proto("message M { int32 a = 1; }"),
     proto("message M { int32 a = 1; string b = 2; }"), True, True,
     "CONFLUENT-PROTO (FIELD_ADDED and FIELD_REMOVED compatible)"),
    ("proto field renamed", "PROTOBUF", proto("message M { int32 a = 1; }"), proto("message M { int32 z = 1; }"),
     True, True, "CONFLUENT-PROTO (FIELD_NAME_CHANGED compatible: fields match by number)"),
    ("proto field renumbered", "PROTOBUF", proto("message M { int32 a = 1; }"), proto("message M { int32 a = 2; }"),
     True, True, "CONFLUENT-PROTO (a renumbering is a removal plus an addition, both compatible)"),
    ("proto int32 to int64", "PROTOBUF", proto("message M { int32 a = 1; }"), proto("message M { int64 a = 1; }"),
     True, True, "CONFLUENT-PROTO, protobuf guide (int32, uint32, int64, uint64 and bool are compatible)"),
    ("proto int32 to sint32", "PROTOBUF", proto("message M { int32 a = 1; }"),
     proto("message M { sint32 a = 1; }"), False, False,
     "CONFLUENT-PROTO (FIELD_SCALAR_KIND_CHANGED), protobuf guide (sint32 is not compatible with int32)"),
    ("proto string to bytes", "PROTOBUF", proto("message M { string a = 1; }"),
     proto("message M { bytes a = 1; }"), True, True, "CONFLUENT-PROTO, protobuf guide (string and bytes)"),
    ("proto scalar to message", "PROTOBUF", proto("message M { int32 a = 1; } message N { int32 x = 1; }"),
     proto("message M { N a = 1; } message N { int32 x = 1; }"), False, False, "CONFLUENT-PROTO (FIELD_KIND_CHANGED)"),
    ("proto message removed", "PROTOBUF", proto("message M { int32 a = 1; } message N { int32 x = 1; }"),
     proto("message M { int32 a = 1; }"), False, True,
     "CONFLUENT-PROTO (MESSAGE_REMOVED not compatible, MESSAGE_ADDED compatible)"),
    ("proto enum constant added", "PROTOBUF", proto("enum E { A = 0; } message M { E e = 1; }"),
     proto("enum E { A = 0; B = 1; } message M { E e = 1; }"), True, True,
     "CONFLUENT-PROTO (ENUM_CONST_ADDED/REMOVED compatible)"),
    ("proto two fields moved into one oneof", "PROTOBUF", proto("message M { int32 a = 1; int32 b = 2; }"),
     proto("message M { oneof o { int32 a = 1; int32 b = 2; } }"), False, True,
     "CONFLUENT-PROTO (MULTIPLE_FIELDS_MOVED_TO_ONEOF not compatible; ONEOF_FIELD_MOVED_TO_TOP_LEVEL is)"),
    ("proto optional number made repeated", "PROTOBUF", proto("message M { optional int32 a = 1; }"),
     proto("message M { repeated int32 a = 1; }"), False, False, "CONFLUENT-PROTO (FIELD_NUMERIC_LABEL_CHANGED)"),
    ("proto optional string made repeated", "PROTOBUF", proto("message M { optional string a = 1; }"),
     proto("message M { repeated string a = 1; }"), True, True,
     "CONFLUENT-PROTO (FIELD_STRING_OR_BYTES_LABEL_CHANGED compatible)"),
    ("proto package changed", "PROTOBUF", proto("message M { int32 a = 1; }", "t"),
     proto("message M { int32 a = 1; }", "u"), False, False, "CONFLUENT-PROTO (PACKAGE_CHANGED)"),
    ("proto2 required field added", "PROTOBUF", proto("message M { optional int32 a = 1; }", syntax="proto2"),
     proto("message M { optional int32 a = 1; required int32 b = 2; }", syntax="proto2"), False, False,
     "CONFLUENT-PROTO (REQUIRED_FIELD_ADDED and REQUIRED_FIELD_REMOVED not compatible)"),
]


@pytest.mark.parametrize("level", ["BACKWARD", "FORWARD", "FULL", "NONE"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_verdict_per_level(case, level):
    _, schema_type, old, new, backward, forward, source = case
    expected = {"BACKWARD": backward, "FORWARD": forward, "FULL": backward and forward, "NONE": True}[level]
    assert verdict(schema_type, [old], new, level) is expected, f"{level}: expected {expected} ({source})"


TRANSITIVE = [
    # v1 {a}; v2 {a, b with default}; v3 {a, b without default}: v3 reads v2's data (b is there) but not
    # v1's (no b, no default). AVRO-SPEC, CONFLUENT-AVRO ("transitive: all previous versions").
    ("avro default dropped later", "AVRO", [avro(A), avro(A, B_DEFAULT)], avro(A, B_NO_DEFAULT),
     {"BACKWARD": True, "BACKWARD_TRANSITIVE": False, "FORWARD": True, "FORWARD_TRANSITIVE": True,
      "FULL": True, "FULL_TRANSITIVE": False}),
    # v1 {a}; v2 {a, b no default}; v3 {a}: the old v2 reader cannot read v3 data (no b), v1 can.
    ("avro field removed again", "AVRO", [avro(A), avro(A, B_NO_DEFAULT)], avro(A),
     {"BACKWARD": True, "BACKWARD_TRANSITIVE": True, "FORWARD": False, "FORWARD_TRANSITIVE": False,
      "FULL": False, "FULL_TRANSITIVE": False}),
    # Protobuf int32 -> int64 -> sint64: each step against the previous only passes the first.
    ("proto scalar kind drift", "PROTOBUF",
     [proto("message M { int64 a = 1; }"), proto("message M { int64 a = 1; int32 b = 2; }")],
     proto("message M { int64 a = 1; int32 b = 2; int32 c = 3; }"),
     {"BACKWARD": True, "BACKWARD_TRANSITIVE": True, "FORWARD": True, "FORWARD_TRANSITIVE": True,
      "FULL": True, "FULL_TRANSITIVE": True}),
    # JSON: v1 closed {a}; v2 closed {a, b}; v3 closed {a, b, c}: each adds to a closed model (BACKWARD
    # compatible against every version), and each old reader refuses the new property (FORWARD never).
    ("json closed model grows", "JSON",
     [jobj({"a": {}}, closed=True), jobj({"a": {}, "b": {}}, closed=True)],
     jobj({"a": {}, "b": {}, "c": {"type": "string"}}, closed=True),
     {"BACKWARD": True, "BACKWARD_TRANSITIVE": True, "FORWARD": False, "FORWARD_TRANSITIVE": False,
      "FULL": False, "FULL_TRANSITIVE": False}),
]


@pytest.mark.parametrize("case", TRANSITIVE, ids=[c[0] for c in TRANSITIVE])
def test_transitive_levels(case):
    _, schema_type, history, new, expected = case
    got = {level: verdict(schema_type, history, new, level) for level in LEVELS if level != "NONE"}
    assert got == expected


def test_protobuf_text_and_descriptor_are_one_schema():
    text = proto("import \"google/protobuf/timestamp.proto\";\nmessage M { int32 a = 1; map<string, int64> m = 2; "
                 "optional string o = 3; oneof k { string s = 4; int32 i = 5; } google.protobuf.Timestamp t = 6; }")
    parsed = REG.parse("PROTOBUF", text, [])
    again = REG.parse("PROTOBUF", parsed.formatted("serialized"), [])
    assert again.canonical == parsed.canonical
    assert REG.parse("PROTOBUF", parsed.canonical, []).canonical == parsed.canonical
