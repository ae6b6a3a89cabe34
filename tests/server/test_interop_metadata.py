"""Real clients list the broker's metadata; bad bytes close only their own connection."""

import json
import os
import socket
import struct
import subprocess

from confluent_kafka.admin import AdminClient
from wire import is_closed, request_of, roundtrip


def test_kcat_lists_the_broker(kafka_broker, kcat):
    out = subprocess.run(
        [kcat, "-b", kafka_broker.bootstrap, "-L", "-J", "-m", "10"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    meta = json.loads(out.stdout)
    assert [(b["id"], b["name"]) for b in meta["brokers"]] == [(1, kafka_broker.bootstrap)]
    assert meta["controllerid"] == 1
    assert meta["topics"] == []


def test_confluent_admin_lists_the_broker(kafka_broker):
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    meta = admin.list_topics(timeout=20)
    assert list(meta.brokers) == [1]
    broker = meta.brokers[1]
    assert (broker.host, broker.port) == (kafka_broker.host, kafka_broker.port)
    assert meta.controller_id == 1
    assert meta.cluster_id  # generated at first start, kept in meta.properties


def test_kafka_python_admin_reads_the_cluster(kafka_broker):
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap, request_timeout_ms=20000)
    try:
        cluster = admin.describe_cluster()
        assert cluster["controller_id"] == 1
        assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
            (1, kafka_broker.host, kafka_broker.port)
        ]
        assert admin.list_topics() == []
    finally:
        admin.close()


def _connect(broker) -> socket.socket:
    return socket.create_connection((broker.host, broker.port), timeout=10)


def _api_versions_ok(sock: socket.socket) -> None:
    response = roundtrip(sock, request_of(18), 3)
    assert response.error_code == 0
    assert {k.api_key for k in response.api_keys} >= {3, 18}


def test_bad_bytes_close_only_that_connection(kafka_broker):
    good = _connect(kafka_broker)
    _api_versions_ok(good)
    # 1. random bytes that happen to form a frame of garbage
    bad = _connect(kafka_broker)
    bad.sendall(struct.pack(">i", 64) + os.urandom(64))
    assert is_closed(bad)
    _api_versions_ok(good)
    # 2. a 2 GiB length prefix: refused before anything is buffered
    bad = _connect(kafka_broker)
    bad.sendall(struct.pack(">i", 2**31 - 1) + b"\x00\x12")
    assert is_closed(bad)
    _api_versions_ok(good)
    # 3. a truncated frame, then the client goes away
    bad = _connect(kafka_broker)
    bad.sendall(struct.pack(">i", 100) + b"\x00\x12\x00\x03")
    bad.close()
    _api_versions_ok(good)
    # 4. an unknown api key
    bad = _connect(kafka_broker)
    bad.sendall(struct.pack(">ihhi", 10, 9999, 0, 1) + b"\x00\x00")
    assert is_closed(bad)
    # 5. a well-formed header with a body that is cut short
    bad = _connect(kafka_broker)
    bad.sendall(struct.pack(">ihhih", 10, 3, 1, 7, -1))  # Metadata v1, no topics array
    assert is_closed(bad)
    _api_versions_ok(good)
    good.close()


def test_unknown_api_versions_version_gets_v0_error_with_ranges(kafka_broker):
    sock = _connect(kafka_broker)
    # ApiVersions v99, header v1 (client id "x"), a body the broker must not try to read.
    header = struct.pack(">hhih", 18, 99, 42, 1) + b"x"
    frame = header + b"\xde\xad\xbe\xef"
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    from wire import read_response

    cid, response = read_response(sock, 18, 0)
    assert cid == 42
    assert response.error_code == 35  # UNSUPPORTED_VERSION
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[18] == (0, 4)
    # The connection stays usable: the client retries with a version both sides know.
    _api_versions_ok(sock)
    sock.close()


def test_pipelined_requests_answered_in_order(kafka_broker):
    from wire import encode_request, read_response

    sock = _connect(kafka_broker)
    data = b"".join(encode_request(request_of(18), 3, correlation_id=i) for i in range(50))
    sock.sendall(data)
    assert [read_response(sock, 18, 3)[0] for _ in range(50)] == list(range(50))
    sock.close()


def test_metadata_v10_and_v11_cannot_look_topics_up_by_id(kafka_broker):
    # Their requests carry topic ids, their answers cannot carry a null name: a topic given
    # by id (or with no name) makes the whole request INVALID_REQUEST, as in Kafka, and the
    # connection stays open. (It closed: the answer's null name could not be encoded.)
    import uuid

    from trio_broker.protocol._generated.metadata_request import MetadataRequestTopic

    sock = _connect(kafka_broker)
    some_id = uuid.UUID(int=7)
    for correlation_id, version in ((1, 10), (2, 11)):
        topics = [MetadataRequestTopic(name=None, topic_id=some_id), MetadataRequestTopic(name="t")]
        answer = roundtrip(sock, request_of(3, topics=topics), version, correlation_id)
        assert [(t.name, t.topic_id, t.error_code) for t in answer.topics] == [
            ("", some_id, 42),  # INVALID_REQUEST
            ("t", uuid.UUID(int=0), 42),
        ]
    # v12 looks the id up: unknown here.
    answer = roundtrip(
        sock, request_of(3, topics=[MetadataRequestTopic(name=None, topic_id=some_id)]), 12, 3
    )
    assert [(t.name, t.error_code) for t in answer.topics] == [(None, 100)]  # UNKNOWN_TOPIC_ID
    sock.close()
