"""What every schema format module implements (registry/formats/*_format.py), and the error a
schema that does not parse raises."""

from __future__ import annotations

from typing import Protocol


class InvalidSchema(ValueError):
    """The schema does not parse or is not valid in its format (answered 42201)."""


class ParsedSchema(Protocol):
    schema_type: str
    canonical: str  # the text stored in _schemas and compared for "same schema"

    def formatted(self, fmt: str) -> str:
        """The schema in the requested ``format`` query value ('' = the stored text)."""

    def normalized(self) -> str:
        """The text stored when the request asked ``normalize=true``."""

    def record_name(self) -> str | None:
        """The schema's fully qualified record name (RecordNameStrategy subjects)."""

    def backward_errors(self, previous: ParsedSchema) -> list[str]:
        """Why data written with ``previous`` cannot be read with this schema ([] = it can)."""


class SchemaFormat(Protocol):
    name: str

    def parse(self, schema: str, references: list[tuple[str, str]]) -> ParsedSchema: ...
