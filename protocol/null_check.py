"""Schema-driven null checks for decoded requests: Kafka's "non-nullable field was null" parse error.

kafka-python's generic decoder turns a length of -1 into ``None`` for every string, bytes and
array field, whether or not the message JSON lists the field in ``nullableVersions``. Kafka's
generated readers instead fail the parse ("non-nullable field X was serialized as null"), and the
broker closes the connection with one log line. This module restores that rule in one place:
for each (request struct, version) it walks the schema once, keeps only the paths that may not be
null in that version, and compiles a small checker function (the same technique kafka-python
uses for its decoders), so a request costs one attribute load and ``is None`` test per
non-nullable field and element, and nothing per nullable one.

Nullable fields are left as ``None`` for the handlers, which give them Kafka's meaning (e.g.
OffsetFetch ``topics`` null = all topics).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from kafka.protocol.schemas.fields.array import ArrayField
from kafka.protocol.schemas.fields.base import BaseField
from kafka.protocol.schemas.fields.simple import SimpleField
from kafka.protocol.schemas.fields.struct import StructField

# Returns None when the request is fine, else the dotted path of the first null non-nullable field.
Checker = Callable[[Any], str | None]

_NULLABLE_KINDS = ("string", "bytes", "records")


class NullFieldError(ValueError):
    """A field that is not nullable in this version decoded to null."""


def _can_be_null(field: BaseField) -> bool:
    """Whether kafka-python's decoder can produce None for this field at all."""
    if isinstance(field, ArrayField):  # StructArrayField is a subclass
        return True
    if isinstance(field, SimpleField):
        return field._type_str in _NULLABLE_KINDS
    return False  # a plain (non-array) struct: only KIP-893 nullable structs carry a null marker


def _fields(struct: StructField, version: int) -> list[BaseField]:
    return [f for f in struct._fields if f.for_version_q(version)]


class _Gen:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.n = 0

    def var(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)


# Kafka's generated readers refuse a string longer than a short can say ("string field X had
# invalid length N"); only flexible versions (varint lengths) can carry one. Python counts
# characters: a string of at most MAX_STRING // 3 characters cannot exceed MAX_STRING UTF-8 bytes.
MAX_STRING = 0x7FFF
_SURE_SHORT = MAX_STRING // 3


def _null(path: str) -> str:
    return repr(f"non-nullable field {path} was serialized as null")


def _long(path: str, var: str) -> str:
    return f'"string field {path} had invalid length " + str(len({var}.encode()))'


def _too_long(var: str) -> str:
    return f"len({var}) > {_SURE_SHORT} and len({var}.encode()) > {MAX_STRING}"


def _emit_struct(g: _Gen, struct: StructField, version: int, obj: str, path: str, depth: int,
                 flexible: bool = False) -> bool:
    """Emit the checks for the fields of ``struct`` held in variable ``obj``; False if none needed."""
    emitted = False
    for f in _fields(struct, version):
        nullable = f.nullable_for_version_q(version)
        fpath = f"{path}{f._name}"
        is_struct_array = isinstance(f, ArrayField) and isinstance(f.array_of, StructField)
        is_simple_array = isinstance(f, ArrayField) and not is_struct_array
        elem_can_be_null = is_simple_array and f.array_of._type_str in _NULLABLE_KINDS
        needs_self = not nullable and _can_be_null(f)
        long_self = flexible and isinstance(f, SimpleField) and f._type_str == "string"
        long_elems = flexible and is_simple_array and f.array_of._type_str == "string"
        # Look inside a struct array (or plain struct) only if something below needs checking.
        inner = _Gen()
        inner.n = g.n
        item = inner.var("e")
        has_inner = False
        if is_struct_array:
            has_inner = _emit_struct(inner, f.array_of, version, item, fpath + "[].", depth + 2, flexible)
        elif isinstance(f, StructField):
            has_inner = _emit_struct(inner, f, version, item, fpath + ".", depth + 1, flexible)
        if not (needs_self or has_inner or elem_can_be_null or long_self or long_elems):
            continue
        emitted = True
        v = g.var("v")
        g.emit(depth, f"{v} = {obj}.{f.name}")
        if needs_self:
            g.emit(depth, f"if {v} is None: return {_null(fpath)}")
        if long_self:
            g.emit(depth, f"if {v} is not None and {_too_long(v)}: return {_long(fpath, v)}")
        if elem_can_be_null:
            # Elements of a []string array are never nullable in Kafka's schemas.
            guard = "" if needs_self else f"{v} is not None and "
            g.emit(depth, f"if {guard}None in {v}: return {_null(fpath + '[]')}")
        if long_elems:
            s = g.var("s")
            g.emit(depth, f"for {s} in {v} or ():")
            g.emit(depth + 1, f"if {s} is not None and {_too_long(s)}: return {_long(fpath + '[]', s)}")
        if has_inner:
            g.n = inner.n
            if is_struct_array:
                g.emit(depth, f"if {v} is not None:")
                g.emit(depth + 1, f"for {item} in {v}:")
            else:
                g.emit(depth, f"{item} = {v}")
                g.emit(depth, f"if {item} is not None:")
            g.lines.extend(inner.lines)
    return emitted


def _compile(struct: StructField, version: int, label: str, flexible: bool = False) -> Checker | None:
    g = _Gen()
    if not _emit_struct(g, struct, version, "obj", "", 1, flexible):
        return None
    src = "def _check(obj):\n" + "\n".join(g.lines) + "\n    return None\n"
    ns: dict[str, Any] = {}
    exec(compile(src, f"<null_check:{label}>", "exec"), ns)  # noqa: S102 - source built from the schema only
    return ns["_check"]  # type: ignore[no-any-return]


@cache
def checker_for(message_cls: type, version: int) -> Checker | None:
    """The compiled null check of ``message_cls`` (a kafka-python ApiMessage) at ``version``.

    None when nothing in that version can be a forbidden null (no per-request cost at all).
    """
    return _compile(message_cls._struct, version, f"{message_cls.__name__}_v{version}",
                    bool(message_cls.flexible_version_q(version)))


def source_for(message_cls: type, version: int) -> str:
    """The generated checker source (for tests and for reading what is checked)."""
    g = _Gen()
    _emit_struct(g, message_cls._struct, version, "obj", "", 1, bool(message_cls.flexible_version_q(version)))
    return "\n".join(g.lines)


def check_request(message_cls: type, version: int, request: Any) -> None:
    """Raise :class:`NullFieldError` if a non-nullable field of ``request`` is null."""
    check = checker_for(message_cls, version)
    if check is not None:
        bad = check(request)
        if bad is not None:
            raise NullFieldError(bad)
