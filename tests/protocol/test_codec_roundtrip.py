"""Property round trips for every (message, version) of the generated codec.

The strategies are built from each class's `_SCHEMA` table (attribute, spec type,
versions present, versions nullable), so a field only gets a random value in the
versions that carry it; everything else keeps its default and must survive as such.
"""

from __future__ import annotations

import importlib
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trio_broker.protocol._generated as generated
from trio_broker.protocol.primitives import ZERO_UUID

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}


def _scalar(type_name: str) -> st.SearchStrategy:
    if type_name in _INT_RANGES:
        lo, hi = _INT_RANGES[type_name]
        # Bias towards the edges and small values, where length and sign bugs live.
        edges = [x for x in (lo, hi, -1, 0, 1) if lo <= x <= hi]
        return st.one_of(st.sampled_from(edges), st.integers(lo, hi))
    return {
        "bool": st.booleans(),
        "float64": st.floats(allow_nan=False),
        "string": st.text(max_size=6),
        "bytes": st.binary(max_size=6),
        "uuid": st.one_of(st.just(ZERO_UUID), st.uuids()),
        "records": st.binary(max_size=12),
    }[type_name]


def _in(version: int, versions: tuple[int, int] | None) -> bool:
    return versions is not None and versions[0] <= version <= versions[1]


def message_strategy(cls: type, module: object, version: int) -> st.SearchStrategy:
    kwargs = {}
    for attr, type_name, present, nullable in cls._SCHEMA:
        if not _in(version, present):
            continue
        base = type_name.removeprefix("[]")
        if base in _INT_RANGES or base in ("bool", "float64", "string", "bytes", "uuid", "records"):
            element = _scalar(base)
        else:
            element = message_strategy(getattr(module, base), module, version)
        strategy = st.lists(element, max_size=2) if type_name.startswith("[]") else element
        if _in(version, nullable):
            strategy = st.one_of(st.none(), strategy)
        kwargs[attr] = strategy
    return st.builds(cls, **kwargs)


def _cases() -> list[tuple[str, int]]:
    cases = []
    for name in sorted(generated.MESSAGE_MODULES):
        cls = generated.message_class(name)
        cases += [(name, v) for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1)]
    return cases


@pytest.mark.parametrize(("name", "version"), _cases())
def test_roundtrip(name: str, version: int) -> None:
    cls = generated.message_class(name)
    module = importlib.import_module(cls.__module__)

    @settings(
        max_examples=10,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(message_strategy(cls, module, version))
    def check(msg: object) -> None:
        data = msg.encode(version)
        back, end = cls.decode(bytes(data), version)
        assert end == len(data)
        assert back == msg
        assert back.encode(version) == data
        # Decoding from an offset inside a larger frame lands on the same end.
        _, end2 = cls.decode(b"\x00" * 3 + bytes(data) + b"\x00", version, 3)
        assert end2 == 3 + len(data)

    check()


def test_every_message_has_a_case() -> None:
    names = {name for name, _ in _cases()}
    assert {"ProduceRequest", "FetchResponse", "RequestHeader", "OffsetCommitKey"} <= names
    assert len(names) == len(generated.MESSAGE_MODULES)


def test_defaults_round_trip_at_every_version() -> None:
    # A message built with no arguments must encode at every version it supports,
    # except where the spec has a non-nullable field whose default is null.
    failures = []
    for name, version in _cases():
        cls = generated.message_class(name)
        msg = cls()
        data = msg.encode(version)
        back, end = cls.decode(data, version)
        if back != msg or end != len(data):
            failures.append((name, version))
    assert failures == []


def test_zero_uuid_is_kafkas() -> None:
    assert ZERO_UUID == uuid.UUID("00000000-0000-0000-0000-000000000000")
