"""Schema formats of the registry: one module per format, each turning a schema string (plus its
resolved references) into a ParsedSchema that knows its canonical text and its compatibility
with an earlier schema of the same format.

``references`` is an ordered list of (reference name, schema text), dependencies before the
schemas that use them, so a format can define the referenced names first.
"""

from __future__ import annotations

from registry.formats.base import InvalidSchema, ParsedSchema, SchemaFormat

__all__ = ["InvalidSchema", "ParsedSchema", "SchemaFormat", "formats"]


def formats() -> dict[str, SchemaFormat]:
    from registry.formats.avro_format import AvroFormat
    from registry.formats.json_format import JsonSchemaFormat
    from registry.formats.protobuf_format import ProtobufFormat

    return {f.name: f for f in (AvroFormat(), JsonSchemaFormat(), ProtobufFormat())}
