"""The generator's wire layouts and the straight-line encoders and decoders it emits.

A `Layout` is how one struct is encoded in one version. Versions whose layouts
are equal share one `_enc_<Struct>_v<N>` / `_dec_<Struct>_v<N>` pair. Each emitted
function is straight-line code: runs of fixed-size scalars become one
`struct.Struct` call, and the helpers it calls are bound as keyword defaults so
that they are local lookups at run time.
"""

from __future__ import annotations

from dataclasses import dataclass

from trio_broker.protocol.gen_schema import (
    MessageSpec,
    StructSpec,
    default_expr,
    in_range,
)

# Fixed-size types: `struct` format character and size in bytes.
# Arrays of fixed-size elements shorter than this are packed by a Struct made once per
# length (primitives.array_structs).
ARRAY_STRUCTS = 16

FIXED = {
    "int8": ("b", 1),
    "int16": ("h", 2),
    "int32": ("i", 4),
    "int64": ("q", 8),
    "uint16": ("H", 2),
    "uint32": ("I", 4),
    "float64": ("d", 8),
    "bool": ("?", 1),
}


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


class Layouts:
    """The distinct layouts of one message's structs, built on demand per version."""

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


# -- emitting functions ----------------------------------------------------------------


class StructFormats:
    """The `struct.Struct` objects one generated module needs: key -> format."""

    def __init__(self) -> None:
        self.structs: dict[str, str] = {}


class Func:
    """One generated function: its body lines and the names it binds as defaults."""

    def __init__(self, module: StructFormats) -> None:
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

    def render(self, name: str, params: str) -> list[str]:
        binds = "".join(f", {k}={v}" for k, v in sorted(self.binds.items()))
        return [f"def {name}({params}{binds}):", *self.lines, "", ""]


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


def _emit_encode_value(fn: Func, fl: FieldLayout, expr: str, buf: str, ind: int) -> None:
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
        # The length inline (most arrays are short: one byte as a compact length), and
        # fixed-size elements packed by a Struct made once per length (primitives.py):
        # a Metadata of 20,000 partitions encodes 60,000 such arrays.
        fn.add(body, "n = len(lst)")
        if fl.compact:
            w = fn.helper("write_compact_array_len")
            fn.add(body, "if n < 127:")
            fn.add(body + 1, f"{buf}.append(n + 1)")
            fn.add(body, "else:")
            fn.add(body + 1, f"{w}({buf}, n)")
        else:
            fn.add(body, f"{buf} += {fn.pack('>i')}(n)")
        if fl.nested is not None:
            enc = fn.bind(f"_enc_{fl.nested}", f"_enc_{fl.nested}")
            fn.add(body, "for e in lst:")
            fn.add(body + 1, f"{enc}(e, {buf}, regions)")
        elif base in FIXED:
            c, _size = FIXED[base]
            pk = fn.bind("_pack", "struct.pack")
            arrays = fn.bind(f"_arrays_{c}", f"_p.array_structs({c!r})")
            fn.add(body, f"if n < {ARRAY_STRUCTS}:")
            fn.add(body + 1, f"{buf} += {arrays}[n](*lst)")
            fn.add(body, "else:")
            fn.add(body + 1, f'{buf} += {pk}(">%d{c}" % n, *lst)')
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
    if base in FIXED:
        pk = fn.pack(">" + FIXED[base][0])
        fn.add(ind, f"{buf} += {pk}({expr})")
    elif base == "uuid":
        fn.add(ind, f"{buf} += {expr}.bytes")
    elif base == "records":
        w = fn.helper(_rw_name("write", base, fl.compact, fl.nullable))
        fn.add(ind, f"{w}({buf}, {expr}, regions)")
    else:
        w = fn.helper(_rw_name("write", base, fl.compact, fl.nullable))
        fn.add(ind, f"{w}({buf}, {expr})")


def _emit_decode_value(fn: Func, fl: FieldLayout, var: str, pos: str, ind: int) -> None:
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
        elif base in FIXED:
            c, size = FIXED[base]
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
    if base in FIXED:
        c, size = FIXED[base]
        up = fn.unpack_from(">" + c)
        fn.add(ind, f"({var},) = {up}(data, {pos})")
        fn.add(ind, f"{pos} += {size}")
    else:
        r = fn.helper(_rw_name("read", base, fl.compact, fl.nullable))
        fn.add(ind, f"{var}, {pos} = {r}(data, {pos})")


def _is_fixed_scalar(fl: FieldLayout) -> bool:
    return fl.tag is None and fl.type in FIXED


def emit_encoder(mod: StructFormats, layout: Layout) -> Func:
    """The body of `_enc_<suffix>(o, buf, regions)`: appends `o`'s bytes to `buf`."""
    fn = Func(mod)
    run: list[FieldLayout] = []

    def flush() -> None:
        if not run:
            return
        fmt = ">" + "".join(FIXED[f.type][0] for f in run)
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


def emit_decoder(mod: StructFormats, layout: Layout) -> Func:
    """The body of `_dec_<suffix>(data, pos)`: returns the decoded object and the new pos."""
    fn = Func(mod)
    run: list[FieldLayout] = []

    def flush() -> None:
        if not run:
            return
        fmt = ">" + "".join(FIXED[f.type][0] for f in run)
        up = fn.unpack_from(fmt)
        size = sum(FIXED[f.type][1] for f in run)
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


def render_codec(mod: StructFormats, layouts: Layouts) -> list[str]:
    """Source lines of every layout's encoder and decoder, nested layouts first."""
    lines: list[str] = []
    for layout in layouts.order:
        lines += emit_encoder(mod, layout).render(f"_enc_{layout.suffix}", "o, buf, regions")
        lines += emit_decoder(mod, layout).render(f"_dec_{layout.suffix}", "data, pos")
    return lines
