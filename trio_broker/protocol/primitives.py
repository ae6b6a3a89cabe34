"""Runtime helpers for the generated codec: Kafka's primitive wire types.

The generated modules in `trio_broker.protocol._generated` do the per-field work in
straight-line code; what is shared by every message (varints, strings in their three
encodings, bytes, records, UUIDs, tagged-field sections) lives here, hand-written once.

Readers take `(data, pos)` where `data` is a memoryview over the whole frame and return
`(value, new_pos)`; writers append to a bytearray. A reader that finds bytes it cannot
accept raises `DecodeError`; the generated `decode` turns any stray low-level error
(IndexError, struct.error) into `DecodeError` too, so callers catch just one type.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any, ClassVar

__all__ = [
    "DEFAULT",
    "ZERO_UUID",
    "DecodeError",
    "Message",
    "Struct",
    "UnsupportedVersionError",
    "read_uvarint",
    "write_uvarint",
]

# Kafka's Uuid.ZERO_UUID: the "no topic id" value.
ZERO_UUID = uuid.UUID(int=0)


class DecodeError(ValueError):
    """The bytes are not a valid encoding of the message at this version."""


class UnsupportedVersionError(ValueError):
    """The message has no such version in the spec."""


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_NULL_I16 = b"\xff\xff"
_NULL_I32 = b"\xff\xff\xff\xff"


# -- unsigned varints (KIP-482 lengths and tags) ---------------------------------------


def read_uvarint(data: memoryview, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            # An int32 varint takes at most 5 bytes.
            raise DecodeError("unsigned varint longer than 5 bytes")


def write_uvarint(buf: bytearray, value: int) -> None:
    if value < 0x80:
        buf.append(value)
        return
    if value >> 32:
        raise ValueError(f"unsigned varint out of range: {value}")
    while value >= 0x80:
        buf.append((value & 0x7F) | 0x80)
        value >>= 7
    buf.append(value)


def uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    write_uvarint(out, value)
    return bytes(out)


# -- lengths ---------------------------------------------------------------------------


def _check_span(data: memoryview, pos: int, length: int) -> int:
    end = pos + length
    if end > len(data):
        raise DecodeError(f"length {length} at offset {pos} runs past the end ({len(data)})")
    return end


def read_array_len(data: memoryview, pos: int) -> tuple[int, int]:
    """int32 count; -1 is null (returned as -1, the caller decides if that is allowed)."""
    (n,) = _I32.unpack_from(data, pos)
    pos += 4
    if n < -1:
        raise DecodeError(f"negative array length {n}")
    if n > len(data) - pos:
        raise DecodeError(f"array of {n} elements but only {len(data) - pos} bytes left")
    return n, pos


def read_compact_array_len(data: memoryview, pos: int) -> tuple[int, int]:
    """uvarint count+1; 0 is null (returned as -1)."""
    n, pos = read_uvarint(data, pos)
    n -= 1
    if n > len(data) - pos:
        raise DecodeError(f"array of {n} elements but only {len(data) - pos} bytes left")
    return n, pos


_ARRAY_STRUCTS: dict[str, list[Callable[..., bytes]]] = {}


def array_structs(code: str, count: int = 16) -> list[Callable[..., bytes]]:
    """`pack` of ">{n}{code}" for n below `count`, made once: what generated encoders call
    for arrays of fixed-size elements instead of formatting and parsing a format each time."""
    found = _ARRAY_STRUCTS.get(code)
    if found is None or len(found) < count:
        found = _ARRAY_STRUCTS[code] = [struct.Struct(f">{n}{code}").pack for n in range(count)]
    return found


def write_array_len(buf: bytearray, n: int) -> None:
    buf += _I32.pack(n)


def write_compact_array_len(buf: bytearray, n: int) -> None:
    write_uvarint(buf, n + 1)


# -- strings ---------------------------------------------------------------------------


def read_string(data: memoryview, pos: int) -> tuple[str, int]:
    (n,) = _I16.unpack_from(data, pos)
    pos += 2
    if n < 0:
        raise DecodeError(f"null or negative length {n} for a non-nullable string")
    end = _check_span(data, pos, n)
    return str(data[pos:end], "utf-8"), end


def read_nullable_string(data: memoryview, pos: int) -> tuple[str | None, int]:
    (n,) = _I16.unpack_from(data, pos)
    pos += 2
    if n < 0:
        if n == -1:
            return None, pos
        raise DecodeError(f"negative string length {n}")
    end = _check_span(data, pos, n)
    return str(data[pos:end], "utf-8"), end


def read_compact_string(data: memoryview, pos: int) -> tuple[str, int]:
    n, pos = read_uvarint(data, pos)
    if n == 0:
        raise DecodeError("null for a non-nullable compact string")
    end = _check_span(data, pos, n - 1)
    return str(data[pos:end], "utf-8"), end


def read_compact_nullable_string(data: memoryview, pos: int) -> tuple[str | None, int]:
    n, pos = read_uvarint(data, pos)
    if n == 0:
        return None, pos
    end = _check_span(data, pos, n - 1)
    return str(data[pos:end], "utf-8"), end


def write_string(buf: bytearray, value: str) -> None:
    b = value.encode("utf-8")
    if len(b) > 0x7FFF:
        raise ValueError(f"string of {len(b)} bytes does not fit an int16 length")
    buf += _I16.pack(len(b))
    buf += b


def write_nullable_string(buf: bytearray, value: str | None) -> None:
    if value is None:
        buf += _NULL_I16
    else:
        write_string(buf, value)


def write_compact_string(buf: bytearray, value: str) -> None:
    b = value.encode("utf-8")
    write_uvarint(buf, len(b) + 1)
    buf += b


def write_compact_nullable_string(buf: bytearray, value: str | None) -> None:
    if value is None:
        buf.append(0)
    else:
        write_compact_string(buf, value)


# -- bytes (copied: small values such as assignments and metadata) ---------------------


def read_bytes(data: memoryview, pos: int) -> tuple[bytes, int]:
    (n,) = _I32.unpack_from(data, pos)
    pos += 4
    if n < 0:
        raise DecodeError(f"null or negative length {n} for non-nullable bytes")
    end = _check_span(data, pos, n)
    return bytes(data[pos:end]), end


def read_nullable_bytes(data: memoryview, pos: int) -> tuple[bytes | None, int]:
    (n,) = _I32.unpack_from(data, pos)
    pos += 4
    if n < 0:
        if n == -1:
            return None, pos
        raise DecodeError(f"negative bytes length {n}")
    end = _check_span(data, pos, n)
    return bytes(data[pos:end]), end


def read_compact_bytes(data: memoryview, pos: int) -> tuple[bytes, int]:
    n, pos = read_uvarint(data, pos)
    if n == 0:
        raise DecodeError("null for non-nullable compact bytes")
    end = _check_span(data, pos, n - 1)
    return bytes(data[pos:end]), end


def read_compact_nullable_bytes(data: memoryview, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_uvarint(data, pos)
    if n == 0:
        return None, pos
    end = _check_span(data, pos, n - 1)
    return bytes(data[pos:end]), end


def write_bytes(buf: bytearray, value: bytes) -> None:
    buf += _I32.pack(len(value))
    buf += value


def write_nullable_bytes(buf: bytearray, value: bytes | None) -> None:
    if value is None:
        buf += _NULL_I32
    else:
        write_bytes(buf, value)


def write_compact_bytes(buf: bytearray, value: bytes) -> None:
    write_uvarint(buf, len(value) + 1)
    buf += value


def write_compact_nullable_bytes(buf: bytearray, value: bytes | None) -> None:
    if value is None:
        buf.append(0)
    else:
        write_compact_bytes(buf, value)


# -- records: a zero-copy view on decode, a spliced file region on encode --------------


def read_records(data: memoryview, pos: int) -> tuple[memoryview | None, int]:
    (n,) = _I32.unpack_from(data, pos)
    pos += 4
    if n < 0:
        if n == -1:
            return None, pos
        raise DecodeError(f"negative records length {n}")
    end = _check_span(data, pos, n)
    return data[pos:end], end


def read_compact_records(data: memoryview, pos: int) -> tuple[memoryview | None, int]:
    n, pos = read_uvarint(data, pos)
    if n == 0:
        return None, pos
    end = _check_span(data, pos, n - 1)
    return data[pos:end], end


def _records_size(value: Any) -> int:
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if isinstance(value, memoryview):
        return value.nbytes
    size = getattr(value, "size", None)
    if type(size) is not int:
        raise TypeError(f"records must be bytes-like or have an int `size`, not {type(value)!r}")
    return size


def _append_records(buf: bytearray, value: Any, regions: list | None) -> None:
    if isinstance(value, (bytes, bytearray, memoryview)):
        buf += value
    else:
        if regions is None:
            raise ValueError("a file region in records needs a `regions` list to encode into")
        # The network layer splices the region's bytes in at this offset of `buf`.
        regions.append((len(buf), value))


def write_records(buf: bytearray, value: Any, regions: list | None) -> None:
    if value is None:
        buf += _NULL_I32
        return
    buf += _I32.pack(_records_size(value))
    _append_records(buf, value, regions)


def write_compact_records(buf: bytearray, value: Any, regions: list | None) -> None:
    if value is None:
        buf.append(0)
        return
    write_uvarint(buf, _records_size(value) + 1)
    _append_records(buf, value, regions)


# -- uuid ------------------------------------------------------------------------------


def read_uuid(data: memoryview, pos: int) -> tuple[uuid.UUID, int]:
    end = _check_span(data, pos, 16)
    return uuid.UUID(bytes=bytes(data[pos:end])), end


def write_uuid(buf: bytearray, value: uuid.UUID) -> None:
    buf += value.bytes


# -- tagged fields ---------------------------------------------------------------------


def skip_tagged_fields(data: memoryview, pos: int) -> int:
    """Skip a tagged-field section none of whose tags this version knows."""
    if data[pos] == 0:
        return pos + 1
    n, pos = read_uvarint(data, pos)
    for _ in range(n):
        _tag, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        pos = _check_span(data, pos, size)
    return pos


def read_tag_header(data: memoryview, pos: int) -> tuple[int, int, int]:
    """(tag, start of value, end of value) of one tagged field."""
    tag, pos = read_uvarint(data, pos)
    size, pos = read_uvarint(data, pos)
    return tag, pos, _check_span(data, pos, size)


def write_tagged_field(buf: bytearray, tag: int, value: bytes | bytearray) -> None:
    write_uvarint(buf, tag)
    write_uvarint(buf, len(value))
    buf += value


def check_tagged_end(pos: int, end: int) -> None:
    if pos > end:
        raise DecodeError("tagged field value runs past its declared size")


# -- the base of every generated class ---------------------------------------------------


class _Default:
    __slots__ = ()

    def __repr__(self) -> str:
        return "DEFAULT"


# The default of a generated field whose value is a new list or struct per instance.
DEFAULT: Any = _Default()


class Struct:
    """What every generated class shares: slots, keyword-only `__init__` and `__eq__` are
    in its generated text (compiled with the module, where attrs would compile them at
    import: a millisecond per class here, and start-up imports dozens); the rest is here."""

    __slots__ = ()

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"

    def replace(self, **changes: Any) -> Any:
        """A shallow copy with `changes` (attrs.evolve)."""
        copy = object.__new__(type(self))
        for name in self.__slots__:
            object.__setattr__(copy, name, changes.pop(name, getattr(self, name)))
        if changes:
            raise TypeError(f"{type(self).__name__} has no field(s) {sorted(changes)}")
        return copy


class Message(Struct):
    """encode/decode for a generated message class.

    Each generated class sets `_ENCODERS` and `_DECODERS`: version -> the straight-line
    function for that version's wire layout.
    """

    __slots__ = ()

    API_KEY: ClassVar[int | None] = None
    MIN_VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 0
    FLEXIBLE_MIN_VERSION: ClassVar[int | None] = None
    _ENCODERS: ClassVar[dict[int, Callable[..., None]]] = {}
    _DECODERS: ClassVar[dict[int, Callable[..., tuple[Any, int]]]] = {}

    def encode(
        self, version: int, buf: bytearray | None = None, regions: list | None = None
    ) -> bytearray:
        """Append this message's body at `version` to `buf` (a new one if None); return it.

        A `records` field holding a file region (any object with an int `size`) is not
        copied: its length prefix is written and `(offset_in_buf, region)` appended to
        `regions`, for the network layer to splice in.
        """
        fn = self._ENCODERS.get(version)
        if fn is None:
            raise UnsupportedVersionError(
                f"{type(self).__name__} has no version {version} "
                f"(valid {self.MIN_VERSION}-{self.MAX_VERSION})"
            )
        if buf is None:
            buf = bytearray()
        try:
            fn(self, buf, regions)
        except (struct.error, TypeError, AttributeError, OverflowError) as exc:
            raise ValueError(f"cannot encode {type(self).__name__} v{version}: {exc}") from exc
        return buf

    @classmethod
    def decode(
        cls, data: bytes | bytearray | memoryview, version: int, pos: int = 0
    ) -> tuple[Any, int]:
        """Decode one message at `version` from `data[pos:]`; return it and the end offset.

        `records` fields are memoryview slices of `data` (no copy): while they live, a
        bytearray passed in cannot be resized.
        """
        fn = cls._DECODERS.get(version)
        if fn is None:
            raise UnsupportedVersionError(
                f"{cls.__name__} has no version {version} (valid {cls.MIN_VERSION}-{cls.MAX_VERSION})"
            )
        if type(data) is not memoryview:
            data = memoryview(data)
        try:
            return fn(data, pos)
        except DecodeError:
            raise
        except (IndexError, struct.error, ValueError, OverflowError) as exc:
            raise DecodeError(f"bad {cls.__name__} v{version}: {exc}") from exc
