"""Records of the ``_schemas`` topic, in Confluent Schema Registry's format (its
``storage/*Key.java`` and ``*Value.java``), so Kafka tools and a Confluent registry read them.

Keys and values are compact JSON. Key types:
- ``SCHEMA`` ``{"keytype":"SCHEMA","subject":S,"version":V,"magic":1}`` -> a schema version
  ``{"subject","version","id","schemaType","references","schema","deleted"}``; a null value
  (tombstone) deletes the version permanently.
- ``CONFIG`` ``{"keytype":"CONFIG","subject":S|null,"magic":0}`` -> ``{"compatibilityLevel":...}``
  (subject null: the global level); null deletes it.
- ``MODE`` (same key shape) -> ``{"mode":"READWRITE"|"READONLY"|"IMPORT"}``; null deletes it.
- ``DELETE_SUBJECT`` -> ``{"subject":S,"version":V}``: soft-deletes every version <= V.
- ``CLEAR_SUBJECT`` -> ``{"subject":S}``: forgets the subject's soft-deleted versions.
- ``NOOP`` ``{"keytype":"NOOP","magic":0}`` with a null value: carries nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

SCHEMA, CONFIG, MODE, NOOP = "SCHEMA", "CONFIG", "MODE", "NOOP"
DELETE_SUBJECT, CLEAR_SUBJECT = "DELETE_SUBJECT", "CLEAR_SUBJECT"


def _dump(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True, slots=True)
class Reference:
    name: str
    subject: str
    version: int

    def to_json(self) -> dict:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(slots=True)
class SchemaValue:
    subject: str
    version: int
    id: int
    schema: str
    schema_type: str = "AVRO"
    references: list[Reference] = field(default_factory=list)
    deleted: bool = False

    def to_json(self) -> dict:
        doc: dict[str, Any] = {"subject": self.subject, "version": self.version, "id": self.id}
        if self.schema_type != "AVRO":
            doc["schemaType"] = self.schema_type
        if self.references:
            doc["references"] = [r.to_json() for r in self.references]
        doc["schema"] = self.schema
        doc["deleted"] = self.deleted
        return doc


def schema_key(subject: str, version: int) -> bytes:
    return _dump({"keytype": SCHEMA, "subject": subject, "version": version, "magic": 1})


def subject_key(keytype: str, subject: str | None) -> bytes:
    return _dump({"keytype": keytype, "subject": subject, "magic": 0})


def noop_key() -> bytes:
    return _dump({"keytype": NOOP, "magic": 0})


def encode_schema(value: SchemaValue) -> bytes:
    return _dump(value.to_json())


def encode_config(level: str) -> bytes:
    return _dump({"compatibilityLevel": level})


def encode_mode(mode: str) -> bytes:
    return _dump({"mode": mode})


def encode_delete_subject(subject: str, version: int) -> bytes:
    return _dump({"subject": subject, "version": version})


def encode_clear_subject(subject: str) -> bytes:
    return _dump({"subject": subject})


class BadRecord(ValueError):
    """A ``_schemas`` record this registry cannot read (replay skips it with a log line)."""


def decode_key(raw: bytes) -> dict:
    try:
        key = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRecord(f"key is not JSON: {e}") from None
    if not isinstance(key, dict) or not isinstance(key.get("keytype"), str):
        raise BadRecord("key has no keytype")
    return key


def decode_value(raw: bytes) -> dict:
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRecord(f"value is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise BadRecord("value is not a JSON object")
    return value


def schema_value_from_json(doc: dict) -> SchemaValue:
    try:
        refs = [Reference(str(r["name"]), str(r["subject"]), int(r["version"])) for r in doc.get("references") or []]
        return SchemaValue(subject=str(doc["subject"]), version=int(doc["version"]), id=int(doc["id"]),
                           schema=str(doc["schema"]), schema_type=str(doc.get("schemaType") or "AVRO"),
                           references=refs, deleted=bool(doc.get("deleted", False)))
    except (KeyError, TypeError, ValueError) as e:
        raise BadRecord(f"schema value misses or mistypes {e}") from None
