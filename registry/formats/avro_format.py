"""Avro schemas, parsed and checked with the Apache ``avro`` package.

Canonical text: the schema's JSON with whitespace removed (key order kept), which is what is
stored and compared for "same schema". ``normalize=true`` stores the form the ``avro`` package
prints (primitive types unwrapped, names resolved), close to Confluent's normalized form.
References (named types defined in other subjects) are parsed first into the same name space.
Compatibility is Avro's schema-resolution rules (``avro.compatibility``, the port of Java's
SchemaCompatibility that Confluent's AvroSchema uses): a new schema is backward compatible when
it can read data written with the old one.
"""

from __future__ import annotations

import json

import avro.compatibility as compat
import avro.errors
import avro.name
import avro.schema

from registry.formats.base import InvalidSchema

_CHECKER = compat.ReaderWriterCompatibilityChecker()


def _parse_json(text: str, what: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise InvalidSchema(f"{what} is not valid JSON: {e}") from None


class AvroSchema:
    schema_type = "AVRO"

    def __init__(self, doc: object, parsed: avro.schema.Schema, ref_names: set[str]) -> None:
        self.doc = doc
        self.parsed = parsed
        self.ref_names = ref_names
        self.canonical = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)

    def formatted(self, fmt: str) -> str:
        return self.canonical

    def normalized(self) -> str:
        names = avro.name.Names()
        for full in self.ref_names:  # referenced types are printed by name, as in the request
            names.names[full] = None  # type: ignore[assignment]
        return json.dumps(self.parsed.to_json(names), separators=(",", ":"), ensure_ascii=False)

    def record_name(self) -> str | None:
        """The fully qualified name of a named schema (record, enum, fixed): RecordNameStrategy's subject."""
        return getattr(self.parsed, "fullname", None)

    def backward_errors(self, previous: object) -> list[str]:
        if not isinstance(previous, AvroSchema):
            return ["Incompatible schema type"]
        result = _CHECKER.get_compatibility(self.parsed, previous.parsed)
        if result.compatibility == compat.SchemaCompatibilityType.compatible:
            return []
        kinds = ", ".join(sorted(k.name.upper() for k in result.incompatibilities))
        where = ", ".join(sorted(result.locations))
        detail = "; ".join(sorted(str(m) for m in result.messages))
        return [f"{{errorType:'{kinds}', description:'{detail}', location:'{where}'}}"]


class AvroFormat:
    name = "AVRO"

    def parse(self, schema: str, references: list[tuple[str, str]]) -> AvroSchema:
        names = avro.name.Names()
        ref_names: set[str] = set()
        try:
            for ref_name, text in references:
                before = set(names.names)
                avro.schema.make_avsc_object(_parse_json(text, f"reference {ref_name!r}"), names)
                ref_names |= set(names.names) - before
            doc = _parse_json(schema, "the schema")
            parsed = avro.schema.make_avsc_object(doc, names)
        except InvalidSchema:
            raise
        except (avro.errors.AvroException, avro.errors.SchemaParseException, TypeError, KeyError,
                AttributeError, ValueError, RecursionError) as e:
            raise InvalidSchema(str(e) or type(e).__name__) from None
        return AvroSchema(doc, parsed, ref_names)
