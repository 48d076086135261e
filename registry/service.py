"""The Schema Registry's operations (Confluent's AbstractSchemaRegistry / KafkaSchemaRegistry
semantics) over the replayed state: reads answer from the local copy, writes run on the primary
one at a time and go to ``_schemas`` before they are answered.

Every method returns the JSON-ready answer or raises registry.errors.RegistryError.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any

from registry import errors as E
from registry import records as R
from registry.formats import InvalidSchema, ParsedSchema, formats
from registry.state import StoredSchema, schema_guid
from registry.store import SchemaStore

log = logging.getLogger("registry")

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
MODES = ("READWRITE", "READONLY", "IMPORT")
DEFAULT_LEVEL = "BACKWARD"
DEFAULT_MODE = "READWRITE"
MAX_VERSION = 2**31 - 1
_PARSE_CACHE = 512


def parse_version(text: str) -> int | None:
    """A version path segment: None for "latest" (or -1), else 1..2^31-1; anything else is 42202."""
    if text == "latest" or text == "-1":
        return None
    try:
        v = int(text)
    except ValueError:
        raise E.invalid_version(text) from None
    if not 1 <= v <= MAX_VERSION:
        raise E.invalid_version(text)
    return v


def check_subject(subject: str) -> None:
    if not subject or any(ord(c) < 0x20 for c in subject) or len(subject) > 4096:
        raise E.invalid_subject(subject)


class SchemaRegistry:
    def __init__(self, store: SchemaStore, *, max_schema_bytes: int = 1 << 20) -> None:
        self.store = store
        self.max_schema_bytes = max_schema_bytes
        self.formats = formats()
        self.write_lock = asyncio.Lock()
        self._parsed: OrderedDict[tuple, ParsedSchema] = OrderedDict()

    @property
    def state(self):  # noqa: ANN201 - RegistryState; the store may replace it on a rebuild
        return self.store.state

    # --- parsing -----------------------------------------------------------------------------------

    def _references(self, refs: list[R.Reference], seen: set[tuple[str, int]] | None = None) -> list[tuple[str, str]]:
        """The transitive references of a schema as (name, text), dependencies first."""
        out: list[tuple[str, str]] = []
        seen = set() if seen is None else seen
        for ref in refs:
            if (ref.subject, ref.version) in seen:
                continue
            seen.add((ref.subject, ref.version))
            sv = self.state.versions.get(ref.subject, {}).get(ref.version)
            if sv is None:
                raise E.invalid_schema(f"reference {ref.name!r} to subject {ref.subject!r} version {ref.version} "
                                       "does not exist")
            out += self._references(sv.references, seen)
            out.append((ref.name, sv.schema))
        return out

    def _cached(self, key: tuple) -> ParsedSchema | None:
        hit = self._parsed.get(key)
        if hit is not None:
            self._parsed.move_to_end(key)
        return hit

    def _keep(self, key: tuple, parsed: ParsedSchema) -> ParsedSchema:
        self._parsed[key] = parsed
        if len(self._parsed) > _PARSE_CACHE:
            self._parsed.popitem(last=False)
        return parsed

    def _format(self, schema_type: str) -> Any:
        fmt = self.formats.get(schema_type)
        if fmt is None:
            raise E.invalid_schema(f"unknown schema type {schema_type!r}")
        return fmt

    def parse(self, schema_type: str, schema: str, refs: list[R.Reference]) -> ParsedSchema:
        key = (schema_type, schema, tuple(refs))
        hit = self._cached(key)
        if hit is not None:
            return hit
        fmt = self._format(schema_type)
        try:
            return self._keep(key, fmt.parse(schema, self._references(refs)))
        except InvalidSchema as e:
            raise E.invalid_schema(str(e)) from None

    def parse_stored(self, stored: StoredSchema | R.SchemaValue) -> ParsedSchema:
        return self.parse(stored.schema_type, stored.schema, list(stored.references))

    async def aparse(self, schema_type: str, schema: str, refs: list[R.Reference]) -> ParsedSchema:
        """``parse`` with the parsing on an executor thread: a large schema takes seconds to parse
        (the .proto grammar, jsonschema's meta-schema check) and the broker's loop must not wait.
        References are resolved on the loop, which owns the state."""
        key = (schema_type, schema, tuple(refs))
        hit = self._cached(key)
        if hit is not None:
            return hit
        fmt = self._format(schema_type)
        texts = self._references(refs)
        try:
            parsed = await asyncio.get_running_loop().run_in_executor(None, fmt.parse, schema, texts)
        except InvalidSchema as e:
            raise E.invalid_schema(str(e)) from None
        return self._keep(key, parsed)

    async def _request_schema(self, body: Any, *, normalize: bool) -> tuple[str, str, list[R.Reference], ParsedSchema]:
        """(type, stored text, references, parsed) of a register/lookup/compatibility request body."""
        if not isinstance(body, dict):
            raise E.unprocessable("the request body must be a JSON object")
        schema = body.get("schema")
        if not isinstance(schema, str):
            raise E.unprocessable("'schema' must be a string")
        if len(schema.encode()) > self.max_schema_bytes:
            raise E.schema_too_large(self.max_schema_bytes)
        schema_type = body.get("schemaType") or "AVRO"
        if not isinstance(schema_type, str):
            raise E.unprocessable("'schemaType' must be a string")
        refs_doc = body.get("references") or []
        if not isinstance(refs_doc, list):
            raise E.unprocessable("'references' must be a list")
        refs = []
        for r in refs_doc:
            if not isinstance(r, dict) or not isinstance(r.get("name"), str) or not isinstance(r.get("subject"), str) \
                    or not isinstance(r.get("version"), int):
                raise E.unprocessable("a reference needs a name, a subject and a version")
            version = r["version"]
            if version == -1:  # "latest" at registration time
                live = self.state.subject_versions(r["subject"])
                if not live:
                    raise E.invalid_schema(f"reference {r['name']!r}: subject {r['subject']!r} has no versions")
                version = live[-1].version
            refs.append(R.Reference(r["name"], r["subject"], version))
        parsed = await self.aparse(schema_type.upper(), schema, refs)
        text = parsed.normalized() if normalize else parsed.canonical
        if len(text.encode()) > self.max_schema_bytes:
            raise E.schema_too_large(self.max_schema_bytes)
        return schema_type.upper(), text, refs, parsed

    # --- shapes of answers ---------------------------------------------------------------------------

    async def _schema_fields(self, schema_type: str, text: str, refs: tuple | list, fmt: str = "",
                             parsed: ParsedSchema | None = None) -> dict:
        doc: dict[str, Any] = {}
        if schema_type != "AVRO":
            doc["schemaType"] = schema_type
        if refs:
            doc["references"] = [r.to_json() for r in refs]
        if fmt:
            parsed = parsed or await self.aparse(schema_type, text, list(refs))
            text = parsed.formatted(fmt)
        doc["schema"] = text
        return doc

    async def version_doc(self, sv: R.SchemaValue, fmt: str = "") -> dict:
        doc = {"subject": sv.subject, "version": sv.version, "id": sv.id,
               "guid": schema_guid(sv.schema, sv.references)}
        doc.update(await self._schema_fields(sv.schema_type, sv.schema, sv.references, fmt))
        if sv.deleted:
            doc["deleted"] = True
        return doc

    # --- reads ------------------------------------------------------------------------------------

    def config_of(self, subject: str | None) -> str:
        st = self.state
        return st.configs.get(subject) or st.configs.get(None) or DEFAULT_LEVEL

    def mode_of(self, subject: str | None) -> str:
        st = self.state
        return st.modes.get(subject) or st.modes.get(None) or DEFAULT_MODE

    def subjects(self, *, prefix: str = "", deleted: bool = False, deleted_only: bool = False) -> list[str]:
        return [s for s in self.state.subjects(deleted=deleted, deleted_only=deleted_only) if s.startswith(prefix)]

    def versions(self, subject: str, *, deleted: bool = False, deleted_only: bool = False) -> list[int]:
        all_versions = self.state.subject_versions(subject, deleted=True)
        if not all_versions or (not deleted and not deleted_only and all(v.deleted for v in all_versions)):
            raise E.subject_not_found(subject)
        if deleted_only:
            return [v.version for v in all_versions if v.deleted]
        return [v.version for v in all_versions if deleted or not v.deleted]

    def get_version(self, subject: str, version: int | None, *, deleted: bool = False) -> R.SchemaValue:
        everything = self.state.subject_versions(subject, deleted=True)
        if not everything:
            raise E.subject_not_found(subject)
        visible = [v for v in everything if deleted or not v.deleted]
        if version is None:
            if not visible:
                raise E.subject_not_found(subject)
            return visible[-1]
        for sv in visible:
            if sv.version == version:
                return sv
        raise E.version_not_found(version)

    async def schema_by_id(self, schema_id: int, fmt: str = "", subject: str | None = None) -> dict:
        stored = self.state.schemas.get(schema_id)
        if stored is None or (subject and not any(s == subject for s, _ in self.state.users.get(schema_id, ()))):
            raise E.schema_not_found(schema_id)
        doc = await self._schema_fields(stored.schema_type, stored.schema, stored.references, fmt)
        doc["guid"] = stored.guid
        return doc

    async def schema_by_guid(self, guid: str, fmt: str = "") -> dict:
        schema_id = self.state.by_guid.get(guid)
        if schema_id is None:
            raise E.schema_not_found(guid)
        doc = await self.schema_by_id(schema_id, fmt)
        doc["id"] = schema_id
        return doc

    def id_users(self, schema_id: int, *, deleted: bool = False) -> list[tuple[str, int]]:
        if schema_id not in self.state.schemas:
            raise E.schema_not_found(schema_id)
        out = []
        for subject, version in sorted(self.state.users.get(schema_id, ())):
            if deleted or not self.state.versions[subject][version].deleted:
                out.append((subject, version))
        return out

    async def lookup(self, subject: str, body: Any, *, normalize: bool, deleted: bool, fmt: str) -> dict:
        check_subject(subject)
        if not self.state.has_subject(subject, deleted=True):
            raise E.subject_not_found(subject)
        normalize = normalize or False
        schema_type, text, refs, parsed = await self._request_schema(body, normalize=normalize)
        candidates = {text, parsed.canonical, parsed.normalized()}
        for sv in reversed(self.state.subject_versions(subject, deleted=deleted)):
            if sv.schema_type == schema_type and sv.references == refs and sv.schema in candidates:
                return await self.version_doc(sv, fmt)
        raise E.schema_not_found()

    def _compat_errors(self, level: str, parsed: ParsedSchema, previous: list[R.SchemaValue]) -> list[str]:
        """Confluent's CompatibilityChecker: BACKWARD* = the new schema reads the old ones' data,
        FORWARD* = the old ones read the new one's, FULL* both; non-transitive = the latest only."""
        against = _against(level, previous)
        return _compare(level, parsed, [(sv, self.parse_stored(sv)) for sv in against])

    async def _compat_errors_async(self, level: str, parsed: ParsedSchema, previous: list[R.SchemaValue]) -> list[str]:
        """``_compat_errors`` with the parsing and the checks on an executor thread (a check of two
        large Avro records takes seconds)."""
        against = _against(level, previous)
        olds = [(sv, await self.aparse(sv.schema_type, sv.schema, list(sv.references))) for sv in against]
        if not olds:
            return []
        return await asyncio.get_running_loop().run_in_executor(None, _compare, level, parsed, olds)

    async def check_compatibility(self, subject: str, version_text: str | None, body: Any, *, normalize: bool,
                                  verbose: bool) -> dict:
        check_subject(subject)
        _, _, _, parsed = await self._request_schema(body, normalize=normalize)
        level = self.config_of(subject)
        if version_text is None:
            previous = self.state.subject_versions(subject)
        else:
            version = parse_version(version_text)
            if version is None and not self.state.has_subject(subject):
                previous = []
                if not self.state.has_subject(subject, deleted=True):
                    raise E.subject_not_found(subject)
            else:
                previous = [self.get_version(subject, version)]
            level = level if level == "NONE" else level.removesuffix("_TRANSITIVE")
        errors = await self._compat_errors_async(level, parsed, previous)
        doc: dict[str, Any] = {"is_compatible": not errors}
        if verbose:
            doc["messages"] = errors
        return doc

    def referenced_by(self, subject: str, version: int | None) -> list[int]:
        sv = self.get_version(subject, version)
        return self.state.referenced_by(subject, sv.version)

    # --- writes (the caller holds write_lock on the primary, replayed to the log end) ---------------------

    def _writable(self, subject: str | None) -> str:
        mode = self.mode_of(subject)
        if mode == "READONLY":
            raise E.not_permitted(f"Subject {subject} is in read-only mode" if subject else
                                  "The registry is in read-only mode")
        return mode

    async def register(self, subject: str, body: Any, *, normalize: bool) -> dict:
        check_subject(subject)
        mode = self._writable(subject)
        if not isinstance(body, dict):
            raise E.unprocessable("the request body must be a JSON object")
        want_id, want_version = body.get("id"), body.get("version")
        for name, val in (("id", want_id), ("version", want_version)):
            if val is not None and (not isinstance(val, int) or isinstance(val, bool)):
                raise E.unprocessable(f"'{name}' must be an integer")
        if want_id is not None and want_id >= 0 and mode != "IMPORT":
            raise E.not_permitted(f"Subject {subject} is not in import mode")
        schema_type, text, refs, parsed = await self._request_schema(body, normalize=normalize)
        st = self.state
        everything = st.subject_versions(subject, deleted=True)
        live = [sv for sv in everything if not sv.deleted]
        # Already registered under this subject: the same answer again (registration is idempotent).
        if want_version in (None, 0, -1):
            for sv in reversed(live):
                if sv.schema_type == schema_type and sv.references == refs and sv.schema in (text, parsed.canonical):
                    if want_id in (None, -1) or want_id == sv.id:
                        return self._register_answer(sv)
        existing = st.id_for(schema_type, text, refs)
        if want_id is not None and want_id >= 0:
            stored = st.schemas.get(want_id)
            if stored is not None and (stored.schema != text or stored.schema_type != schema_type
                                       or list(stored.references) != refs):
                raise E.id_does_not_match(f"Schema already registered with id {want_id} instead of input id")
            schema_id = want_id
        elif existing is not None:
            schema_id = existing
        else:
            schema_id = st.max_id + 1
        if mode != "IMPORT":
            errors = await self._compat_errors_async(self.config_of(subject), parsed, live)
            if errors:
                log.info("schema for subject %r refused as incompatible: %s", subject, errors[0])
                raise E.incompatible(subject, errors)
        next_version = max((sv.version for sv in everything), default=0) + 1
        version = want_version if want_version not in (None, 0, -1) else next_version
        if version != next_version and mode != "IMPORT":
            raise E.invalid_schema("Version is not one more than previous version")
        if not 1 <= version <= MAX_VERSION:
            raise E.invalid_version(version)
        value = R.SchemaValue(subject, version, schema_id, text, schema_type, refs)
        records: list[tuple[bytes, bytes | None]] = []
        # A soft-deleted earlier version with the same id is dropped (Confluent does the same).
        for sv in everything:
            if sv.deleted and sv.id == schema_id and sv.version < version and not st.referenced_by(
                    subject, sv.version, deleted=True):
                records.append((R.schema_key(subject, sv.version), None))
        records.append((R.schema_key(subject, version), R.encode_schema(value)))
        await self.store.write(records)
        log.info("registered schema id %d as %r version %d (%s)", schema_id, subject, version, schema_type)
        return self._register_answer(value)

    def _register_answer(self, sv: R.SchemaValue) -> dict:
        doc: dict[str, Any] = {"id": sv.id, "version": sv.version, "guid": schema_guid(sv.schema, sv.references)}
        if sv.schema_type != "AVRO":
            doc["schemaType"] = sv.schema_type
        if sv.references:
            doc["references"] = [r.to_json() for r in sv.references]
        return doc

    async def delete_version(self, subject: str, version_text: str, *, permanent: bool) -> int:
        version = parse_version(version_text)
        self._writable(subject)
        everything = self.state.subject_versions(subject, deleted=True)
        if not everything:
            raise E.subject_not_found(subject)
        if version is None:
            live = [sv for sv in everything if not sv.deleted]
            if not live:
                raise E.subject_not_found(subject)
            sv = live[-1]
        else:
            found = [sv for sv in everything if sv.version == version]
            if not found:
                raise E.version_not_found(version)
            sv = found[0]
        if permanent:
            if not sv.deleted:
                raise E.version_not_soft_deleted(subject, sv.version)
            if self.state.referenced_by(subject, sv.version, deleted=True):
                raise E.reference_exists(f"{subject} version {sv.version}")
            await self.store.write([(R.schema_key(subject, sv.version), None)])
        else:
            if sv.deleted:
                raise E.version_soft_deleted(subject, sv.version)
            if self.state.referenced_by(subject, sv.version):
                raise E.reference_exists(f"{subject} version {sv.version}")
            gone = R.SchemaValue(sv.subject, sv.version, sv.id, sv.schema, sv.schema_type, list(sv.references), True)
            await self.store.write([(R.schema_key(subject, sv.version), R.encode_schema(gone))])
        log.info("%s deleted %r version %d", "permanently" if permanent else "soft-", subject, sv.version)
        return sv.version

    async def delete_subject(self, subject: str, *, permanent: bool) -> list[int]:
        self._writable(subject)
        everything = self.state.subject_versions(subject, deleted=True)
        if not everything:
            raise E.subject_not_found(subject)
        live = [sv for sv in everything if not sv.deleted]
        if permanent:
            if live:
                raise E.subject_not_soft_deleted(subject)
            for sv in everything:
                refs = [i for i in self.state.referenced_by(subject, sv.version, deleted=True)
                        if not all(s == subject for s, _ in self.state.users.get(i, ()))]
                if refs:
                    raise E.reference_exists(f"{subject} version {sv.version}")
            records: list[tuple[bytes, bytes | None]] = [(R.schema_key(subject, sv.version), None)
                                                         for sv in reversed(everything)]
            if subject in self.state.modes:
                records.append((R.subject_key(R.MODE, subject), None))
            if subject in self.state.configs:
                records.append((R.subject_key(R.CONFIG, subject), None))
            await self.store.write(records)
            log.info("permanently deleted subject %r (versions %s)", subject, [sv.version for sv in everything])
            return [sv.version for sv in everything]
        if not live:
            raise E.subject_soft_deleted(subject)
        for sv in live:
            refs = [i for i in self.state.referenced_by(subject, sv.version)
                    if not all(s == subject for s, _ in self.state.users.get(i, ()))]
            if refs:
                raise E.reference_exists(f"{subject} version {sv.version}")
        await self.store.write([(R.subject_key(R.DELETE_SUBJECT, subject),
                                 R.encode_delete_subject(subject, live[-1].version))])
        log.info("soft-deleted subject %r (versions %s)", subject, [sv.version for sv in live])
        return [sv.version for sv in live]

    async def set_config(self, subject: str | None, body: Any) -> dict:
        if subject is not None:
            check_subject(subject)
        if not isinstance(body, dict):
            raise E.unprocessable("the request body must be a JSON object")
        level = body.get("compatibility", body.get("compatibilityLevel"))
        if not isinstance(level, str) or level.upper() not in LEVELS:
            raise E.invalid_compatibility(level)
        level = level.upper()
        await self.store.write([(R.subject_key(R.CONFIG, subject), R.encode_config(level))])
        log.info("compatibility of %s set to %s", repr(subject) if subject else "the registry", level)
        return {"compatibility": level}

    async def delete_config(self, subject: str | None) -> dict:
        previous = self.config_of(subject)
        if subject is not None and subject not in self.state.configs:
            if not self.state.has_subject(subject, deleted=True):
                raise E.subject_not_found(subject)
            raise E.subject_config_not_found(subject)
        await self.store.write([(R.subject_key(R.CONFIG, subject), None)])
        return {"compatibilityLevel": previous}

    async def set_mode(self, subject: str | None, body: Any, *, force: bool) -> dict:
        if subject is not None:
            check_subject(subject)
        if not isinstance(body, dict):
            raise E.unprocessable("the request body must be a JSON object")
        mode = body.get("mode")
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise E.invalid_mode(mode)
        mode = mode.upper()
        if mode == "IMPORT" and not force:
            has = self.state.has_subject(subject) if subject is not None else bool(self.state.subjects())
            if has:
                raise E.not_permitted("Cannot import since found existing subjects")
        await self.store.write([(R.subject_key(R.MODE, subject), R.encode_mode(mode))])
        log.info("mode of %s set to %s", repr(subject) if subject else "the registry", mode)
        return {"mode": mode}

    async def delete_mode(self, subject: str | None) -> dict:
        previous = self.mode_of(subject)
        if subject is not None and subject not in self.state.modes:
            raise E.subject_mode_not_found(subject)
        await self.store.write([(R.subject_key(R.MODE, subject), None)])
        return {"mode": previous}


def _against(level: str, previous: list[R.SchemaValue]) -> list[R.SchemaValue]:
    """The versions a level compares with: none, the latest, or all (transitive), newest first."""
    if level == "NONE" or not previous:
        return []
    return list(reversed(previous if level.endswith("_TRANSITIVE") else previous[-1:]))


def _compare(level: str, parsed: ParsedSchema, olds: list[tuple[R.SchemaValue, ParsedSchema]]) -> list[str]:
    """Pure: the errors of ``parsed`` against each earlier version (stops at the first failing one)."""
    for sv, old in olds:
        errors: list[str] = []
        if level.startswith(("BACKWARD", "FULL")):
            errors += parsed.backward_errors(old)
        if level.startswith(("FORWARD", "FULL")):
            errors += old.backward_errors(parsed)
        if errors:
            return [*errors, f"{{oldSchemaVersion: {sv.version}}}", f"{{oldSchema: '{sv.schema}'}}",
                    f"{{compatibility: '{level}'}}"]
    return []
