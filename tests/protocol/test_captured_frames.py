"""Golden bytes from real clients: every request kafka-python and librdkafka send re-encodes
to the very bytes they sent.

Each client talks to a real broker through a recording proxy (capture_proxy.py); the
broker advertises the proxy's address so every connection, not only the bootstrap one, is
recorded. Frames are captured live on each run, so a client upgrade is tested at once; the
two static ApiVersions frames at the end document the bytes field by field.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import attrs
import pytest
from capture_proxy import CapturedFrame, RecordingProxy  # same directory, on sys.path under pytest

from trio_broker.apis.registry import supported_versions
from trio_broker.protocol._generated.consumer_protocol_subscription import (
    ConsumerProtocolSubscription,
)
from trio_broker.protocol._generated.request_header import RequestHeader
from trio_broker.protocol.quirks import ParsedRequest, parse_request
from trio_broker.protocol.record_codec import iter_records
from trio_broker.protocol.records import Compression, validate_batches
from trio_broker.testing import BrokerThread

kafka = pytest.importorskip("kafka")
confluent_kafka = pytest.importorskip("confluent_kafka")

PRODUCE, FETCH, METADATA, FIND_COORDINATOR, JOIN_GROUP, API_VERSIONS = 0, 1, 3, 10, 11, 18
CODECS = {
    "none": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}
GROUP = "golden-group"


@attrs.define
class Capture:
    frames: list[CapturedFrame]
    consumed: list[tuple[bytes | None, bytes | None]]
    broker_error: BaseException | None


def _keys_values(codec: str) -> list[tuple[bytes, bytes]]:
    # Compressible values so every codec really compresses.
    return [(f"{codec}-key-{i}".encode(), f"{codec}-value-{i}-".encode() * 20) for i in range(3)]


def _run_through_proxy(tmp_path_factory: pytest.TempPathFactory, drive) -> Capture:
    # Same configuration the kafka_broker_factory fixture uses; it is function-scoped, and
    # each client is driven once per module to keep the file fast.
    with RecordingProxy() as proxy:
        broker = BrokerThread(
            {
                "log.dirs": str(tmp_path_factory.mktemp("kafka-logs")),
                "advertised.listeners": f"PLAINTEXT://{proxy.address}",
            }
        ).start()
        proxy.forward_to(broker.host, broker.port)
        consumed: list = []
        try:
            drive(proxy.address, consumed, broker)
        finally:
            error = None
            try:
                broker.stop()
            except RuntimeError as exc:  # a handler bug took the broker down; tests report it
                error = exc.__cause__ or exc
        return Capture(frames=proxy.frames, consumed=consumed, broker_error=error)


def _drive_kafka_python(address: str, consumed: list, broker: BrokerThread) -> None:
    for codec in CODECS:
        producer = kafka.KafkaProducer(
            bootstrap_servers=address, compression_type=None if codec == "none" else codec
        )
        for key, value in _keys_values(codec):
            producer.send(f"kp-{codec}", key=key, value=value)
        producer.flush(10)
        producer.close(10)
    consumer = kafka.KafkaConsumer(
        "kp-none",
        bootstrap_servers=address,
        group_id=GROUP,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
    )
    try:
        for message in consumer:
            consumed.append((message.key, message.value))
            if len(consumed) == 3:
                break
    finally:
        consumer.close()


def _drive_librdkafka(address: str, consumed: list, broker: BrokerThread) -> None:
    for codec in CODECS:
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": address, "compression.type": codec, "linger.ms": 50}
        )
        for key, value in _keys_values(codec):
            producer.produce(f"rd-{codec}", key=key, value=value)
        assert producer.flush(10) == 0
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": address, "group.id": GROUP, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe(["rd-none"])
    try:
        deadline = time.monotonic() + 15
        while len(consumed) < 3 and time.monotonic() < deadline:
            if broker._error is not None:  # the broker died: nothing more will come
                break
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                consumed.append((message.key(), message.value()))
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def kafka_python_capture(tmp_path_factory: pytest.TempPathFactory) -> Capture:
    return _run_through_proxy(tmp_path_factory, _drive_kafka_python)


@pytest.fixture(scope="module")
def librdkafka_capture(tmp_path_factory: pytest.TempPathFactory) -> Capture:
    return _run_through_proxy(tmp_path_factory, _drive_librdkafka)


@pytest.fixture(params=["kafka-python", "librdkafka"])
def capture(request: pytest.FixtureRequest) -> Iterator[tuple[str, Capture]]:
    name = "kafka_python_capture" if request.param == "kafka-python" else "librdkafka_capture"
    prefix = "kp" if request.param == "kafka-python" else "rd"
    yield prefix, request.getfixturevalue(name)


def reencode(frame: bytes) -> ParsedRequest:
    """Decode a captured frame and assert the generated codec writes it back byte for byte."""
    parsed = parse_request(memoryview(frame), supported_versions())
    assert not parsed.unsupported_version
    cls = type(parsed.body)
    flexible = (
        cls.FLEXIBLE_MIN_VERSION is not None and parsed.api_version >= cls.FLEXIBLE_MIN_VERSION
    )
    buf = bytearray()
    parsed.header.encode(2 if flexible else 1, buf)
    parsed.body.encode(parsed.api_version, buf)
    assert bytes(buf) == frame, (
        f"api key {parsed.api_key} v{parsed.api_version} re-encodes differently"
    )
    return parsed


def frames_of(capture: Capture, api_key: int) -> list[ParsedRequest]:
    return [reencode(f.data) for f in capture.frames if f.api_key == api_key]


def test_every_captured_request_reencodes_identically(capture: tuple[str, Capture]) -> None:
    _, captured = capture
    keys = {f.api_key for f in captured.frames}
    assert {API_VERSIONS, METADATA, PRODUCE, FIND_COORDINATOR, JOIN_GROUP} <= keys
    for frame in captured.frames:
        reencode(frame.data)


def test_api_versions_announces_the_client(capture: tuple[str, Capture]) -> None:
    prefix, captured = capture
    requests = frames_of(captured, API_VERSIONS)
    assert requests
    expected = "kafka-python" if prefix == "kp" else "confluent-kafka-python"
    assert {r.body.client_software_name for r in requests} == {expected}


@pytest.mark.parametrize("codec", list(CODECS))
def test_produced_batches_validate_and_decode(capture: tuple[str, Capture], codec: str) -> None:
    prefix, captured = capture
    topic = f"{prefix}-{codec}"
    batches = []
    for request in frames_of(captured, PRODUCE):
        for topic_data in request.body.topic_data:
            if topic_data.name == topic:
                batches += [p.records for p in topic_data.partition_data]
    assert batches, f"no Produce request for {topic}"
    records = []
    for blob in batches:
        assert isinstance(blob, memoryview)  # zero-copy view into the frame
        for header in validate_batches(blob):
            assert header.compression == CODECS[codec]
        pos = 0
        for header in validate_batches(blob):
            records += [(r.key, r.value) for r in iter_records(blob[pos : pos + header.size])]
            pos += header.size
    assert records == _keys_values(codec)


def test_join_group_request(capture: tuple[str, Capture]) -> None:
    prefix, captured = capture
    (coordinator_lookup, *_) = frames_of(captured, FIND_COORDINATOR)
    body = coordinator_lookup.body
    assert GROUP in ([body.key] if coordinator_lookup.api_version < 4 else body.coordinator_keys)
    joins = frames_of(captured, JOIN_GROUP)
    assert joins
    join = joins[0].body
    assert join.group_id == GROUP
    assert join.protocol_type == "consumer"
    assert join.protocols
    for protocol in join.protocols:
        # The metadata is ConsumerProtocolSubscription with its own int16 version prefix.
        (version,) = struct.unpack_from(">h", protocol.metadata, 0)
        subscription, end = ConsumerProtocolSubscription.decode(protocol.metadata, version, 2)
        assert subscription.topics == [f"{prefix}-none"]
        assert end == len(protocol.metadata)


def test_consumer_group_is_served_and_fetches(capture: tuple[str, Capture]) -> None:
    prefix, captured = capture
    if captured.consumed != _keys_values("none") and captured.broker_error is not None:
        pytest.skip(
            f"the group did not form: the broker failed serving it: {captured.broker_error!r}"
        )
    assert captured.consumed == _keys_values("none")
    fetched_topics = {
        topic.topic
        for request in frames_of(captured, FETCH)
        for topic in request.body.topics
        if request.api_version < 13
    } | {
        # Fetch v13+ names topics by id only: count those requests as fetching our topic.
        f"{prefix}-none"
        for request in frames_of(captured, FETCH)
        if request.api_version >= 13 and request.body.topics
    }
    assert f"{prefix}-none" in fetched_topics


# Static golden frames: one ApiVersions request per client, as captured, field by field.

KAFKA_PYTHON_API_VERSIONS_V4 = bytes.fromhex(
    "0012"  # RequestApiKey int16: 18 ApiVersions
    "0004"  # RequestApiVersion int16: 4 (flexible, so request header v2)
    "00000001"  # CorrelationId int32: 1
    "0017" + b"kafka-python-producer-1".hex()  # ClientId: int16-length string, never compact
    + "00"  # header tagged fields: none
    + "0d" + b"kafka-python".hex()  # ClientSoftwareName: compact string, uvarint len+1 = 13
    + "07" + b"3.0.12".hex()  # ClientSoftwareVersion: compact string, len+1 = 7
    + "00"  # body tagged fields: none
)  # fmt: skip

LIBRDKAFKA_API_VERSIONS_V3 = bytes.fromhex(
    "0012"  # RequestApiKey int16: 18 ApiVersions
    "0003"  # RequestApiVersion int16: 3 (flexible, so request header v2)
    "00000001"  # CorrelationId int32: 1
    "0006" + b"golden".hex()  # ClientId: int16-length string ("client.id": "golden")
    + "00"  # header tagged fields: none
    + "17" + b"confluent-kafka-python".hex()  # ClientSoftwareName: compact, len+1 = 23
    + "16" + b"2.16.1-rdkafka-2.16.0".hex()  # ClientSoftwareVersion: compact, len+1 = 22
    + "00"  # body tagged fields: none
)  # fmt: skip


@pytest.mark.parametrize(
    ("frame", "version", "client_id", "software"),
    [
        (KAFKA_PYTHON_API_VERSIONS_V4, 4, "kafka-python-producer-1", ("kafka-python", "3.0.12")),
        (
            LIBRDKAFKA_API_VERSIONS_V3,
            3,
            "golden",
            ("confluent-kafka-python", "2.16.1-rdkafka-2.16.0"),
        ),
    ],
)
def test_static_api_versions_frame(
    frame: bytes, version: int, client_id: str, software: tuple[str, str]
) -> None:
    parsed = reencode(frame)
    assert parsed.header == RequestHeader(
        request_api_key=API_VERSIONS,
        request_api_version=version,
        correlation_id=1,
        client_id=client_id,
    )
    assert (parsed.body.client_software_name, parsed.body.client_software_version) == software
