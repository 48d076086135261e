"""JSON Schema, validated with the ``jsonschema`` package (the draft named by ``$schema``;
draft 7 when absent, as confluent-kafka's JSONSerializer writes) and compared with Confluent's
JSON Schema compatibility rules.

The rules are those of Confluent's ``json/diff`` package: the old and the new schema are walked
side by side, every change gets a type (TYPE_CHANGED, MAX_LENGTH_DECREASED,
PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL, ...) and the new schema is backward compatible when every
change is in Confluent's strict set of compatible changes (``SchemaDiff.COMPATIBLE_CHANGES_STRICT``).
Open, closed and partially open content models (``additionalProperties``, ``patternProperties``)
decide whether adding or removing a property is safe. Local ``$ref`` (``#/definitions/..``,
``#/$defs/..``) and references to other subjects by name are followed, cycles are cut.
Not covered (treated as unchanged): ``unevaluatedProperties``/``unevaluatedItems``,
``contains``/``minContains``/``maxContains``. Canonical text: the JSON with whitespace removed, key order kept.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators

from registry.formats.base import InvalidSchema

COMPATIBLE = frozenset({
    "ID_CHANGED", "DESCRIPTION_CHANGED", "TITLE_CHANGED", "DEFAULT_CHANGED", "SCHEMA_REMOVED", "TYPE_EXTENDED",
    "MAX_LENGTH_INCREASED", "MAX_LENGTH_REMOVED", "MIN_LENGTH_DECREASED", "MIN_LENGTH_REMOVED", "PATTERN_REMOVED",
    "MAXIMUM_INCREASED", "MAXIMUM_REMOVED", "MINIMUM_DECREASED", "MINIMUM_REMOVED", "EXCLUSIVE_MAXIMUM_INCREASED",
    "EXCLUSIVE_MAXIMUM_REMOVED", "EXCLUSIVE_MINIMUM_DECREASED", "EXCLUSIVE_MINIMUM_REMOVED", "MULTIPLE_OF_REDUCED",
    "MULTIPLE_OF_REMOVED", "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED", "REQUIRED_ATTRIBUTE_REMOVED",
    "MAX_PROPERTIES_INCREASED", "MAX_PROPERTIES_REMOVED", "MIN_PROPERTIES_DECREASED", "MIN_PROPERTIES_REMOVED",
    "ADDITIONAL_PROPERTIES_ADDED", "ADDITIONAL_PROPERTIES_EXTENDED",
    "PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL", "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL",
    "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", "PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL",
    "PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL", "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", "MAX_ITEMS_INCREASED", "MAX_ITEMS_REMOVED",
    "MIN_ITEMS_DECREASED", "MIN_ITEMS_REMOVED", "UNIQUE_ITEMS_REMOVED", "DEPENDENCY_ARRAY_NARROWED",
    "DEPENDENCY_ARRAY_REMOVED", "DEPENDENCY_SCHEMA_REMOVED", "ADDITIONAL_ITEMS_ADDED", "ADDITIONAL_ITEMS_EXTENDED",
    "ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL", "ITEM_ADDED_TO_CLOSED_CONTENT_MODEL",
    "ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL", "ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL",
    "ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", "ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", "ENUM_ARRAY_EXTENDED", "COMBINED_TYPE_EXTENDED",
    "PRODUCT_TYPE_NARROWED", "SUM_TYPE_EXTENDED", "NOT_TYPE_NARROWED",
})

_TYPES_KEYWORDS = {
    "string": ("minLength", "maxLength", "pattern", "format"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
    "object": ("properties", "required", "additionalProperties", "patternProperties", "minProperties",
               "maxProperties", "dependencies"),
    "array": ("items", "minItems", "maxItems", "uniqueItems", "additionalItems", "contains"),
}
_ANNOTATIONS = {"$schema", "$id", "id", "title", "description", "default", "examples", "$comment", "definitions",
                "$defs", "readOnly", "writeOnly", "deprecated"}


def _load(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise InvalidSchema(f"{what} is not valid JSON: {e}") from None


class JsonSchema:
    schema_type = "JSON"

    def __init__(self, doc: Any, refs: dict[str, Any]) -> None:
        self.doc = doc
        self.refs = refs
        self.canonical = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)

    def formatted(self, fmt: str) -> str:
        return self.canonical

    def normalized(self) -> str:
        return json.dumps(self.doc, separators=(",", ":"), ensure_ascii=False, sort_keys=True)

    def record_name(self) -> str | None:
        """The schema's ``title`` (what confluent-kafka's RecordNameStrategy uses for JSON)."""
        return self.doc.get("title") if isinstance(self.doc, dict) else None

    def backward_errors(self, previous: object) -> list[str]:
        if not isinstance(previous, JsonSchema):
            return ["Incompatible schema type"]
        diff = _Diff(previous, self)
        diff.compare(previous.doc, self.doc, "#")
        return [f"{{errorType:\"{t}\", description:\"{_describe(t)}\", location:\"{where}\"}}"
                for t, where in diff.found if t not in COMPATIBLE]


def _describe(t: str) -> str:
    return "The new schema cannot read all data written with the old one (" + t.lower().replace("_", " ") + ")"


class JsonSchemaFormat:
    name = "JSON"

    def parse(self, schema: str, references: list[tuple[str, str]]) -> JsonSchema:
        refs = {name: _load(text, f"reference {name!r}") for name, text in references}
        doc = _load(schema, "the schema")
        if not isinstance(doc, (dict, bool)):
            raise InvalidSchema("a JSON schema is an object or a boolean")
        cls = jsonschema.validators.validator_for(doc, default=jsonschema.Draft7Validator)
        try:
            cls.check_schema(doc)
        except jsonschema.exceptions.SchemaError as e:
            raise InvalidSchema(f"{e.message} at {'/'.join(map(str, e.path)) or 'the root'}") from None
        except (RecursionError, TypeError, ValueError) as e:
            raise InvalidSchema(str(e)) from None
        return JsonSchema(doc, refs)


class _Diff:
    """Confluent's SchemaDiff over plain JSON: collects (change type, location)."""

    def __init__(self, original: JsonSchema, update: JsonSchema) -> None:
        self.roots = (original, update)
        self.found: list[tuple[str, str]] = []
        self._stack: set[tuple[int, int]] = set()

    def add(self, kind: str, where: str) -> None:
        self.found.append((kind, where))

    def compatible(self, a: Any, b: Any, where: str) -> tuple[bool, list[tuple[str, str]]]:
        sub = _Diff.__new__(_Diff)
        sub.roots, sub.found, sub._stack = self.roots, [], self._stack
        sub.compare(a, b, where)
        return all(t in COMPATIBLE for t, _ in sub.found), sub.found

    def _resolve(self, s: Any, side: int) -> Any:
        seen = 0
        while isinstance(s, dict) and isinstance(s.get("$ref"), str) and seen < 32:
            s = _follow(self.roots[side], s["$ref"])
            seen += 1
        return s

    def compare(self, original: Any, update: Any, where: str) -> None:
        if original is None and update is None:
            return
        if update is None:
            self.add("SCHEMA_REMOVED", where)
            return
        if original is None:
            self.add("SCHEMA_ADDED", where)
            return
        original, update = self._resolve(original, 0), self._resolve(update, 1)
        key = (id(original), id(update))
        if key in self._stack:  # a recursive schema: the pair is being compared already
            return
        self._stack.add(key)
        try:
            self._compare_types(original, update, where)
        finally:
            self._stack.discard(key)

    def _compare_types(self, original: Any, update: Any, where: str) -> None:
        ok, uk = _kind(original), _kind(update)
        if ok != "combined" and uk == "combined":
            crit, subs = _combined(update)
            if len(subs) == 1:
                good, diffs = self.compatible(original, subs[0], where)
                if good:
                    self.found += diffs
                    return
            elif crit in ("anyOf", "oneOf"):
                for sub in subs:
                    good, diffs = self.compatible(original, sub, where)
                    if good:
                        self.found += diffs
                        self.add("SUM_TYPE_EXTENDED", where)
                        return
        elif ok == "combined" and uk != "combined":
            crit, subs = _combined(original)
            if len(subs) == 1:
                good, diffs = self.compatible(subs[0], update, where)
                if good:
                    self.found += diffs
                    return
            elif crit == "allOf":
                for sub in subs:
                    good, diffs = self.compatible(sub, update, where)
                    if good:
                        self.found += diffs
                        self.add("PRODUCT_TYPE_NARROWED", where)
                        return
        if ok != uk:
            if ok == "false" or uk == "empty":
                return
            self.add("TYPE_CHANGED", where)
            return
        if not isinstance(original, dict) or not isinstance(update, dict):
            return
        for kw, change in (("$id", "ID_CHANGED"), ("title", "TITLE_CHANGED"), ("description", "DESCRIPTION_CHANGED"),
                           ("default", "DEFAULT_CHANGED")):
            if original.get(kw) != update.get(kw):
                self.add(change, where)
        if ok == "string":
            self._bounds(original, update, where, "maxLength", "MAX_LENGTH", larger_ok=True)
            self._bounds(original, update, where, "minLength", "MIN_LENGTH", larger_ok=False)
            op, up = original.get("pattern"), update.get("pattern")
            if op is None and up is not None:
                self.add("PATTERN_ADDED", f"{where}/pattern")
            elif op is not None and up is None:
                self.add("PATTERN_REMOVED", f"{where}/pattern")
            elif op != up:
                self.add("PATTERN_CHANGED", f"{where}/pattern")
        elif ok == "number":
            self._bounds(original, update, where, "maximum", "MAXIMUM", larger_ok=True)
            self._bounds(original, update, where, "minimum", "MINIMUM", larger_ok=False)
            self._bounds(original, update, where, "exclusiveMaximum", "EXCLUSIVE_MAXIMUM", larger_ok=True)
            self._bounds(original, update, where, "exclusiveMinimum", "EXCLUSIVE_MINIMUM", larger_ok=False)
            self._multiple_of(original, update, where)
            oi, ui = _requires_integer(original), _requires_integer(update)
            if oi and not ui:
                self.add("TYPE_EXTENDED", where)
            elif ui and not oi:
                self.add("TYPE_NARROWED", where)
        elif ok == "enum":
            ov, uv = original.get("enum") or [], update.get("enum") or []
            if ov != uv:
                if all(v in uv for v in ov):
                    self.add("ENUM_ARRAY_EXTENDED", f"{where}/enum")
                elif all(v in ov for v in uv):
                    self.add("ENUM_ARRAY_NARROWED", f"{where}/enum")
                else:
                    self.add("ENUM_ARRAY_CHANGED", f"{where}/enum")
        elif ok == "const":
            if original.get("const") != update.get("const"):
                self.add("ENUM_ARRAY_CHANGED", f"{where}/const")
        elif ok == "not":
            # A narrower "not" accepts more: compare the negated schemas the other way round.
            good, _ = self.compatible(update.get("not"), original.get("not"), f"{where}/not")
            if not good:
                self.add("NOT_TYPE_EXTENDED", f"{where}/not")
            elif original.get("not") != update.get("not"):
                self.add("NOT_TYPE_NARROWED", f"{where}/not")
        elif ok == "combined":
            self._combined(original, update, where)
        elif ok == "object":
            self._object(original, update, where)
        elif ok == "array":
            self._array(original, update, where)

    def _bounds(self, o: dict, u: dict, where: str, kw: str, name: str, *, larger_ok: bool) -> None:
        ov, uv = o.get(kw), u.get(kw)
        if isinstance(ov, bool) or isinstance(uv, bool):  # draft 4 exclusive flags: compare as values
            if ov != uv:
                self.add(f"{name}_{'ADDED' if uv else 'REMOVED'}", f"{where}/{kw}")
            return
        if ov == uv:
            return
        if ov is None:
            self.add(f"{name}_ADDED", f"{where}/{kw}")
        elif uv is None:
            self.add(f"{name}_REMOVED", f"{where}/{kw}")
        elif uv > ov:
            self.add(f"{name}_INCREASED", f"{where}/{kw}")
        else:
            self.add(f"{name}_DECREASED", f"{where}/{kw}")

    def _multiple_of(self, o: dict, u: dict, where: str) -> None:
        ov, uv = o.get("multipleOf"), u.get("multipleOf")
        if ov == uv:
            return
        at = f"{where}/multipleOf"
        if ov is None:
            self.add("MULTIPLE_OF_ADDED", at)
        elif uv is None:
            self.add("MULTIPLE_OF_REMOVED", at)
        elif ov and (uv / ov).is_integer():
            self.add("MULTIPLE_OF_EXPANDED", at)
        elif uv and (ov / uv).is_integer():
            self.add("MULTIPLE_OF_REDUCED", at)
        else:
            self.add("MULTIPLE_OF_CHANGED", at)

    def _combined(self, o: dict, u: dict, where: str) -> None:
        oc, osubs = _combined(o)
        uc, usubs = _combined(u)
        if oc != uc:
            if uc == "anyOf" or (len(osubs) == 1 and len(usubs) == 1) or (len(osubs) == 1 and uc == "oneOf") \
                    or (len(usubs) == 1 and oc == "allOf"):
                self.add("COMBINED_TYPE_EXTENDED", where)
            else:
                self.add("COMBINED_TYPE_CHANGED", where)
                return
        if len(osubs) < len(usubs):
            self.add("PRODUCT_TYPE_EXTENDED" if uc == "allOf" else "SUM_TYPE_EXTENDED", where)
        elif len(osubs) > len(usubs):
            self.add("SUM_TYPE_NARROWED" if oc in ("anyOf", "oneOf") else "PRODUCT_TYPE_NARROWED", where)
        edges: dict[int, dict[int, list[tuple[str, str]]]] = {}
        for i, a in enumerate(osubs):
            for j, b in enumerate(usubs):
                good, diffs = self.compatible(a, b, f"{where}/{oc}/{i}")
                if good:
                    edges.setdefault(i, {})[j] = diffs
        matched = _max_matching({i: list(js) for i, js in edges.items()})
        for i, j in matched.items():
            self.found += edges[i][j]
        if len(matched) < min(len(osubs), len(usubs)):
            self.add("COMBINED_TYPE_SUBSCHEMAS_CHANGED", where)

    def _object(self, o: dict, u: dict, where: str) -> None:
        oprops, uprops = o.get("properties") or {}, u.get("properties") or {}
        oreq, ureq = set(o.get("required") or []), set(u.get("required") or [])
        for name in oprops:
            if name in uprops:
                if name in oreq and name not in ureq:
                    self.add("REQUIRED_ATTRIBUTE_REMOVED", f"{where}/required/{name}")
                elif name not in oreq and name in ureq:
                    has_default = isinstance(uprops[name], dict) and "default" in uprops[name]
                    self.add("REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED" if has_default else "REQUIRED_ATTRIBUTE_ADDED",
                             f"{where}/required/{name}")
        for name in list(oprops) + [n for n in uprops if n not in oprops]:
            at = f"{where}/properties/{name}"
            osch, usch = oprops.get(name), uprops.get(name)
            if usch is None:
                if _open(u):
                    self.add("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL", at)
                elif (partial := _partial(u, name)) is not None:
                    good, diffs = self.compatible(osch, partial, at)
                    self.found += diffs
                    self.add("PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if good else
                             "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", at)
                elif osch is False:
                    self.add("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL", at)
                else:
                    self.add("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", at)
            elif osch is None:
                has_default = isinstance(usch, dict) and "default" in usch
                if _open(o):
                    if _kind(self._resolve(usch, 1)) == "empty":
                        self.add("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL", at)
                    elif name in ureq:
                        self.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL" if has_default else
                                 "REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", at)
                    else:
                        self.add("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", at)
                else:
                    if (partial := _partial(o, name)) is not None:
                        good, diffs = self.compatible(partial, usch, at)
                        self.found += diffs
                        self.add("PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if good else
                                 "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", at)
                    if name in ureq:
                        self.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL" if has_default else
                                 "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", at)
                    else:
                        self.add("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", at)
            else:
                self.compare(osch, usch, at)
        at = f"{where}/additionalProperties"
        oap, uap = o.get("additionalProperties", True), u.get("additionalProperties", True)
        if (oap is not False) != (uap is not False):
            self.add("ADDITIONAL_PROPERTIES_ADDED" if uap is not False else "ADDITIONAL_PROPERTIES_REMOVED", at)
        elif oap is True and isinstance(uap, dict):
            self.add("ADDITIONAL_PROPERTIES_NARROWED", at)
        elif uap is True and isinstance(oap, dict):
            self.add("ADDITIONAL_PROPERTIES_EXTENDED", at)
        elif isinstance(oap, dict) and isinstance(uap, dict):
            self.compare(oap, uap, at)
        self._dependencies(o, u, where)
        self._bounds(o, u, where, "maxProperties", "MAX_PROPERTIES", larger_ok=True)
        self._bounds(o, u, where, "minProperties", "MIN_PROPERTIES", larger_ok=False)

    def _array(self, o: dict, u: dict, where: str) -> None:
        oi, ui = o.get("items"), u.get("items")
        # One schema for every item (absent on one side: SCHEMA_ADDED / SCHEMA_REMOVED).
        self.compare(None if isinstance(oi, list) else oi, None if isinstance(ui, list) else ui, f"{where}/items")
        # Tuples: position by position, the rest decided by each side's content model.
        otup, utup = (oi if isinstance(oi, list) else []), (ui if isinstance(ui, list) else [])
        for i in range(min(len(otup), len(utup))):
            self.compare(otup[i], utup[i], f"{where}/items/{i}")
        for i in range(len(utup), len(otup)):
            at = f"{where}/items/{i}"
            if _items_open(u):
                self.add("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL", at)
            elif isinstance(u.get("additionalItems"), dict):
                good, diffs = self.compatible(otup[i], u["additionalItems"], at)
                self.found += diffs
                self.add("ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if good else
                         "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", at)
            else:
                self.add("ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL" if otup[i] is False else
                         "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL", at)
        for i in range(len(otup), len(utup)):
            at = f"{where}/items/{i}"
            if _items_open(o):
                self.add("ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL"
                         if _kind(self._resolve(utup[i], 1)) == "empty" else "ITEM_ADDED_TO_OPEN_CONTENT_MODEL", at)
            elif isinstance(o.get("additionalItems"), dict):
                good, diffs = self.compatible(o["additionalItems"], utup[i], at)
                self.found += diffs
                self.add("ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if good else
                         "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", at)
            else:
                self.add("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL", at)
        at = f"{where}/additionalItems"
        oa, ua = o.get("additionalItems", True), u.get("additionalItems", True)
        if (oa is not False) != (ua is not False):
            self.add("ADDITIONAL_ITEMS_REMOVED" if oa is not False else "ADDITIONAL_ITEMS_ADDED", at)
        elif not isinstance(oa, dict) and isinstance(ua, dict):
            self.add("ADDITIONAL_ITEMS_NARROWED", at)
        elif isinstance(oa, dict) and not isinstance(ua, dict):
            self.add("ADDITIONAL_ITEMS_EXTENDED", at)
        elif isinstance(oa, dict) and isinstance(ua, dict):
            self.compare(oa, ua, at)
        self._bounds(o, u, where, "maxItems", "MAX_ITEMS", larger_ok=True)
        self._bounds(o, u, where, "minItems", "MIN_ITEMS", larger_ok=False)
        if bool(o.get("uniqueItems")) != bool(u.get("uniqueItems")):
            self.add("UNIQUE_ITEMS_ADDED" if u.get("uniqueItems") else "UNIQUE_ITEMS_REMOVED", f"{where}/uniqueItems")

    def _dependencies(self, o: dict, u: dict, where: str) -> None:
        def split(s: dict) -> tuple[dict, dict]:
            arrays = {k: v for k, v in (s.get("dependencies") or {}).items() if isinstance(v, list)}
            arrays.update(s.get("dependentRequired") or {})
            schemas = {k: v for k, v in (s.get("dependencies") or {}).items() if not isinstance(v, list)}
            schemas.update(s.get("dependentSchemas") or {})
            return arrays, schemas

        (oarr, osch), (uarr, usch) = split(o), split(u)
        for name in sorted(set(oarr) | set(uarr)):
            at = f"{where}/dependencies/{name}"
            if name not in uarr:
                self.add("DEPENDENCY_ARRAY_REMOVED", at)
            elif name not in oarr:
                self.add("DEPENDENCY_ARRAY_ADDED", at)
            elif set(oarr[name]) != set(uarr[name]):
                if set(uarr[name]) >= set(oarr[name]):
                    self.add("DEPENDENCY_ARRAY_EXTENDED", at)
                elif set(oarr[name]) >= set(uarr[name]):
                    self.add("DEPENDENCY_ARRAY_NARROWED", at)
                else:
                    self.add("DEPENDENCY_ARRAY_CHANGED", at)
        for name in sorted(set(osch) | set(usch)):
            at = f"{where}/dependencies/{name}"
            if name not in usch:
                self.add("DEPENDENCY_SCHEMA_REMOVED", at)
            elif name not in osch:
                self.add("DEPENDENCY_SCHEMA_ADDED", at)
            else:
                self.compare(osch[name], usch[name], at)


def _follow(root: JsonSchema, ref: str) -> Any:
    base, _, fragment = ref.partition("#")
    doc = root.doc if not base else root.refs.get(base)
    if doc is None:
        return {}  # unresolvable: compared as the empty schema
    for part in [p for p in fragment.split("/") if p]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            return {}
    return doc


def _dedupe(subs: list[Any]) -> list[Any]:
    """Subschemas without repeats (Confluent compares them as a set)."""
    seen: set[str] = set()
    out = []
    for sub in subs:
        key = json.dumps(sub, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(sub)
    return out


def _combined(s: dict) -> tuple[str, list[Any]]:
    for crit in ("allOf", "anyOf", "oneOf"):
        if isinstance(s.get(crit), list):
            return crit, _dedupe(s[crit])
    types = s.get("type")
    if isinstance(types, list):  # "type": [a, b] is a union of the single types
        rest = {k: v for k, v in s.items() if k != "type"}
        return "anyOf", _dedupe([{**rest, "type": t} for t in types])
    for kw in ("enum", "const"):
        if kw in s and "type" in s:  # a typed enum is both: the type's schema and the enum (everit's allOf)
            return "allOf", [{k: v for k, v in s.items() if k != kw}, {kw: s[kw]}]
    return "allOf", []


def _kind(s: Any) -> str:
    if s is True:
        return "empty"
    if s is False:
        return "false"
    if not isinstance(s, dict):
        return "empty"
    if any(isinstance(s.get(c), list) for c in ("allOf", "anyOf", "oneOf")) or isinstance(s.get("type"), list):
        return "combined"
    if ("enum" in s or "const" in s) and "type" in s:
        return "combined"
    if "not" in s:
        return "not"
    if "enum" in s:
        return "enum"
    if "const" in s:
        return "const"
    t = s.get("type")
    if t in ("integer", "number"):
        return "number"
    if isinstance(t, str):
        return t
    for kind, keywords in _TYPES_KEYWORDS.items():
        if any(k in s for k in keywords):
            return kind
    return "empty"


def _items_open(s: dict) -> bool:
    return s.get("additionalItems", True) is True


def _requires_integer(s: dict) -> bool:
    return s.get("type") == "integer"


def _open(s: dict) -> bool:
    ap = s.get("additionalProperties", True)
    return ap is True and not s.get("patternProperties")


def _partial(s: dict, name: str) -> Any:
    import re

    for pattern, schema in (s.get("patternProperties") or {}).items():
        try:
            if re.search(pattern, name):
                return schema
        except re.error:
            continue
    ap = s.get("additionalProperties", True)
    return ap if isinstance(ap, dict) else None


def _max_matching(edges: dict[int, list[int]]) -> dict[int, int]:
    """Maximum bipartite matching (augmenting paths): left index -> right index."""
    match_right: dict[int, int] = {}

    def augment(i: int, seen: set[int]) -> bool:
        for j in edges.get(i, []):
            if j in seen:
                continue
            seen.add(j)
            if j not in match_right or augment(match_right[j], seen):
                match_right[j] = i
                return True
        return False

    for i in edges:
        augment(i, set())
    return {i: j for j, i in match_right.items()}
