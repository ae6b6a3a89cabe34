"""Cross-check against an independent implementation: kafka-python's protocol classes.

Random messages encoded by our codec must decode in kafka-python and re-encode there to
the very same bytes; the two were generated from the spec by different code.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from hypothesis import HealthCheck, given, settings
from test_codec_roundtrip import message_strategy  # same directory, on sys.path under pytest

import trio_broker.protocol._generated as generated

kafka_protocol = pytest.importorskip("kafka.protocol")
api_message = pytest.importorskip("kafka.protocol.api_message")


def _kafka_python_classes() -> dict[str, type]:
    found = {}
    for info in pkgutil.walk_packages(kafka_protocol.__path__, "kafka.protocol."):
        if ".old" in info.name or "generate" in info.name:
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, api_message.ApiMessage):
                found[name] = obj
    return found


# Where kafka-python departs from the plain spec on purpose, not a codec difference.
_SKIP = {
    # kafka-python re-encodes an ApiVersions error response as v0, the broker-side quirk.
    "ApiVersionsResponse",
    # kafka-python overrides encode() here and needs a request header to re-encode.
    "DeleteTopicsRequest",
}


def _cases() -> list[tuple[str, int]]:
    theirs = _kafka_python_classes()
    cases = []
    for key in sorted(generated.API_NAMES):
        for suffix in ("Request", "Response"):
            name = generated.API_NAMES[key] + suffix
            if name not in theirs or name in _SKIP:
                continue
            ours = generated.message_class(name)
            other = theirs[name]
            lo = max(ours.MIN_VERSION, other.min_version)
            hi = min(ours.MAX_VERSION, other.max_version)
            cases += [(name, v) for v in range(lo, hi + 1)]
    return cases


CASES = _cases()
THEIRS = _kafka_python_classes()


@pytest.mark.parametrize(("name", "version"), CASES)
def test_kafka_python_reencodes_our_bytes(name: str, version: int) -> None:
    cls = generated.message_class(name)
    module = importlib.import_module(cls.__module__)

    @settings(max_examples=3, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(message_strategy(cls, module, version))
    def check(msg: object) -> None:
        data = bytes(msg.encode(version))
        theirs = THEIRS[name].decode(data, version=version)
        assert bytes(theirs.encode()) == data  # a decoded object keeps its version

    check()
