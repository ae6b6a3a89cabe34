"""Bad input to the generated codec: truncation, impossible lengths, unknown versions."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

import trio_broker.protocol._generated as generated
from trio_broker.protocol._generated.api_versions_request import ApiVersionsRequest
from trio_broker.protocol._generated.fetch_request import FetchPartition, FetchRequest, FetchTopic
from trio_broker.protocol._generated.metadata_response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from trio_broker.protocol._generated.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from trio_broker.protocol._generated.request_header import RequestHeader
from trio_broker.protocol.primitives import DecodeError, UnsupportedVersionError

PRODUCE = ProduceRequest(
    transactional_id="tx",
    acks=-1,
    timeout_ms=100,
    topic_data=[
        TopicProduceData(name="t", partition_data=[PartitionProduceData(index=1, records=b"abc")])
    ],
)
FETCH = FetchRequest(
    replica_id=-1,
    max_wait_ms=500,
    min_bytes=1,
    cluster_id="c",
    topics=[FetchTopic(topic="t", topic_id=uuid.uuid4(), partitions=[FetchPartition(partition=3)])],
)
METADATA = MetadataResponse(
    brokers=[MetadataResponseBroker(node_id=1, host="localhost", port=9092, rack=None)],
    cluster_id="cluster",
    topics=[
        MetadataResponseTopic(
            name="t",
            topic_id=uuid.uuid4(),
            partitions=[MetadataResponsePartition(partition_index=0, replica_nodes=[1, 2])],
        )
    ],
)


@pytest.mark.parametrize(
    ("msg", "versions"),
    [
        (PRODUCE, [3, 8, 9, 11]),
        (FETCH, [4, 12, 13, 16]),
        (METADATA, [1, 8, 9, 12]),
        (ApiVersionsRequest(client_software_name="x", client_software_version="1"), [3]),
        (RequestHeader(request_api_key=1, client_id="abc"), [1, 2]),
    ],
    ids=["produce", "fetch", "metadata", "api_versions", "header"],
)
def test_every_prefix_is_a_decode_error(msg: object, versions: list[int]) -> None:
    for version in versions:
        frame = bytes(msg.encode(version))
        assert type(msg).decode(frame, version) == (type(msg).decode(frame, version)[0], len(frame))
        for cut in range(len(frame)):
            with pytest.raises(DecodeError):
                type(msg).decode(frame[:cut], version)
            # A memoryview input behaves the same.
            with pytest.raises(DecodeError):
                type(msg).decode(memoryview(frame)[:cut], version)


@pytest.mark.parametrize(
    ("frame", "version", "why"),
    [
        (b"\x00\x01\x00\x00\x00\x00\x00\x00\xff\xfe", 1, "client id length -2"),
        (b"\x00\x01\x00\x00\x00\x00\x00\x00\x7f\xff", 1, "client id longer than the frame"),
        (b"\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\xff\x00", 2, "client id not UTF-8"),
        (b"\x00\x01\x00\x00\x00\x00\x00\x00\xff\xff\x01\x05", 2, "tagged field past the end"),
        (b"\x00\x01\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\x01", 2, "6-byte varint"),
    ],
)
def test_impossible_header_bytes(frame: bytes, version: int, why: str) -> None:
    with pytest.raises(DecodeError):
        RequestHeader.decode(frame, version)


def test_negative_lengths_other_than_null() -> None:
    # Produce v3: TransactionalId -2 is not null.
    with pytest.raises(DecodeError, match="negative"):
        ProduceRequest.decode(b"\xff\xfe" + bytes(PRODUCE.encode(3))[4:], 3)
    # Records length -2.
    frame = bytearray(PRODUCE.encode(3))
    frame[-7:] = b"\xff\xff\xff\xfe" + b"abc"
    with pytest.raises(DecodeError, match="negative records"):
        ProduceRequest.decode(frame, 3)
    # Topics array null where the spec forbids it.
    with pytest.raises(DecodeError, match="non-nullable"):
        ProduceRequest.decode(
            b"\x00\x02tx" + b"\xff\xff" + b"\x00\x00\x00\x64" + b"\xff\xff\xff\xff", 3
        )
    # An array claiming more elements than there are bytes left.
    with pytest.raises(DecodeError, match="elements"):
        ProduceRequest.decode(b"\xff\xff\xff\xff\x00\x00\x00\x64\x7f\xff\xff\xff", 3)
    # A compact non-nullable string encoded as null.
    with pytest.raises(DecodeError, match="null"):
        ApiVersionsRequest.decode(b"\x00\x01\x00", 3)


@pytest.mark.parametrize("version", [-1, 12, 99])
def test_unsupported_version(version: int) -> None:
    with pytest.raises(ValueError, match="no version"):
        PRODUCE.encode(version)
    with pytest.raises(UnsupportedVersionError):
        ProduceRequest.decode(b"", version)
    assert not issubclass(UnsupportedVersionError, DecodeError)


def test_unencodable_values_are_value_errors() -> None:
    with pytest.raises(ValueError, match="ProduceRequest v3"):
        ProduceRequest(acks=1 << 20).encode(3)
    with pytest.raises(ValueError):
        ProduceRequest(topic_data=None).encode(3)  # non-nullable array
    with pytest.raises(ValueError):
        RequestHeader(client_id="x" * 40000).encode(1)  # int16 length overflow


def test_index_maps_api_keys_to_classes() -> None:
    assert generated.API_NAMES[0] == "Produce"
    assert generated.API_NAMES[18] == "ApiVersions"
    assert generated.REQUEST_MODULES[1] == "fetch_request"
    assert generated.RESPONSE_MODULES[3] == "metadata_response"
    assert generated.REQUEST_VERSIONS[0] == (0, 11)
    assert generated.FLEXIBLE_MIN_VERSIONS[0] == 9
    assert generated.FLEXIBLE_MIN_VERSIONS[18] == 3
    assert generated.request_class(0) is ProduceRequest
    assert generated.response_class(3) is MetadataResponse
    assert generated.message_class("RequestHeader") is RequestHeader
    for key, (lo, hi) in generated.REQUEST_VERSIONS.items():
        cls = generated.request_class(key)
        assert (cls.API_KEY, cls.MIN_VERSION, cls.MAX_VERSION) == (key, lo, hi)
        assert generated.response_class(key).API_KEY == key
    # The ZooKeeper-era inter-broker APIs are generated too (the controller sends them).
    assert generated.API_NAMES[4] == "LeaderAndIsr"
    assert generated.REQUEST_VERSIONS[4] == (0, 7)
    with pytest.raises(KeyError):
        generated.request_class(1000)  # no such API


def test_index_import_is_lazy() -> None:
    code = (
        "import sys, trio_broker.protocol._generated as g\n"
        "loaded = [m for m in sys.modules if m.startswith('trio_broker.protocol._generated.')]\n"
        "assert loaded == [], loaded\n"
        "g.request_class(0)\n"
        "assert 'trio_broker.protocol._generated.produce_request' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
