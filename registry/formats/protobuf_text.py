"""``.proto`` text <-> ``FileDescriptorProto``, for the registry's Protobuf format.

Text is parsed with ``proto-schema-parser`` (a maintained pure-Python ``.proto`` grammar) into
a FileDescriptorProto whose type names are left as written: protobuf's own DescriptorPool
resolves them (scoping rules of protoc) and validates the file when it is added. The printer
writes a descriptor back as ``.proto`` text in one fixed layout (fully qualified type names,
options sorted by name), which the registry stores as the canonical form.

Supported: proto2 and proto3 (editions are refused), messages, nested types, enums, oneofs,
proto3 ``optional``, maps, reserved ranges and names, extension ranges and ``extend`` blocks,
services, and the standard file/message/field/enum options. Custom options (``(my.option)``)
and aggregate option values are dropped; groups are refused.
"""

from __future__ import annotations

from typing import Any

from antlr4.error.ErrorListener import ErrorListener
from google.protobuf import descriptor_pb2 as D
from proto_schema_parser import ast
from proto_schema_parser.parser import Parser

from registry.formats.base import InvalidSchema

F = D.FieldDescriptorProto
SCALARS = {
    "double": F.TYPE_DOUBLE, "float": F.TYPE_FLOAT, "int64": F.TYPE_INT64, "uint64": F.TYPE_UINT64,
    "int32": F.TYPE_INT32, "fixed64": F.TYPE_FIXED64, "fixed32": F.TYPE_FIXED32, "bool": F.TYPE_BOOL,
    "string": F.TYPE_STRING, "bytes": F.TYPE_BYTES, "uint32": F.TYPE_UINT32, "sfixed32": F.TYPE_SFIXED32,
    "sfixed64": F.TYPE_SFIXED64, "sint32": F.TYPE_SINT32, "sint64": F.TYPE_SINT64,
}
SCALAR_NAMES = {v: k for k, v in SCALARS.items()}
_MAX_FIELD = 536870911  # "max" in reserved and extension ranges


class _Raise(ErrorListener):
    def syntaxError(self, recognizer: Any, offendingSymbol: Any, line: int, column: int, msg: str, e: Any) -> None:  # noqa: N802,N803
        raise InvalidSchema(f"line {line}:{column} {msg}")


def _quiet(x: Any) -> None:
    x.removeErrorListeners()
    x.addErrorListener(_Raise())


def parse_text(text: str, name: str) -> D.FileDescriptorProto:
    """``.proto`` text -> an unresolved FileDescriptorProto named ``name``."""
    try:
        tree = Parser(setup_lexer=_quiet, setup_parser=_quiet).parse(text)
    except InvalidSchema:
        raise
    except RecursionError:
        raise InvalidSchema("the schema nests too deeply") from None
    except Exception as e:  # noqa: BLE001 - the parser's own failures on odd input
        raise InvalidSchema(f"cannot parse: {e!r}") from None
    if tree.edition:
        raise InvalidSchema("Protobuf editions are not supported (use syntax = \"proto2\" or \"proto3\")")
    syntax = tree.syntax or "proto2"
    if syntax not in ("proto2", "proto3"):
        raise InvalidSchema(f"unknown syntax {syntax!r}")
    fdp = D.FileDescriptorProto(name=name)
    if syntax == "proto3":
        fdp.syntax = "proto3"
    for el in tree.file_elements:
        if isinstance(el, ast.Package):
            fdp.package = el.name
        elif isinstance(el, ast.Import):
            if el.public:
                fdp.public_dependency.append(len(fdp.dependency))
            if el.weak:
                fdp.weak_dependency.append(len(fdp.dependency))
            fdp.dependency.append(el.name)
        elif isinstance(el, ast.Option):
            _set_option(fdp.options, el)
        elif isinstance(el, ast.Message):
            _message(fdp.message_type.add(), el, syntax)
        elif isinstance(el, ast.Enum):
            _enum(fdp.enum_type.add(), el)
        elif isinstance(el, ast.Service):
            _service(fdp.service.add(), el)
        elif isinstance(el, ast.Extension):
            for f in el.elements:
                if isinstance(f, ast.Field):
                    _field(fdp.extension.add(extendee=el.typeName), f, syntax, None)
    return fdp


def _value(v: Any) -> Any:
    return v.name if isinstance(v, ast.Identifier) else v


def _set_option(options: Any, opt: ast.Option) -> None:
    name = opt.name
    if name.startswith("(") or "." in name:
        return  # custom options are not kept (module docstring)
    fd = options.DESCRIPTOR.fields_by_name.get(name)
    if fd is None:
        raise InvalidSchema(f"option {name!r} is unknown here")
    value = _value(opt.value)
    try:
        if fd.enum_type is not None:
            ev = fd.enum_type.values_by_name.get(str(value))
            if ev is None:
                raise InvalidSchema(f"option {name} has no value {value!r}")
            setattr(options, name, ev.number)
        elif fd.message_type is not None:
            return  # aggregate values: not kept
        else:
            setattr(options, name, value)
    except (TypeError, ValueError, AttributeError) as e:
        raise InvalidSchema(f"option {name} = {value!r}: {e}") from None


def _camel(name: str) -> str:
    parts = name.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def _field(f: D.FieldDescriptorProto, el: ast.Field, syntax: str, oneof: int | None) -> None:
    f.name, f.number = el.name, el.number
    card = el.cardinality
    if card == ast.FieldCardinality.REPEATED:
        f.label = F.LABEL_REPEATED
    elif card == ast.FieldCardinality.REQUIRED:
        if syntax == "proto3":
            raise InvalidSchema(f"required fields are not allowed in proto3 ({el.name})")
        f.label = F.LABEL_REQUIRED
    else:
        f.label = F.LABEL_OPTIONAL
        if card == ast.FieldCardinality.OPTIONAL and syntax == "proto3" and oneof is None:
            f.proto3_optional = True
    if el.type in SCALARS:
        f.type = SCALARS[el.type]
    else:
        f.type_name = el.type
    if oneof is not None:
        f.oneof_index = oneof
    for opt in el.options:
        value = _value(opt.value)
        if opt.name == "default":
            f.default_value = ("true" if value else "false") if isinstance(value, bool) else str(value)
        elif opt.name == "json_name":
            f.json_name = str(value)
        else:
            _set_option(f.options, opt)


def _ranges(specs: list[str]) -> list[tuple[int, int]]:
    out = []
    for spec in specs:
        lo, _, hi = str(spec).partition(" to ")
        try:
            start = int(lo, 0)
            end = _MAX_FIELD if hi.strip() == "max" else int(hi, 0) if hi else start
        except ValueError:
            raise InvalidSchema(f"bad range {spec!r}") from None
        out.append((start, end))
    return out


def _message(m: D.DescriptorProto, el: ast.Message, syntax: str) -> None:
    m.name = el.name
    synthetic: list[D.FieldDescriptorProto] = []
    for item in el.elements:
        if isinstance(item, ast.Field):
            f = m.field.add()
            _field(f, item, syntax, None)
            if f.proto3_optional:
                synthetic.append(f)
        elif isinstance(item, ast.MapField):
            entry = m.nested_type.add(name=_camel(item.name)[:1].upper() + _camel(item.name)[1:] + "Entry")
            entry.options.map_entry = True
            for fname, num, ftype in (("key", 1, item.key_type), ("value", 2, item.value_type)):
                ef = entry.field.add(name=fname, number=num, label=F.LABEL_OPTIONAL)
                if ftype in SCALARS:
                    ef.type = SCALARS[ftype]
                else:
                    ef.type_name = ftype
            f = m.field.add(name=item.name, number=item.number, label=F.LABEL_REPEATED, type_name=entry.name)
            for opt in item.options:
                if opt.name == "json_name":
                    f.json_name = str(_value(opt.value))
                else:
                    _set_option(f.options, opt)
        elif isinstance(item, ast.OneOf):
            index = len(m.oneof_decl)
            decl = m.oneof_decl.add(name=item.name)
            for sub in item.elements:
                if isinstance(sub, ast.Field):
                    _field(m.field.add(), sub, syntax, index)
                elif isinstance(sub, ast.Option):
                    _set_option(decl.options, sub)
                elif isinstance(sub, ast.Group):
                    raise InvalidSchema("groups are not supported")
        elif isinstance(item, ast.Message):
            _message(m.nested_type.add(), item, syntax)
        elif isinstance(item, ast.Enum):
            _enum(m.enum_type.add(), item)
        elif isinstance(item, ast.Reserved):
            for start, end in _ranges(item.ranges):
                m.reserved_range.add(start=start, end=end + 1)
            m.reserved_name.extend(item.names)
        elif isinstance(item, ast.ExtensionRange):
            for start, end in _ranges(item.ranges):
                m.extension_range.add(start=start, end=end + 1)
        elif isinstance(item, ast.Option):
            _set_option(m.options, item)
        elif isinstance(item, ast.Extension):
            for f in item.elements:
                if isinstance(f, ast.Field):
                    _field(m.extension.add(extendee=item.typeName), f, syntax, None)
        elif isinstance(item, ast.Group):
            raise InvalidSchema("groups are not supported")
    for f in synthetic:  # proto3 optional: one synthetic oneof each, after the real ones (as protoc)
        f.oneof_index = len(m.oneof_decl)
        m.oneof_decl.add(name="_" + f.name)


def _enum(e: D.EnumDescriptorProto, el: ast.Enum) -> None:
    e.name = el.name
    for item in el.elements:
        if isinstance(item, ast.EnumValue):
            v = e.value.add(name=item.name, number=item.number)
            for opt in item.options:
                _set_option(v.options, opt)
        elif isinstance(item, ast.Option):
            _set_option(e.options, item)
        elif isinstance(item, (ast.EnumReserved, ast.Reserved)):
            for start, end in _ranges(getattr(item, "ranges", [])):
                e.reserved_range.add(start=start, end=end)
            e.reserved_name.extend(getattr(item, "names", []))


def _service(s: D.ServiceDescriptorProto, el: ast.Service) -> None:
    s.name = el.name
    for item in el.elements:
        if isinstance(item, ast.Method):
            m = s.method.add(name=item.name, input_type=item.input_type.type, output_type=item.output_type.type)
            if item.input_type.stream:
                m.client_streaming = True
            if item.output_type.stream:
                m.server_streaming = True
            for opt in item.elements:
                if isinstance(opt, ast.Option):
                    _set_option(m.options, opt)
        elif isinstance(item, ast.Option):
            _set_option(s.options, item)


# --- printing -------------------------------------------------------------------------------------

def _quote(s: str | bytes) -> str:
    data = s.encode() if isinstance(s, str) else s
    out = []
    for b in data:
        c = chr(b)
        if c in "\"\\":
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif 32 <= b < 127:
            out.append(c)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def _option_items(options: Any) -> list[str]:
    items = []
    for fd, value in options.ListFields():
        if fd.is_extension or fd.message_type is not None or fd.name == "map_entry":
            continue
        if fd.is_repeated:
            continue
        if fd.enum_type is not None:
            text = fd.enum_type.values_by_number[value].name
        elif isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (str, bytes)):
            text = _quote(value)
        else:
            text = repr(value)
        items.append(f"{fd.name} = {text}")
    return sorted(items)


def _type_of(f: D.FieldDescriptorProto) -> str:
    return f.type_name if f.type_name else SCALAR_NAMES[f.type]


def _range_text(start: int, end_excl: int, *, inclusive_end: bool = False) -> str:
    end = end_excl if inclusive_end else end_excl - 1
    if end >= _MAX_FIELD:
        return f"{start} to max"
    return str(start) if start == end else f"{start} to {end}"


def print_file(fdp: D.FileDescriptorProto) -> str:
    syntax = fdp.syntax or "proto2"
    if syntax not in ("proto2", "proto3"):
        raise InvalidSchema(f"Protobuf {syntax} files are not supported")
    out = [f'syntax = "{syntax}";']
    if fdp.package:
        out.append(f"package {fdp.package};")
    if fdp.dependency:
        out.append("")
        for i, dep in enumerate(fdp.dependency):
            kind = "public " if i in fdp.public_dependency else "weak " if i in fdp.weak_dependency else ""
            out.append(f'import {kind}"{dep}";')
    opts = _option_items(fdp.options)
    if opts:
        out.append("")
        out += [f"option {o};" for o in opts]
    for m in fdp.message_type:
        out.append("")
        _print_message(out, m, syntax, "")
    for e in fdp.enum_type:
        out.append("")
        _print_enum(out, e, "")
    for s in fdp.service:
        out.append("")
        _print_service(out, s)
    if fdp.extension:
        out.append("")
        _print_extensions(out, fdp.extension, syntax, "")
    return "\n".join(out) + "\n"


def _field_line(f: D.FieldDescriptorProto, syntax: str, in_oneof: bool) -> str:
    if f.type == F.TYPE_GROUP:
        raise InvalidSchema("groups are not supported")
    label = ""
    if not in_oneof:
        if f.label == F.LABEL_REPEATED:
            label = "repeated "
        elif f.label == F.LABEL_REQUIRED:
            label = "required "
        elif syntax == "proto2" or f.proto3_optional:
            label = "optional "
    opts = _option_items(f.options)
    if f.HasField("default_value"):
        if f.type == F.TYPE_STRING:
            dv = _quote(f.default_value)
        elif f.type == F.TYPE_BYTES:
            dv = '"' + f.default_value + '"'  # already C-escaped in the descriptor
        else:
            dv = f.default_value
        opts.append(f"default = {dv}")
    if f.HasField("json_name") and f.json_name != _camel(f.name):
        opts.append(f"json_name = {_quote(f.json_name)}")
    suffix = f" [{', '.join(sorted(opts))}]" if opts else ""
    return f"{label}{_type_of(f)} {f.name} = {f.number}{suffix};"


def _print_message(out: list[str], m: D.DescriptorProto, syntax: str, ind: str) -> None:
    out.append(f"{ind}message {m.name} {{")
    i2 = ind + "  "
    for o in _option_items(m.options):
        out.append(f"{i2}option {o};")
    entries = {n.name: n for n in m.nested_type if n.options.map_entry}
    real_oneofs = [k for k, _ in enumerate(m.oneof_decl)
                   if not any(f.HasField("oneof_index") and f.oneof_index == k and f.proto3_optional for f in m.field)]
    printed_oneofs: set[int] = set()
    map_fields = {}
    for f in m.field:
        entry = entries.get(f.type_name.rsplit(".", 1)[-1]) if f.type_name and f.label == F.LABEL_REPEATED else None
        if entry is not None and (f.type_name.endswith("." + entry.name) or f.type_name == entry.name):
            map_fields[entry.name] = f
            continue
        if f.HasField("oneof_index") and f.oneof_index in real_oneofs:
            k = f.oneof_index
            if k in printed_oneofs:
                continue
            printed_oneofs.add(k)
            decl = m.oneof_decl[k]
            out.append(f"{i2}oneof {decl.name} {{")
            for o in _option_items(decl.options):
                out.append(f"{i2}  option {o};")
            for g in m.field:
                if g.HasField("oneof_index") and g.oneof_index == k:
                    out.append(f"{i2}  {_field_line(g, syntax, True)}")
            out.append(f"{i2}}}")
            continue
        out.append(f"{i2}{_field_line(f, syntax, False)}")
    for r in m.reserved_range:
        out.append(f"{i2}reserved {_range_text(r.start, r.end)};")
    for n in m.reserved_name:
        out.append(f"{i2}reserved {_quote(n)};")
    for r in m.extension_range:
        out.append(f"{i2}extensions {_range_text(r.start, r.end)};")
    # Nested types in descriptor order, a map entry as its map field at its place, so the nested
    # message indexes (Confluent's wire format) come out the same after a round trip.
    for n in m.nested_type:
        if n.options.map_entry and n.name in map_fields:
            f = map_fields[n.name]
            key, value = n.field[0], n.field[1]
            opts = _option_items(f.options)
            if f.HasField("json_name") and f.json_name != _camel(f.name):
                opts.append(f"json_name = {_quote(f.json_name)}")
            suffix = f" [{', '.join(sorted(opts))}]" if opts else ""
            out.append(f"{i2}map<{_type_of(key)}, {_type_of(value)}> {f.name} = {f.number}{suffix};")
        else:
            _print_message(out, n, syntax, i2)
    for e in m.enum_type:
        _print_enum(out, e, i2)
    if m.extension:
        _print_extensions(out, m.extension, syntax, i2)
    out.append(f"{ind}}}")


def _print_enum(out: list[str], e: D.EnumDescriptorProto, ind: str) -> None:
    out.append(f"{ind}enum {e.name} {{")
    for o in _option_items(e.options):
        out.append(f"{ind}  option {o};")
    for v in e.value:
        opts = _option_items(v.options)
        suffix = f" [{', '.join(opts)}]" if opts else ""
        out.append(f"{ind}  {v.name} = {v.number}{suffix};")
    for r in e.reserved_range:
        out.append(f"{ind}  reserved {_range_text(r.start, r.end, inclusive_end=True)};")
    for n in e.reserved_name:
        out.append(f"{ind}  reserved {_quote(n)};")
    out.append(f"{ind}}}")


def _print_service(out: list[str], s: D.ServiceDescriptorProto) -> None:
    out.append(f"service {s.name} {{")
    for o in _option_items(s.options):
        out.append(f"  option {o};")
    for m in s.method:
        cin = "stream " if m.client_streaming else ""
        cout = "stream " if m.server_streaming else ""
        opts = _option_items(m.options)
        body = " {\n" + "".join(f"    option {o};\n" for o in opts) + "  }" if opts else ";"
        out.append(f"  rpc {m.name}({cin}{m.input_type}) returns ({cout}{m.output_type}){body}")
    out.append("}")


def _print_extensions(out: list[str], fields: Any, syntax: str, ind: str) -> None:
    by_extendee: dict[str, list[D.FieldDescriptorProto]] = {}
    for f in fields:
        by_extendee.setdefault(f.extendee, []).append(f)
    for extendee, fs in by_extendee.items():
        out.append(f"{ind}extend {extendee} {{")
        for f in fs:
            out.append(f"{ind}  {_field_line(f, syntax, False)}")
        out.append(f"{ind}}}")
