"""Protobuf schemas: ``.proto`` text or a base64 ``FileDescriptorProto`` (what confluent-kafka's
ProtobufSerializer registers), both accepted; references are other subjects' files, imported
by their reference name. Well-known files (``google/protobuf/*``, ``google/type/*`` when
googleapis-common-protos is installed, ``confluent/*``) resolve without references, as
confluent-kafka's serializer skips them.

The schema is validated by adding it to a fresh protobuf DescriptorPool (type resolution,
duplicate numbers and names); the stored canonical form is the resolved descriptor printed as
``.proto`` text (registry.formats.protobuf_text), so the same schema registered as text or as a
descriptor gets the same id. ``format=serialized`` answers the base64 FileDescriptorProto.

Compatibility follows Confluent's ``protobuf/diff`` rules: fields are matched by number; a
removed or added field, a renamed field or message, added/removed enum constants and moved
messages are compatible; a changed kind (scalar/message/map), a scalar moved to another wire
group (varint ints and bool and enums / zigzag / fixed32 / fixed64 / string-bytes / float /
double), a changed label on a number field, a required field added or removed, a oneof member
removed, previously independent fields moved into one oneof, or a changed package are not.
"""

from __future__ import annotations

import base64
import binascii
import functools
import importlib

from google.protobuf import descriptor_pb2 as D
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from registry.formats.base import InvalidSchema
from registry.formats.protobuf_text import parse_text, print_file

_WELL_KNOWN_MODULES = [
    "google.protobuf.any_pb2", "google.protobuf.api_pb2", "google.protobuf.descriptor_pb2",
    "google.protobuf.duration_pb2", "google.protobuf.empty_pb2", "google.protobuf.field_mask_pb2",
    "google.protobuf.source_context_pb2", "google.protobuf.struct_pb2", "google.protobuf.timestamp_pb2",
    "google.protobuf.type_pb2", "google.protobuf.wrappers_pb2",
    "google.type.calendar_period_pb2", "google.type.color_pb2", "google.type.date_pb2", "google.type.datetime_pb2",
    "google.type.dayofweek_pb2", "google.type.expr_pb2", "google.type.fraction_pb2", "google.type.latlng_pb2",
    "google.type.money_pb2", "google.type.month_pb2", "google.type.postal_address_pb2",
    "google.type.quaternion_pb2", "google.type.timeofday_pb2", "google.type.decimal_pb2",
    "google.type.interval_pb2", "google.type.localized_text_pb2", "google.type.phone_number_pb2",
    "confluent_kafka.schema_registry.confluent.meta_pb2",
    "confluent_kafka.schema_registry.confluent.types.decimal_pb2",
]


@functools.cache
def _builtins() -> dict[str, D.FileDescriptorProto]:
    """Well-known file name -> its descriptor, from the modules installed here."""
    found: dict[str, D.FileDescriptorProto] = {}
    for mod in _WELL_KNOWN_MODULES:
        try:
            m = importlib.import_module(mod)
        except Exception:  # noqa: BLE001 - an optional package (or its imports) is missing
            continue
        fdp = D.FileDescriptorProto()
        m.DESCRIPTOR.CopyToProto(fdp)
        found[fdp.name] = fdp
    return found


def is_builtin(name: str) -> bool:
    return name.startswith(("google/protobuf/", "google/type/", "confluent/"))


def _add_builtin(pool: descriptor_pool.DescriptorPool, name: str, added: set[str]) -> None:
    if name in added:
        return
    fdp = _builtins().get(name)
    if fdp is None:
        raise InvalidSchema(f"import {name!r} is neither a reference nor a known well-known file")
    for dep in fdp.dependency:
        _add_builtin(pool, dep, added)
    pool.Add(fdp)
    added.add(name)


def _decode_descriptor(schema: str) -> D.FileDescriptorProto | None:
    """A base64 FileDescriptorProto, or None when ``schema`` is not one (then it is .proto text)."""
    text = schema.strip()
    if not text or any(c in text for c in " ;{}\"\n"):
        return None
    try:
        raw = base64.b64decode(text, validate=True)
        fdp = D.FileDescriptorProto()
        fdp.ParseFromString(raw)
    except (binascii.Error, ValueError, Exception):  # noqa: BLE001 - DecodeError and friends
        return None
    return fdp


class ProtobufSchema:
    schema_type = "PROTOBUF"

    def __init__(self, pool: descriptor_pool.DescriptorPool, fdp: D.FileDescriptorProto) -> None:
        self.pool = pool
        self.fdp = fdp
        self.canonical = print_file(fdp)
        self._serialized: str | None = None

    def formatted(self, fmt: str) -> str:
        if fmt == "serialized":
            if self._serialized is None:
                self._serialized = base64.standard_b64encode(self.fdp.SerializeToString()).decode()
            return self._serialized
        return self.canonical

    def normalized(self) -> str:
        return self.canonical

    def record_name(self) -> str | None:
        """The first message's full name (message index 0)."""
        if not self.fdp.message_type:
            return None
        name = self.fdp.message_type[0].name
        return f"{self.fdp.package}.{name}" if self.fdp.package else name

    def backward_errors(self, previous: object) -> list[str]:
        if not isinstance(previous, ProtobufSchema):
            return ["Incompatible schema type"]
        diff = _Diff(previous, self)
        return [f"{{errorType:'{t}', description:'{_describe(t)}', location:'{where}'}}"
                for t, where in diff.run() if t not in COMPATIBLE]


def _describe(t: str) -> str:
    return "The new schema cannot read all data written with the old one (" + t.lower().replace("_", " ") + ")"


class ProtobufFormat:
    name = "PROTOBUF"

    def parse(self, schema: str, references: list[tuple[str, str]]) -> ProtobufSchema:
        pool = descriptor_pool.DescriptorPool()
        added: set[str] = set()
        try:
            for ref_name, text in references:
                if ref_name in added:
                    continue
                ref = _decode_descriptor(text) or parse_text(text, ref_name)
                ref.name = ref_name
                self._add(pool, ref, added)
            fdp = _decode_descriptor(schema)
            if fdp is None:
                fdp = parse_text(schema, "schema.proto")
            if not fdp.name or fdp.name in added:
                fdp.name = "schema.proto" if "schema.proto" not in added else "schema-main.proto"
            self._add(pool, fdp, added)
            resolved = D.FileDescriptorProto()
            pool.FindFileByName(fdp.name).CopyToProto(resolved)
        except InvalidSchema:
            raise
        except RecursionError:
            raise InvalidSchema("the schema nests too deeply") from None
        except Exception as e:  # noqa: BLE001 - the pool's TypeError/KeyError carry the reason
            raise InvalidSchema(str(e) or type(e).__name__) from None
        if resolved.syntax not in ("", "proto2", "proto3"):
            raise InvalidSchema(f"Protobuf {resolved.syntax} files are not supported")
        return ProtobufSchema(pool, resolved)

    @staticmethod
    def _add(pool: descriptor_pool.DescriptorPool, fdp: D.FileDescriptorProto, added: set[str]) -> None:
        for dep in fdp.dependency:
            if dep not in added:
                _add_builtin(pool, dep, added)
        pool.Add(fdp)
        added.add(fdp.name)


# --- compatibility (Confluent's protobuf/diff) ----------------------------------------------------

COMPATIBLE = frozenset({
    "MESSAGE_ADDED", "MESSAGE_MOVED", "ENUM_ADDED", "ENUM_REMOVED", "ENUM_CONST_ADDED", "ENUM_CONST_CHANGED",
    "ENUM_CONST_REMOVED", "FIELD_ADDED", "FIELD_REMOVED", "FIELD_NAME_CHANGED", "FIELD_STRING_OR_BYTES_LABEL_CHANGED",
    "ONEOF_ADDED", "ONEOF_REMOVED", "ONEOF_FIELD_ADDED", "ONEOF_FIELD_MOVED_TO_TOP_LEVEL",
})

T = FieldDescriptor
_SCALAR_KIND = {
    T.TYPE_INT32: "GENERAL_NUMBER", T.TYPE_INT64: "GENERAL_NUMBER", T.TYPE_UINT32: "GENERAL_NUMBER",
    T.TYPE_UINT64: "GENERAL_NUMBER", T.TYPE_BOOL: "GENERAL_NUMBER", T.TYPE_ENUM: "GENERAL_NUMBER",
    T.TYPE_SINT32: "SIGNED_NUMBER", T.TYPE_SINT64: "SIGNED_NUMBER",
    T.TYPE_STRING: "STRING_OR_BYTES", T.TYPE_BYTES: "STRING_OR_BYTES",
    T.TYPE_FIXED32: "FIXED32", T.TYPE_SFIXED32: "FIXED32", T.TYPE_FIXED64: "FIXED64", T.TYPE_SFIXED64: "FIXED64",
    T.TYPE_FLOAT: "FLOAT", T.TYPE_DOUBLE: "DOUBLE",
}


def _is_map(desc: Descriptor | None) -> bool:
    return desc is not None and desc.GetOptions().map_entry


def _synthetic(field: FieldDescriptor) -> bool:
    o = field.containing_oneof
    return o is not None and len(o.fields) == 1 and o.name == "_" + field.name and field.has_presence


def _label(field: FieldDescriptor, syntax: str) -> str | None:
    """Confluent's label of a field as written in .proto text (None: proto3 without a label)."""
    if field.is_repeated:
        return "REPEATED"
    if field.is_required:
        return "REQUIRED"
    if syntax == "proto3" and not _synthetic(field):
        return None
    return "OPTIONAL"


class _Diff:
    def __init__(self, original: ProtobufSchema, update: ProtobufSchema) -> None:
        self.schemas = (original, update)
        self.found: list[tuple[str, str]] = []
        self._seen: set[tuple[str, str]] = set()
        self._syntax = (original.fdp.syntax or "proto2", update.fdp.syntax or "proto2")

    def run(self) -> list[tuple[str, str]]:
        o, u = self.schemas
        if o.fdp.package != u.fdp.package:
            self.found.append(("PACKAGE_CHANGED", "#/"))
        fo = o.pool.FindFileByName(o.fdp.name)
        fu = u.pool.FindFileByName(u.fdp.name)
        self._types(list(fo.message_types_by_name.values()), list(fu.message_types_by_name.values()),
                    list(fo.enum_types_by_name.values()), list(fu.enum_types_by_name.values()), "#/")
        return self.found

    def _types(self, omsgs: list, umsgs: list, oenums: list, uenums: list, path: str) -> None:
        om = {m.name: (i, m) for i, m in enumerate(omsgs)}
        um = {m.name: (i, m) for i, m in enumerate(umsgs)}
        for name in sorted(set(om) | set(um)):
            at = f"{path}{name}"
            if name not in um:
                if not _is_map(om[name][1]):
                    self.found.append(("MESSAGE_REMOVED", at))
            elif name not in om:
                if not _is_map(um[name][1]):
                    self.found.append(("MESSAGE_ADDED", at))
            else:
                self._message(om[name][1], um[name][1], at)
                if om[name][0] != um[name][0]:
                    self.found.append(("MESSAGE_MOVED", at))
        oe = {e.name: e for e in oenums}
        ue = {e.name: e for e in uenums}
        for name in sorted(set(oe) | set(ue)):
            at = f"{path}{name}"
            if name not in ue:
                self.found.append(("ENUM_REMOVED", at))
            elif name not in oe:
                self.found.append(("ENUM_ADDED", at))
            else:
                ov = {v.number: v.name for v in oe[name].values}
                uv = {v.number: v.name for v in ue[name].values}
                for num in sorted(set(ov) | set(uv)):
                    if num not in uv:
                        self.found.append(("ENUM_CONST_REMOVED", f"{at}/{num}"))
                    elif num not in ov:
                        self.found.append(("ENUM_CONST_ADDED", f"{at}/{num}"))
                    elif ov[num] != uv[num]:
                        self.found.append(("ENUM_CONST_CHANGED", f"{at}/{num}"))

    def _message(self, o: Descriptor, u: Descriptor, path: str) -> None:
        key = (o.full_name, u.full_name)
        if key in self._seen:
            return
        self._seen.add(key)
        by_tag_o = {f.number: f for f in o.fields}
        by_tag_u = {f.number: f for f in u.fields}
        oneof_o = {f.number: f.containing_oneof.name for f in o.fields if f.containing_oneof and not _synthetic(f)}
        oneof_u = {f.number: f.containing_oneof.name for f in u.fields if f.containing_oneof and not _synthetic(f)}
        names_o = {x.name: x for x in o.oneofs if not (len(x.fields) == 1 and _synthetic(x.fields[0]))}
        names_u = {x.name: x for x in u.oneofs if not (len(x.fields) == 1 and _synthetic(x.fields[0]))}
        deleted = {n for n, x in names_o.items()
                   if n not in names_u and not any(f.number in by_tag_u for f in x.fields)}
        for name, x in names_u.items():
            groups = set()
            moved_in = 0
            for f in x.fields:
                if f.number in oneof_o:
                    groups.add("oneof:" + oneof_o[f.number])
                elif f.number in by_tag_o:
                    groups.add(f"field:{f.number}")
                    moved_in += 1
            if len(groups) > 1:
                self.found.append(("MULTIPLE_FIELDS_MOVED_TO_ONEOF" if moved_in > 1 else "FIELD_MOVED_TO_EXISTING_ONEOF",
                                   f"{path}/{name}"))
        for name in sorted(set(names_o) | set(names_u)):
            if name not in names_u:
                self.found.append(("ONEOF_REMOVED", f"{path}/{name}"))
            elif name not in names_o:
                self.found.append(("ONEOF_ADDED", f"{path}/{name}"))
        so, su = self._syntax
        for tag in sorted(set(by_tag_o) | set(by_tag_u)):
            fo, fu = by_tag_o.get(tag), by_tag_u.get(tag)
            if fu is None:
                if tag in oneof_o:
                    if oneof_o[tag] not in deleted:
                        self.found.append(("ONEOF_FIELD_REMOVED", f"{path}/{oneof_o[tag]}/{tag}"))
                else:
                    self.found.append(("REQUIRED_FIELD_REMOVED" if fo.is_required else "FIELD_REMOVED",
                                       f"{path}/{tag}"))
            elif fo is None:
                if tag in oneof_u:
                    self.found.append(("ONEOF_FIELD_ADDED", f"{path}/{oneof_u[tag]}/{tag}"))
                else:
                    self.found.append(("REQUIRED_FIELD_ADDED" if fu.is_required else "FIELD_ADDED",
                                       f"{path}/{tag}"))
            else:
                if tag in oneof_o and tag not in oneof_u:
                    self.found.append(("ONEOF_FIELD_MOVED_TO_TOP_LEVEL", f"{path}/{tag}"))
                at = f"{path}/{oneof_u[tag]}/{tag}" if tag in oneof_u else f"{path}/{tag}"
                if fo.name != fu.name:
                    self.found.append(("FIELD_NAME_CHANGED", at))
                self._labels_and_types(fo, fu, _label(fo, so), _label(fu, su), at)
        self._types(list(o.nested_types), list(u.nested_types), list(o.enum_types), list(u.enum_types), path + "/")

    def _kind(self, f: FieldDescriptor) -> str:
        if f.type == T.TYPE_MESSAGE:
            return "MAP" if _is_map(f.message_type) else "MESSAGE"
        if f.type == T.TYPE_GROUP:
            return "MESSAGE"
        return "SCALAR"

    def _labels_and_types(self, fo: FieldDescriptor, fu: FieldDescriptor, lo: str | None, lu: str | None,
                          at: str) -> None:
        ko, ku = self._kind(fo), self._kind(fu)
        if ko != ku:
            self.found.append(("FIELD_KIND_CHANGED", at))
            return
        if ko == "SCALAR":
            so, su = _SCALAR_KIND[fo.type], _SCALAR_KIND[fu.type]
            if so != su:
                self.found.append(("FIELD_SCALAR_KIND_CHANGED", at))
            elif lo is not None and lu is not None and lo != lu:
                self.found.append(("FIELD_STRING_OR_BYTES_LABEL_CHANGED" if so == "STRING_OR_BYTES"
                                   else "FIELD_NUMERIC_LABEL_CHANGED", at))
        elif ko == "MESSAGE":
            mo, mu = fo.message_type, fu.message_type
            local_o = mo.full_name.removeprefix(mo.file.package + ".") if mo.file.package else mo.full_name
            local_u = mu.full_name.removeprefix(mu.file.package + ".") if mu.file.package else mu.full_name
            if local_o != local_u:
                self.found.append(("FIELD_NAMED_TYPE_CHANGED", at))
                return
            before = len(self.found)
            self._message(mo, mu, at)
            if any(t not in COMPATIBLE for t, _ in self.found[before:]):
                self.found.append(("FIELD_NAMED_TYPE_CHANGED", at))
        else:  # MAP: key and value compared as label-less fields
            eo, eu = fo.message_type, fu.message_type
            for name in ("key", "value"):
                self._labels_and_types(eo.fields_by_name[name], eu.fields_by_name[name], None, None, at)
