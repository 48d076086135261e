"""The registry's state: subjects, versions, schemas by id and guid, compatibility levels and
modes, rebuilt by replaying the ``_schemas`` topic (registry.records) in offset order.

A pure state machine: ``apply`` takes one record (key, value or None for a tombstone), as
Confluent's KafkaStoreMessageHandler does; every broker builds the same state from the same log.
The highest schema id ever seen is kept even when its versions are deleted, so a primary never
gives it again while this state lives.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass

from registry import records as R


def schema_guid(schema: str, references: list[R.Reference]) -> str:
    """Confluent's guid of a schema: the UUID made of the MD5 of its text and references (name,
    subject, version as a big-endian int32), as ``rest.entities.Schema.getGuid``."""
    md = hashlib.md5(usedforsecurity=False)
    md.update(schema.encode())
    for ref in references:
        md.update(ref.name.encode())
        md.update(ref.subject.encode())
        md.update(ref.version.to_bytes(4, "big", signed=True))
    return str(uuid.UUID(bytes=md.digest()))


@dataclass(frozen=True, slots=True)
class StoredSchema:
    """The content behind an id (shared by every subject version registered with it)."""
    id: int
    schema_type: str
    schema: str
    references: tuple[R.Reference, ...]
    guid: str


class RegistryState:
    def __init__(self) -> None:
        self.versions: dict[str, dict[int, R.SchemaValue]] = {}
        self.schemas: dict[int, StoredSchema] = {}
        self.users: dict[int, set[tuple[str, int]]] = {}   # id -> (subject, version) using it
        self.by_guid: dict[str, int] = {}
        self.configs: dict[str | None, str] = {}
        self.modes: dict[str | None, str] = {}
        self.max_id = 0
        self.applied = 0  # records applied (tests, logs)

    # --- replay --------------------------------------------------------------------------------

    def apply(self, key_raw: bytes, value_raw: bytes | None) -> None:
        key = R.decode_key(key_raw)
        keytype = key["keytype"]
        subject = key.get("subject")
        if subject is not None and not isinstance(subject, str):
            raise R.BadRecord("subject is not a string")
        value = R.decode_value(value_raw) if value_raw is not None else None
        if keytype == R.SCHEMA:
            if not isinstance(subject, str) or not isinstance(key.get("version"), int):
                raise R.BadRecord("schema key without subject or version")
            if value is None:
                self._remove_version(subject, key["version"])
            else:
                self._put_version(R.schema_value_from_json(value))
        elif keytype == R.CONFIG:
            if value is None:
                self.configs.pop(subject, None)
            elif isinstance(value.get("compatibilityLevel"), str):
                self.configs[subject] = value["compatibilityLevel"]
        elif keytype == R.MODE:
            if value is None:
                self.modes.pop(subject, None)
            elif isinstance(value.get("mode"), str):
                self.modes[subject] = value["mode"]
        elif keytype == R.DELETE_SUBJECT:
            if value is not None and isinstance(subject, str):
                upto = value.get("version")
                for v, sv in self.versions.get(subject, {}).items():
                    if isinstance(upto, int) and v <= upto:
                        sv.deleted = True
        elif keytype == R.CLEAR_SUBJECT:
            if value is not None and isinstance(subject, str):
                for v in [v for v, sv in self.versions.get(subject, {}).items() if sv.deleted]:
                    self._remove_version(subject, v)
        elif keytype == R.NOOP:
            pass
        else:
            raise R.BadRecord(f"unknown keytype {keytype!r}")
        self.applied += 1

    def _put_version(self, sv: R.SchemaValue) -> None:
        if sv.version < 1 or sv.id < 0:
            raise R.BadRecord(f"schema value with version {sv.version} id {sv.id}")
        old = self.versions.get(sv.subject, {}).get(sv.version)
        if old is not None and old.id != sv.id:
            self._drop_user(old.id, sv.subject, sv.version)
        self.versions.setdefault(sv.subject, {})[sv.version] = sv
        if sv.id not in self.schemas:
            guid = schema_guid(sv.schema, sv.references)
            self.schemas[sv.id] = StoredSchema(sv.id, sv.schema_type, sv.schema, tuple(sv.references), guid)
            self.by_guid.setdefault(guid, sv.id)
        self.users.setdefault(sv.id, set()).add((sv.subject, sv.version))
        self.max_id = max(self.max_id, sv.id)

    def _remove_version(self, subject: str, version: int) -> None:
        sv = self.versions.get(subject, {}).pop(version, None)
        if sv is None:
            return
        if not self.versions[subject]:
            del self.versions[subject]
        self._drop_user(sv.id, subject, version)

    def _drop_user(self, schema_id: int, subject: str, version: int) -> None:
        users = self.users.get(schema_id)
        if users is None:
            return
        users.discard((subject, version))
        if not users:
            del self.users[schema_id]
            stored = self.schemas.pop(schema_id, None)
            if stored is not None and self.by_guid.get(stored.guid) == schema_id:
                del self.by_guid[stored.guid]

    # --- queries ---------------------------------------------------------------------------------

    def subject_versions(self, subject: str, *, deleted: bool = False) -> list[R.SchemaValue]:
        """The subject's versions in ascending order (soft-deleted ones only with ``deleted``)."""
        vs = self.versions.get(subject, {})
        return [vs[v] for v in sorted(vs) if deleted or not vs[v].deleted]

    def subjects(self, *, deleted: bool = False, deleted_only: bool = False) -> list[str]:
        out = []
        for s, vs in self.versions.items():
            live = any(not sv.deleted for sv in vs.values())
            if (deleted_only and not live) or (not deleted_only and (live or deleted)):
                out.append(s)
        return sorted(out)

    def has_subject(self, subject: str, *, deleted: bool = False) -> bool:
        return bool(self.subject_versions(subject, deleted=deleted))

    def id_for(self, schema_type: str, schema: str, references: list[R.Reference]) -> int | None:
        found = self.by_guid.get(schema_guid(schema, references))
        if found is not None and self.schemas[found].schema_type == schema_type:
            return found
        return None

    def referenced_by(self, subject: str, version: int, *, deleted: bool = False) -> list[int]:
        """Ids of the schemas (of live versions, or any with ``deleted``) that reference subject/version."""
        ids = set()
        for vs in self.versions.values():
            for sv in vs.values():
                if (deleted or not sv.deleted) and any(r.subject == subject and r.version == version
                                                       for r in sv.references):
                    ids.add(sv.id)
        return sorted(ids)

    def id_registered_for(self, subject: str, schema_id: int) -> bool:
        """A live version of ``subject`` uses ``schema_id`` (broker-side validation)."""
        for s, v in self.users.get(schema_id, ()):
            if s == subject and not self.versions[s][v].deleted:
                return True
        return False
