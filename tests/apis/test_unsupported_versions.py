"""Versions the broker does not serve: Kafka 3.9's table by default, Kafka 4.0's baseline
with min.api.versions=4.0, and what a client of a removed or unknown version gets back."""

from __future__ import annotations

import logging
import socket
import struct

import pytest
from wire import encode_request, is_closed, read_response, request_of, roundtrip

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.api_versions_response import ApiVersionsResponse
from trio_broker.protocol.legacy_records import build_message_set
from trio_broker.testing import BrokerThread

TIMEOUT = 30


@pytest.fixture(scope="module")
def broker40(tmp_path_factory):
    props = {
        "log.dirs": str(tmp_path_factory.mktemp("baseline-40")),
        "num.partitions": "1",
        "min.api.versions": "4.0",
    }
    with BrokerThread(props) as b:
        yield b


@pytest.fixture(scope="module")
def broker39(tmp_path_factory):
    with BrokerThread({"log.dirs": str(tmp_path_factory.mktemp("baseline-39"))}) as b:
        yield b


def connect(broker) -> socket.socket:
    return socket.create_connection((broker.host, broker.port), timeout=TIMEOUT)


def ranges(answer) -> dict[int, tuple[int, int]]:
    return {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}


def test_the_default_table_is_kafka_39s_from_version_0(broker39):
    with connect(broker39) as sock:
        listed = ranges(roundtrip(sock, request_of(18), 3))
    for key, low in {0: 0, 1: 0, 2: 0, 3: 0, 8: 0, 9: 0, 11: 0, 19: 0, 20: 0, 32: 0}.items():
        assert listed[key][0] == low, key
    assert listed[0][1] == 11 and listed[1][1] == 17


def test_kafka_40s_baseline_is_listed_and_served(broker40):
    with connect(broker40) as sock:
        listed = ranges(roundtrip(sock, request_of(18), 3))
    # KIP-896's lowest versions; Produce is listed from 0 as Kafka 4.0 lists it
    # (KAFKA-18659), and served from 3.
    expected = {0: 0, 1: 4, 2: 1, 8: 2, 9: 1, 19: 2, 20: 1, 23: 2, 32: 1, 35: 1, 3: 0, 11: 0}
    assert {k: listed[k][0] for k in expected} == expected


def test_api_versions_of_an_unknown_version_answers_with_the_ranges_in_v0(broker40):
    with connect(broker40) as sock:
        # A v3 request whose version field (bytes 6-7 of the frame) says 99.
        frame = bytearray(encode_request(request_of(18), 3, correlation_id=7))
        struct.pack_into(">h", frame, 6, 99)
        sock.sendall(bytes(frame))
        (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
        body = sock.recv(size, socket.MSG_WAITALL)
    (correlation_id,) = struct.unpack_from(">i", body, 0)
    answer, _ = ApiVersionsResponse.decode(memoryview(body), 0, 4)
    assert correlation_id == 7
    assert answer.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert ranges(answer)[1] == (4, 17)


def test_removed_versions_are_answered_unsupported_version_and_logged(broker40, caplog):
    from trio_broker.protocol._generated.fetch_request import FetchPartition, FetchTopic
    from trio_broker.protocol._generated.offset_commit_request import (
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )
    from trio_broker.protocol._generated.produce_request import (
        PartitionProduceData,
        TopicProduceData,
    )

    caplog.set_level(logging.INFO, logger="trio_broker.server.connection")
    records = build_message_set([(0, 1, b"k", b"v")], magic=1)
    with connect(broker40) as sock:
        answer = roundtrip(
            sock,
            request_of(
                0,
                acks=1,
                timeout_ms=1000,
                topic_data=[
                    TopicProduceData(
                        name="t", partition_data=[PartitionProduceData(index=0, records=records)]
                    )
                ],
            ),
            2,
        )
        assert answer.responses[0].partition_responses[0].error_code == 35
        # The same connection goes on: the next request is answered too.
        answer = roundtrip(
            sock,
            request_of(
                1,
                replica_id=-1,
                topics=[
                    FetchTopic(topic="t", partitions=[FetchPartition(partition=0)]),
                ],
            ),
            3,
            correlation_id=2,
        )
        assert answer.responses[0].partitions[0].error_code == 35
        answer = roundtrip(
            sock,
            request_of(
                8,
                group_id="g",
                topics=[
                    OffsetCommitRequestTopic(
                        name="t",
                        partitions=[OffsetCommitRequestPartition(partition_index=0)],
                    )
                ],
            ),
            1,
            correlation_id=3,
        )
        assert answer.topics[0].partitions[0].error_code == 35
        answer = roundtrip(sock, request_of(18), 0, correlation_id=4)
        assert answer.error_code == 0
    lines = [r.getMessage() for r in caplog.records]
    assert any("Produce v2" in line and "v3-v11" in line for line in lines), lines
    assert any("Fetch v3" in line and "v4-v17" in line for line in lines), lines
    assert any("OffsetCommit v1" in line and "v2-v9" in line for line in lines), lines


def test_a_version_of_no_known_layout_closes_the_connection_with_a_log_line(broker39, caplog):
    caplog.set_level(logging.INFO, logger="trio_broker.server.connection")
    with connect(broker39) as sock:
        frame = bytearray(encode_request(request_of(3), 12))
        struct.pack_into(">h", frame, 6, 40)
        sock.sendall(bytes(frame))
        assert is_closed(sock)
    lines = [r.getMessage() for r in caplog.records]
    assert any("Metadata" in line and "v0-v12" in line and "40" in line for line in lines), lines


def test_a_version_above_ours_with_a_known_layout_gets_a_top_level_error(broker39):
    # AddOffsetsToTxn v4 (Kafka 3.9's file defines it; this broker serves up to v3).
    with connect(broker39) as sock:
        request = request_of(25, transactional_id="t", producer_id=1, group_id="g")
        sock.sendall(encode_request(request, 4))
        _, answer = read_response(sock, 25, 4)
    assert answer.error_code == 35
