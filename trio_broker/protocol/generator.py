"""Generate the Kafka protocol codec from Kafka's message definition files.

    python -m trio_broker.protocol.generator [--spec-dir PATH] [--check]

Reads `../shared/kafka-protocol` beside the checkout (or `--spec-dir`, or the
`TRIO_BROKER_KAFKA_PROTOCOL_DIR` environment variable) and writes one module per
message file into `trio_broker/protocol/_generated/`: attrs classes plus one
straight-line encoder and decoder per distinct wire layout. `--check` regenerates
into memory and exits 1, naming the stale files, if the committed ones differ.

The output depends only on the spec files, so it is byte-for-byte reproducible
without running a formatter over it.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import keyword
import logging
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

OUT_DIR = Path(__file__).parent / "_generated"
OPEN = 0x7FFF  # upper bound of an open version range ("N+")

Range = tuple[int, int]

_FIXED = {
    "int8": ("b", 1),
    "int16": ("h", 2),
    "int32": ("i", 4),
    "int64": ("q", 8),
    "uint16": ("H", 2),
    "uint32": ("I", 4),
    "float64": ("d", 8),
    "bool": ("?", 1),
}
_PRIMITIVES = set(_FIXED) | {"string", "bytes", "uuid", "records"}
_PY_TYPES = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "int",
    "uint16": "int",
    "uint32": "int",
    "float64": "float",
    "bool": "bool",
    "string": "str",
    "bytes": "bytes",
    "uuid": "uuid.UUID",
    "records": "Any",
}
_ZERO = {"int": "0", "float": "0.0", "bool": "False", "str": '""', "bytes": 'b""'}
_RESERVED_ATTRS = {"encode", "decode"}


def default_spec_dir() -> Path:
    env = os.environ.get("TRIO_BROKER_KAFKA_PROTOCOL_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2].parent / "shared" / "kafka-protocol"


# -- spec model ------------------------------------------------------------------------


def parse_versions(text: str | None) -> Range | None:
    if text is None or text == "" or text == "none":
        return None
    text = str(text).strip()
    if text.endswith("+"):
        return (int(text[:-1]), OPEN)
    if "-" in text:
        lo, hi = text.split("-")
        return (int(lo), int(hi))
    return (int(text), int(text))


def in_range(v: int, r: Range | None) -> bool:
    return r is not None and r[0] <= v <= r[1]


def snake_case(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()
    if keyword.iskeyword(s) or s in _RESERVED_ATTRS:
        s += "_"
    return s


@dataclass
class FieldSpec:
    name: str
    attr: str
    type: str
    versions: Range | None
    nullable: Range | None
    tagged: Range | None
    tag: int | None
    flexible_override: Range | None
    has_flexible_override: bool
    default: object
    struct: StructSpec | None = None

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def base(self) -> str:
        return self.type[2:] if self.is_array else self.type


@dataclass
class StructSpec:
    name: str
    fields: list[FieldSpec] = field(default_factory=list)


@dataclass
class MessageSpec:
    path: str  # relative to the spec dir, for the banner
    stem: str
    module: str
    name: str
    kind: str
    api_key: int | None
    valid: Range
    flexible: Range | None
    unstable: bool
    root: StructSpec
    structs: list[StructSpec]  # leaf first, root last


def load_json(path: Path) -> dict:
    # Kafka's files carry `//` comment lines; JSON has no comments.
    lines = [
        ln
        for ln in path.read_text(encoding="utf-8").splitlines()
        if not ln.lstrip().startswith("//")
    ]
    return json.loads("\n".join(lines))


def _parse_fields(
    raw: list[dict], defined: dict[str, StructSpec], order: list[StructSpec]
) -> list[FieldSpec]:
    out = []
    for f in raw:
        fs = FieldSpec(
            name=f["name"],
            attr=snake_case(f["name"]),
            type=f["type"],
            versions=parse_versions(f.get("versions")),
            nullable=parse_versions(f.get("nullableVersions")),
            tagged=parse_versions(f.get("taggedVersions")),
            tag=f.get("tag"),
            flexible_override=parse_versions(f.get("flexibleVersions")),
            has_flexible_override="flexibleVersions" in f,
            default=f.get("default", ...),
        )
        if "fields" in f:
            st = StructSpec(fs.base)
            defined[st.name] = st
            st.fields = _parse_fields(f["fields"], defined, order)
            order.append(st)
        out.append(fs)
    return out


def _link(fields: list[FieldSpec], defined: dict[str, StructSpec], where: str) -> None:
    for f in fields:
        if f.base not in _PRIMITIVES:
            if f.base not in defined:
                raise ValueError(f"{where}: unknown type {f.type!r} of field {f.name}")
            f.struct = defined[f.base]


def load_message(path: Path, rel: str) -> MessageSpec:
    d = load_json(path)
    defined: dict[str, StructSpec] = {}
    order: list[StructSpec] = []
    for cs in d.get("commonStructs", []):
        st = StructSpec(cs["name"])
        defined[st.name] = st
        st.fields = _parse_fields(cs["fields"], defined, order)
        order.append(st)
    root = StructSpec(d["name"])
    root.fields = _parse_fields(d["fields"], defined, order)
    for st in [*order, root]:
        _link(st.fields, defined, rel)
    # Common structs may be referenced by structs declared after them; sort leaf-first.
    ordered: list[StructSpec] = []
    seen: set[str] = set()

    def visit(st: StructSpec) -> None:
        if st.name in seen:
            return
        seen.add(st.name)
        for f in st.fields:
            if f.struct is not None:
                visit(f.struct)
        ordered.append(st)

    for st in order:
        visit(st)
    visit(root)
    valid = parse_versions(d["validVersions"])
    assert valid is not None, rel
    return MessageSpec(
        path=rel,
        stem=path.stem,
        module=snake_case(path.stem),
        name=d["name"],
        kind=d["type"],
        api_key=d.get("apiKey"),
        valid=valid,
        flexible=parse_versions(d.get("flexibleVersions")),
        unstable=bool(d.get("latestVersionUnstable", False)),
        root=root,
        structs=ordered,
    )


def select_specs(spec_dir: Path) -> list[MessageSpec]:
    messages = spec_dir / "messages"
    chosen: list[tuple[Path, str]] = []
    for p in sorted(messages.glob("*Request.json")):
        d = load_json(p)
        if "broker" in d.get("listeners", []):
            chosen.append((p, f"messages/{p.name}"))
            resp = p.with_name(p.name[: -len("Request.json")] + "Response.json")
            chosen.append((resp, f"messages/{resp.name}"))
    for stem in (
        "RequestHeader",
        "ResponseHeader",
        "ConsumerProtocolSubscription",
        "ConsumerProtocolAssignment",
    ):
        chosen.append((messages / f"{stem}.json", f"messages/{stem}.json"))
    for p in sorted((spec_dir / "coordinator-records").glob("*.json")):
        chosen.append((p, f"coordinator-records/{p.name}"))
    return [load_message(p, rel) for p, rel in chosen]


# -- wire layouts ----------------------------------------------------------------------


@dataclass(frozen=True)
class FieldLayout:
    """How one field is encoded in one version: everything the emitted code depends on."""

    attr: str
    type: str
    nullable: bool
    compact: bool
    tag: int | None
    nested: str | None  # layout suffix of the nested struct ("TopicProduceData_v9")
    nested_cls: str | None
    default: str  # Python expression of the default, for tagged fields


@dataclass
class Layout:
    struct: str
    suffix: str  # "<Struct>_v<first version>"
    flexible: bool
    fields: tuple[FieldLayout, ...]


class _Layouts:
    def __init__(self, msg: MessageSpec) -> None:
        self.msg = msg
        self.by_sig: dict[tuple, Layout] = {}
        self.memo: dict[tuple[str, int], Layout] = {}
        self.order: list[Layout] = []  # post-order: nested layouts before their users

    def get(self, st: StructSpec, v: int) -> Layout:
        key = (st.name, v)
        if key in self.memo:
            return self.memo[key]
        flexible = in_range(v, self.msg.flexible)
        fls = []
        for f in st.fields:
            if not in_range(v, f.versions):
                continue
            tagged = in_range(v, f.tagged)
            if tagged and not flexible:
                continue
            if f.has_flexible_override:
                compact = in_range(v, f.flexible_override)
            else:
                compact = flexible
            nested = self.get(f.struct, v) if f.struct is not None else None
            fls.append(
                FieldLayout(
                    attr=f.attr,
                    type=f.type,
                    nullable=in_range(v, f.nullable),
                    compact=compact or tagged,
                    tag=f.tag if tagged else None,
                    nested=nested.suffix if nested else None,
                    nested_cls=f.struct.name if f.struct else None,
                    default=default_expr(f, self.msg),
                )
            )
        sig = (st.name, flexible, tuple(fls))
        layout = self.by_sig.get(sig)
        if layout is None:
            layout = Layout(st.name, f"{st.name}_v{v}", flexible, tuple(fls))
            self.by_sig[sig] = layout
            self.order.append(layout)
        self.memo[key] = layout
        return layout


def default_expr(f: FieldSpec, msg: MessageSpec) -> str:
    raw = f.default
    is_null = raw is None or (isinstance(raw, str) and raw == "null")
    if f.is_array:
        return "None" if is_null else "[]"
    if f.struct is not None:
        return "None" if is_null else f"_DEFAULT_{f.struct.name}"
    t = f.type
    if t == "records":
        return "None"
    if t == "uuid":
        return "ZERO_UUID"
    if raw is ... or (isinstance(raw, str) and raw == "" and t != "string"):
        return _ZERO[_PY_TYPES[t]]
    if is_null:
        if f.nullable is None:
            raise ValueError(f"{msg.path}: {f.name} defaults to null but is never nullable")
        return "None"
    if t == "bool":
        return repr(raw if isinstance(raw, bool) else str(raw).lower() == "true")
    if t == "string":
        return _q(str(raw))
    if t == "bytes":
        return 'b""'
    if t == "float64":
        return repr(float(raw))
    return repr(int(str(raw), 0))


def type_hint(f: FieldSpec) -> str:
    base = f.struct.name if f.struct is not None else _PY_TYPES[f.base]
    hint = f"list[{base}]" if f.is_array else base
    if hint == "Any":
        return hint
    nullable_default = default_expr_is_none(f)
    if f.nullable is not None or nullable_default:
        hint += " | None"
    return hint


def default_expr_is_none(f: FieldSpec) -> bool:
    return f.default is None or f.default == "null"


def attr_default(f: FieldSpec, msg: MessageSpec) -> str:
    d = default_expr(f, msg)
    if d == "[]":
        return "attrs.Factory(list)"
    if d.startswith("_DEFAULT_"):
        return f"attrs.Factory({f.struct.name})"
    return d


# -- emitting code ---------------------------------------------------------------------


class _Func:
    """One generated function: its body lines and the names it binds as defaults."""

    def __init__(self, module: _Module) -> None:
        self.module = module
        self.lines: list[str] = []
        self.binds: dict[str, str] = {}

    def bind(self, local: str, expr: str) -> str:
        self.binds[local] = expr
        return local

    def _struct(self, fmt: str) -> str:
        key = fmt.lstrip(">").replace("?", "o")
        self.module.structs[key] = fmt
        return key

    def pack(self, fmt: str) -> str:
        key = self._struct(fmt)
        return self.bind(f"_pk_{key}", f"_S_{key}.pack")

    def unpack_from(self, fmt: str) -> str:
        key = self._struct(fmt)
        return self.bind(f"_up_{key}", f"_S_{key}.unpack_from")

    def helper(self, name: str) -> str:
        return self.bind(f"_{name}", f"_p.{name}")

    def add(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)


class _Module:
    def __init__(self) -> None:
        self.structs: dict[str, str] = {}


def _rw_name(kind: str, base: str, compact: bool, nullable: bool) -> str:
    if base == "uuid":
        return f"{kind}_uuid"
    parts = [kind]
    if compact:
        parts.append("compact")
    if nullable and base != "records":
        parts.append("nullable")
    parts.append(base)
    return "_".join(parts)


def _emit_encode_value(fn: _Func, fl: FieldLayout, expr: str, buf: str, ind: int) -> None:
    base = fl.type[2:] if fl.type.startswith("[]") else fl.type
    if fl.type.startswith("[]"):
        fn.add(ind, f"lst = {expr}")
        body = ind
        if fl.nullable:
            fn.add(ind, "if lst is None:")
            fn.add(
                ind + 1, f"{buf}.append(0)" if fl.compact else f'{buf} += b"\\xff\\xff\\xff\\xff"'
            )
            fn.add(ind, "else:")
            body = ind + 1
        w = fn.helper("write_compact_array_len" if fl.compact else "write_array_len")
        fn.add(body, f"{w}({buf}, len(lst))")
        if fl.nested is not None:
            enc = fn.bind(f"_enc_{fl.nested}", f"_enc_{fl.nested}")
            fn.add(body, "for e in lst:")
            fn.add(body + 1, f"{enc}(e, {buf}, regions)")
        elif base in _FIXED:
            c, _size = _FIXED[base]
            pk = fn.bind("_pack", "struct.pack")
            fn.add(body, f'{buf} += {pk}(">%d{c}" % len(lst), *lst)')
        else:
            w = fn.helper(_rw_name("write", base, fl.compact, False))
            fn.add(body, "for e in lst:")
            fn.add(body + 1, f"{w}({buf}, e)")
        return
    if fl.nested is not None:
        enc = fn.bind(f"_enc_{fl.nested}", f"_enc_{fl.nested}")
        if fl.nullable:
            fn.add(ind, f"x = {expr}")
            fn.add(ind, "if x is None:")
            # Tagged nullable structs use an unsigned varint marker, others an int8.
            fn.add(ind + 1, f"{buf}.append(0)" if fl.tag is not None else f'{buf} += b"\\xff"')
            fn.add(ind, "else:")
            fn.add(ind + 1, f"{buf}.append(1)")
            fn.add(ind + 1, f"{enc}(x, {buf}, regions)")
        else:
            fn.add(ind, f"{enc}({expr}, {buf}, regions)")
        return
    if base in _FIXED:
        pk = fn.pack(">" + _FIXED[base][0])
        fn.add(ind, f"{buf} += {pk}({expr})")
    elif base == "uuid":
        fn.add(ind, f"{buf} += {expr}.bytes")
    elif base == "records":
        w = fn.helper(_rw_name("write", base, fl.compact, fl.nullable))
        fn.add(ind, f"{w}({buf}, {expr}, regions)")
    else:
        w = fn.helper(_rw_name("write", base, fl.compact, fl.nullable))
        fn.add(ind, f"{w}({buf}, {expr})")


def _emit_decode_value(fn: _Func, fl: FieldLayout, var: str, pos: str, ind: int) -> None:
    base = fl.type[2:] if fl.type.startswith("[]") else fl.type
    if fl.type.startswith("[]"):
        r = fn.helper("read_compact_array_len" if fl.compact else "read_array_len")
        fn.add(ind, f"n, {pos} = {r}(data, {pos})")
        fn.add(ind, "if n < 0:")
        if fl.nullable:
            fn.add(ind + 1, f"{var} = None")
        else:
            fn.add(ind + 1, f'raise _p.DecodeError("null for non-nullable array {fl.attr}")')
        fn.add(ind, "else:")
        if fl.nested is not None:
            dec = fn.bind(f"_dec_{fl.nested}", f"_dec_{fl.nested}")
            fn.add(ind + 1, f"{var} = []")
            fn.add(ind + 1, "for _ in range(n):")
            fn.add(ind + 2, f"e, {pos} = {dec}(data, {pos})")
            fn.add(ind + 2, f"{var}.append(e)")
        elif base in _FIXED:
            c, size = _FIXED[base]
            up = fn.bind("_unpack_from", "struct.unpack_from")
            fn.add(ind + 1, f'{var} = list({up}(">%d{c}" % n, data, {pos}))')
            fn.add(ind + 1, f"{pos} += {size} * n" if size > 1 else f"{pos} += n")
        else:
            r = fn.helper(_rw_name("read", base, fl.compact, False))
            fn.add(ind + 1, f"{var} = []")
            fn.add(ind + 1, "for _ in range(n):")
            fn.add(ind + 2, f"e, {pos} = {r}(data, {pos})")
            fn.add(ind + 2, f"{var}.append(e)")
        return
    if fl.nested is not None:
        dec = fn.bind(f"_dec_{fl.nested}", f"_dec_{fl.nested}")
        if fl.nullable:
            if fl.tag is not None:
                r = fn.helper("read_uvarint")
                fn.add(ind, f"m, {pos} = {r}(data, {pos})")
                fn.add(ind, "if m == 0:")
            else:
                fn.add(ind, f"m = data[{pos}]")
                fn.add(ind, f"{pos} += 1")
                fn.add(ind, "if m >= 0x80:")  # a negative int8
            fn.add(ind + 1, f"{var} = None")
            fn.add(ind, "else:")
            fn.add(ind + 1, f"{var}, {pos} = {dec}(data, {pos})")
        else:
            fn.add(ind, f"{var}, {pos} = {dec}(data, {pos})")
        return
    if base in _FIXED:
        c, size = _FIXED[base]
        up = fn.unpack_from(">" + c)
        fn.add(ind, f"({var},) = {up}(data, {pos})")
        fn.add(ind, f"{pos} += {size}")
    else:
        r = fn.helper(_rw_name("read", base, fl.compact, fl.nullable))
        fn.add(ind, f"{var}, {pos} = {r}(data, {pos})")


def _is_fixed_scalar(fl: FieldLayout) -> bool:
    return fl.tag is None and fl.type in _FIXED


def _emit_encoder(mod: _Module, layout: Layout) -> _Func:
    fn = _Func(mod)
    run: list[FieldLayout] = []

    def flush() -> None:
        if not run:
            return
        fmt = ">" + "".join(_FIXED[f.type][0] for f in run)
        pk = fn.pack(fmt)
        fn.add(1, f"buf += {pk}({', '.join('o.' + f.attr for f in run)})")
        run.clear()

    for fl in layout.fields:
        if fl.tag is not None:
            continue
        if _is_fixed_scalar(fl):
            run.append(fl)
            continue
        flush()
        _emit_encode_value(fn, fl, f"o.{fl.attr}", "buf", 1)
    flush()
    if layout.flexible:
        tagged = sorted((f for f in layout.fields if f.tag is not None), key=lambda f: f.tag)
        if not tagged:
            fn.add(1, "buf.append(0)")
        else:
            fn.add(1, "tagged = []")
            for fl in tagged:
                fn.add(1, f"x = o.{fl.attr}")
                if fl.default == "None":
                    fn.add(1, "if x is not None:")
                else:
                    fn.add(1, f"if x != {fl.default}:")
                fn.add(2, "tb = bytearray()")
                _emit_encode_value(fn, fl, "x", "tb", 2)
                fn.add(2, f"tagged.append(({fl.tag}, tb))")
            w = fn.helper("write_uvarint")
            wt = fn.helper("write_tagged_field")
            fn.add(1, f"{w}(buf, len(tagged))")
            fn.add(1, "for tag, tb in tagged:")
            fn.add(2, f"{wt}(buf, tag, tb)")
    if not fn.lines:
        fn.add(1, "return")
    return fn


def _emit_decoder(mod: _Module, layout: Layout) -> _Func:
    fn = _Func(mod)
    run: list[FieldLayout] = []

    def flush() -> None:
        if not run:
            return
        fmt = ">" + "".join(_FIXED[f.type][0] for f in run)
        up = fn.unpack_from(fmt)
        size = sum(_FIXED[f.type][1] for f in run)
        names = ", ".join(f"v_{f.attr}" for f in run)
        if len(run) == 1:
            names += ","
        fn.add(1, f"({names}) = {up}(data, pos)")
        fn.add(1, f"pos += {size}")
        run.clear()

    untagged = [fl for fl in layout.fields if fl.tag is None]
    tagged = sorted((f for f in layout.fields if f.tag is not None), key=lambda f: f.tag)
    for fl in untagged:
        if _is_fixed_scalar(fl):
            run.append(fl)
            continue
        flush()
        _emit_decode_value(fn, fl, f"v_{fl.attr}", "pos", 1)
    flush()
    cls = fn.bind(f"_{layout.struct}", layout.struct)
    args = ", ".join(f"{fl.attr}=v_{fl.attr}" for fl in untagged)
    fn.add(1, f"o = {cls}({args})")
    if layout.flexible:
        if not tagged:
            skip = fn.helper("skip_tagged_fields")
            fn.add(1, f"pos = {skip}(data, pos)")
        else:
            ru = fn.helper("read_uvarint")
            rt = fn.helper("read_tag_header")
            ce = fn.helper("check_tagged_end")
            fn.add(1, f"n_tags, pos = {ru}(data, pos)")
            fn.add(1, "for _ in range(n_tags):")
            fn.add(2, f"tag, tp, pos = {rt}(data, pos)")
            for i, fl in enumerate(tagged):
                fn.add(2, f"{'if' if i == 0 else 'elif'} tag == {fl.tag}:")
                _emit_decode_value(fn, fl, f"o.{fl.attr}", "tp", 3)
                fn.add(3, f"{ce}(tp, pos)")
    fn.add(1, "return o, pos")
    return fn


def _render_func(name: str, params: str, fn: _Func) -> list[str]:
    binds = "".join(f", {k}={v}" for k, v in sorted(fn.binds.items()))
    return [f"def {name}({params}{binds}):", *fn.lines, "", ""]


BANNER = "# AUTOGENERATED by trio_broker.protocol.generator from kafka-protocol/{src}. DO NOT EDIT."


def _range_repr(r: Range | None) -> str:
    return "None" if r is None else f"({r[0]}, {r[1]})"


def render_message(msg: MessageSpec) -> str:
    mod = _Module()
    layouts = _Layouts(msg)
    top: dict[int, Layout] = {}
    for v in range(msg.valid[0], msg.valid[1] + 1):
        top[v] = layouts.get(msg.root, v)

    # Classes, leaf first so that defaults (attrs.Factory(Nested)) can name them.
    class_lines: list[str] = []
    for st in msg.structs:
        is_root = st is msg.root
        base = "(Message)" if is_root else ""
        class_lines += [
            "@attrs.define(kw_only=True, slots=True, eq=True)",
            f"class {st.name}{base}:",
        ]
        if is_root:
            flex_min = msg.flexible[0] if msg.flexible else None
            kind = {"request": "request", "response": "response", "header": "header"}.get(
                msg.kind, "data"
            )
            doc = f"{msg.name}: Kafka {kind}, versions {msg.valid[0]}-{msg.valid[1]}"
            doc += f", flexible from {flex_min}." if flex_min is not None else ", never flexible."
            class_lines.append(f'    """{doc}"""')
            class_lines.append("")
            class_lines.append(f"    API_KEY = {msg.api_key!r}")
            class_lines.append(f"    MIN_VERSION = {msg.valid[0]}")
            class_lines.append(f"    MAX_VERSION = {msg.valid[1]}")
            class_lines.append(f"    FLEXIBLE_MIN_VERSION = {flex_min!r}")
            class_lines.append(f"    LATEST_VERSION_UNSTABLE = {msg.unstable!r}")
        # The field table drives the property tests' strategies:
        # (attribute, spec type, versions present, versions nullable).
        schema = []
        for f in st.fields:
            present = f.versions
            if f.tagged is not None:
                # Tagged fields exist only where the message is flexible.
                present = _intersect(present, msg.flexible)
            schema.append(
                f"({_q(f.attr)}, {_q(f.type)}, {_range_repr(present)}, {_range_repr(f.nullable)})"
            )
        if schema:
            class_lines.append("    _SCHEMA = (")
            class_lines += [f"        {s}," for s in schema]
            class_lines.append("    )")
        else:
            class_lines.append("    _SCHEMA = ()")
        class_lines.append("")
        for f in st.fields:
            class_lines.append(f"    {f.attr}: {type_hint(f)} = {attr_default(f, msg)}")
        class_lines += ["", ""]

    # Default instances that tagged struct fields are compared against.
    default_lines = sorted(
        {
            f"{fl.default} = {fl.nested_cls}()"
            for layout in layouts.order
            for fl in layout.fields
            if fl.tag is not None and fl.default.startswith("_DEFAULT_")
        }
    )

    func_lines: list[str] = []
    for layout in layouts.order:
        func_lines += _render_func(
            f"_enc_{layout.suffix}", "o, buf, regions", _emit_encoder(mod, layout)
        )
        func_lines += _render_func(f"_dec_{layout.suffix}", "data, pos", _emit_decoder(mod, layout))

    out = [
        BANNER.format(src=msg.path),
        f'"""Codec for {msg.name} (generated from {msg.path})."""',
        "",
        "from __future__ import annotations",
        "",
        "import struct",
        "import uuid",
        "from typing import Any",
        "",
        "import attrs",
        "",
        "from trio_broker.protocol import primitives as _p",
        "from trio_broker.protocol.primitives import ZERO_UUID, Message",
        "",
        "__all__ = [" + ", ".join(_q(st.name) for st in msg.structs) + "]",
        "",
    ]
    for key in sorted(mod.structs):
        out.append(f"_S_{key} = struct.Struct({_q(mod.structs[key])})")
    out += ["", ""]
    out += class_lines
    if default_lines:
        out += default_lines
        out += ["", ""]
    out += func_lines
    enc = ", ".join(f"{v}: _enc_{top[v].suffix}" for v in sorted(top))
    dec = ", ".join(f"{v}: _dec_{top[v].suffix}" for v in sorted(top))
    out.append(f"{msg.name}._ENCODERS = {{{enc}}}")
    out.append(f"{msg.name}._DECODERS = {{{dec}}}")
    text = "\n".join(out).rstrip("\n") + "\n"
    # `uuid` and `Any` appear only in some modules' hints; keep the imports meaningful.
    if "uuid." not in text.split("from typing import Any", 1)[1]:
        text = text.replace("import uuid\n", "", 1)
    if "Any" not in text.split("from typing import Any", 1)[1]:
        text = text.replace("from typing import Any\n", "", 1)
    return text


def _q(text: str) -> str:
    """A double-quoted Python string literal, as ruff format would write it."""
    return json.dumps(text)


def _intersect(a: Range | None, b: Range | None) -> Range | None:
    if a is None or b is None:
        return None
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return (lo, hi) if lo <= hi else None


def render_index(specs: list[MessageSpec]) -> str:
    requests = {m.api_key: m for m in specs if m.kind == "request"}
    responses = {m.api_key: m for m in specs if m.kind == "response"}
    keys = sorted(requests)
    lines = [
        BANNER.format(src="messages/"),
        '"""Index of the generated codec modules.',
        "",
        "Cheap to import (it is on the broker's start-up path): the message modules are",
        "imported on first use by `request_class`, `response_class` and `message_class`.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "import importlib",
        "",
        "__all__ = [",
        '    "API_NAMES",',
        '    "FLEXIBLE_MIN_VERSIONS",',
        '    "MESSAGE_MODULES",',
        '    "REQUEST_MODULES",',
        '    "REQUEST_VERSIONS",',
        '    "RESPONSE_MODULES",',
        '    "UNSTABLE_LATEST_VERSION",',
        '    "message_class",',
        '    "request_class",',
        '    "response_class",',
        "]",
        "",
        "# api key -> API name as Kafka spells it (without Request/Response).",
        "API_NAMES: dict[int, str] = {",
        *[f"    {k}: {_q(requests[k].name[: -len('Request')])}," for k in keys],
        "}",
        "",
        "REQUEST_MODULES: dict[int, str] = {",
        *[f"    {k}: {_q(requests[k].module)}," for k in keys],
        "}",
        "",
        "RESPONSE_MODULES: dict[int, str] = {",
        *[f"    {k}: {_q(responses[k].module)}," for k in keys],
        "}",
        "",
        "# The request versions the spec defines (including an unstable latest one).",
        "REQUEST_VERSIONS: dict[int, tuple[int, int]] = {",
        *[f"    {k}: {requests[k].valid!r}," for k in keys],
        "}",
        "",
        "# First flexible request version (request header v2, response header v1), or None.",
        "FLEXIBLE_MIN_VERSIONS: dict[int, int | None] = {",
        *[f"    {k}: {requests[k].flexible[0] if requests[k].flexible else None!r}," for k in keys],
        "}",
        "",
        "# APIs whose latest spec version is still marked unstable.",
        "UNSTABLE_LATEST_VERSION: frozenset[int] = frozenset(",
        "    {" + ", ".join(str(k) for k in keys if requests[k].unstable) + "}",
        ")",
        "",
        "# Class name -> module name, for every generated message (headers and records too).",
        "MESSAGE_MODULES: dict[str, str] = {",
        *[f"    {_q(m.name)}: {_q(m.module)}," for m in sorted(specs, key=lambda m: m.name)],
        "}",
        "",
        "_CLASSES: dict[str, type] = {}",
        "",
        "",
        "def message_class(name: str) -> type:",
        '    """The generated class called `name` (e.g. "ProduceRequest"), imported on first use."""',
        "    cls = _CLASSES.get(name)",
        "    if cls is None:",
        '        module = importlib.import_module(f"{__name__}.{MESSAGE_MODULES[name]}")',
        "        cls = _CLASSES[name] = getattr(module, name)",
        "    return cls",
        "",
        "",
        "def request_class(api_key: int) -> type:",
        '    """The request class for `api_key`; KeyError if the broker does not serve it."""',
        '    return message_class(API_NAMES[api_key] + "Request")',
        "",
        "",
        "def response_class(api_key: int) -> type:",
        '    """The response class for `api_key`; KeyError if the broker does not serve it."""',
        '    return message_class(API_NAMES[api_key] + "Response")',
    ]
    return "\n".join(lines) + "\n"


def render_error_codes(spec_dir: Path) -> str:
    rows = list(csv.reader(io.StringIO((spec_dir / "errors.csv").read_text(encoding="utf-8"))))
    out = [
        BANNER.format(src="errors.csv"),
        "",
        "import enum",
        "",
        "",
        "class ErrorCode(enum.IntEnum):",
        '    """Kafka protocol error codes."""',
        "",
    ]
    for row in rows[1:]:
        if row:
            out.append(f"    {row[1].strip()} = {int(row[0])}")
    return "\n".join(out) + "\n"


def generate(spec_dir: Path) -> dict[str, str]:
    """Every generated file: name inside `_generated/` -> text."""
    specs = select_specs(spec_dir)
    files = {f"{m.module}.py": render_message(m) for m in specs}
    files["__init__.py"] = render_index(specs)
    files["error_codes.py"] = render_error_codes(spec_dir)
    return files


def stale_files(files: dict[str, str], out_dir: Path = OUT_DIR) -> list[str]:
    stale = []
    for name, text in sorted(files.items()):
        path = out_dir / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            stale.append(name)
    for path in sorted(out_dir.glob("*.py")):
        if path.name not in files and _is_generated(path):
            stale.append(path.name)
    return stale


def _is_generated(path: Path) -> bool:
    with path.open(encoding="utf-8") as f:
        return f.readline().startswith("# AUTOGENERATED by trio_broker.protocol.generator")


def write(files: dict[str, str], out_dir: Path = OUT_DIR) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in sorted(out_dir.glob("*.py")):
        if path.name not in files and _is_generated(path):
            path.unlink()
    for name, text in files.items():
        path = out_dir / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trio_broker.protocol.generator", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--spec-dir", type=Path, default=None, help="Kafka's protocol definitions")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the committed files are stale"
    )
    args = parser.parse_args(argv)
    spec_dir = args.spec_dir or default_spec_dir()
    if not (spec_dir / "messages").is_dir():
        print(f"no Kafka protocol definitions in {spec_dir}", file=sys.stderr)
        return 2
    files = generate(spec_dir)
    if args.check:
        stale = stale_files(files)
        if stale:
            print(
                "stale generated files (run python -m trio_broker.protocol.generator):",
                file=sys.stderr,
            )
            for name in stale:
                print(f"  {OUT_DIR / name}", file=sys.stderr)
            return 1
        return 0
    write(files)
    print(f"wrote {len(files)} files to {OUT_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
