"""Fetch's common shape in one step (protocol/fetch_codec.py): for every version, the same
answer bytes and file regions as the generated encoder and the general path, the same
requests read as the generated decoder reads them, and the same errors for bad bytes."""

import random
import uuid

import pytest

from trio_broker.apis.registry import supported_versions
from trio_broker.protocol._generated.fetch_request import (
    FetchPartition,
    FetchRequest,
    FetchTopic,
    ForgottenTopic,
    ReplicaState,
)
from trio_broker.protocol._generated.fetch_response import (
    AbortedTransaction,
    EpochEndOffset,
    FetchableTopicResponse,
    FetchResponse,
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionData,
    SnapshotId,
)
from trio_broker.protocol._generated.request_header import RequestHeader
from trio_broker.protocol.quirks import (
    InvalidRequest,
    _encode_response,
    _parse_request,
    encode_response,
    parse_request,
)

VERSIONS = range(FetchResponse.MIN_VERSION, FetchResponse.MAX_VERSION + 1)
REQUEST_VERSIONS = range(FetchRequest.MIN_VERSION, FetchRequest.MAX_VERSION + 1)
SUPPORTED = supported_versions()
NAMES = ["perf", "t", "a.b-c_d", "x" * 130, "é" * 70]
IDS = [uuid.UUID(int=0), uuid.UUID(int=1), uuid.UUID(int=(1 << 128) - 1)]


class Region:
    """A file region as the network layer sees one: only its size is read."""

    def __init__(self, size: int) -> None:
        self.size = size


def random_response(rnd: random.Random) -> FetchResponse:
    # Mostly the common shape (one topic, one partition, nothing tagged), sometimes not.
    def partition() -> PartitionData:
        data = PartitionData(
            partition_index=rnd.choice([0, 1, 1 << 20]),
            error_code=rnd.choice([0, 0, 0, 1, 6, 74]),
            high_watermark=rnd.choice([0, -1, 5, 1 << 40]),
            last_stable_offset=rnd.choice([-1, 0, 5, 1 << 40]),
            log_start_offset=rnd.choice([-1, 0, 3]),
            aborted_transactions=rnd.choice(
                [None, None, [], [], [AbortedTransaction(producer_id=7, first_offset=3)]]
            ),
            preferred_read_replica=rnd.choice([-1, -1, -1, 2]),
            records=rnd.choice(
                [b"", b"", None, bytes(rnd.randint(1, 300)), bytearray(200), Region(123)]
                + [Region(rnd.randint(1, 1 << 20)), memoryview(b"abc")]
            ),
        )
        which = rnd.randint(0, 11)
        if which == 0:
            data.current_leader = LeaderIdAndEpoch(leader_id=2, leader_epoch=rnd.choice([-1, 4]))
        elif which == 1:
            data.current_leader.leader_epoch = 3  # the field changed in place, as apis do
        elif which == 2:
            data.diverging_epoch = EpochEndOffset(epoch=rnd.choice([-1, 1]), end_offset=9)
        elif which == 3:
            data.snapshot_id = SnapshotId(end_offset=rnd.choice([-1, 8]), epoch=2)
        return data

    def topic() -> FetchableTopicResponse:
        count = rnd.choice([1, 1, 1, 0, 2])
        return FetchableTopicResponse(
            topic=rnd.choice(NAMES),
            topic_id=rnd.choice(IDS),
            partitions=[partition() for _ in range(count)],
        )

    return FetchResponse(
        throttle_time_ms=rnd.choice([0, 0, 100]),
        error_code=rnd.choice([0, 0, 0, 70]),
        session_id=rnd.choice([0, 1, 1 << 30]),
        responses=[topic() for _ in range(rnd.choice([1, 1, 1, 1, 0, 2]))],
        node_endpoints=rnd.choice(
            [[], [], [], [NodeEndpoint(node_id=1, host="h", port=9092, rack=None)]]
        ),
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_answers_are_the_generated_encoders_bytes_and_regions(version):
    rnd = random.Random(300 + version)
    for cid in range(400):
        response = random_response(rnd)
        fast, fast_regions = encode_response(1, version, cid, response)
        slow, slow_regions = _encode_response(1, version, cid, response)
        assert fast == slow
        assert [(at, id(r)) for at, r in fast_regions] == [(at, id(r)) for at, r in slow_regions]


def test_an_answer_the_schema_cannot_carry_fails_as_before():
    response = FetchResponse(
        responses=[
            FetchableTopicResponse(
                topic="perf", partitions=[PartitionData(error_code=1 << 20, records=b"")]
            )
        ]
    )
    for version in VERSIONS:
        with pytest.raises(ValueError, match="cannot encode FetchResponse"):
            encode_response(1, version, 1, response)


def frame_of(request: FetchRequest, version: int, cid: int) -> memoryview:
    buf = bytearray()
    RequestHeader(
        request_api_key=1, request_api_version=version, correlation_id=cid, client_id="rdkafka"
    ).encode(2 if version >= FetchRequest.FLEXIBLE_MIN_VERSION else 1, buf)
    request.encode(version, buf)
    return memoryview(buf)


def random_request(rnd: random.Random, version: int) -> FetchRequest:
    # Mostly a tailing consumer's (one topic of one partition, or none), sometimes not.
    def partition() -> FetchPartition:
        p = FetchPartition(
            partition=rnd.choice([0, 3, 1 << 20]),
            current_leader_epoch=rnd.choice([-1, 0, 7]),
            fetch_offset=rnd.choice([0, 12, 1 << 40]),
            last_fetched_epoch=rnd.choice([-1, 0, 5]),
            log_start_offset=rnd.choice([-1, 0]),
            partition_max_bytes=rnd.choice([1 << 20, 0]),
        )
        if rnd.random() < 0.1:
            p.replica_directory_id = rnd.choice(IDS[1:])
        return p

    def topic() -> FetchTopic:
        return FetchTopic(
            topic=rnd.choice(NAMES),
            topic_id=rnd.choice(IDS),
            partitions=[partition() for _ in range(rnd.choice([1, 1, 1, 0, 2]))],
        )

    request = FetchRequest(
        max_wait_ms=rnd.choice([0, 100, 500]),
        min_bytes=rnd.choice([0, 1]),
        max_bytes=rnd.choice([52428800, 1]),
        isolation_level=rnd.choice([0, 1]),
        session_id=rnd.choice([0, 5, 1 << 30]),
        session_epoch=rnd.choice([-1, 0, 1, 77]),
        topics=[topic() for _ in range(rnd.choice([1, 1, 1, 0, 0, 2]))],
        forgotten_topics_data=rnd.choice(
            [[], [], [], [ForgottenTopic(topic="perf", topic_id=IDS[1], partitions=[1, 2])]]
        ),
        rack_id=rnd.choice(["", "", "rack-1", "r" * 200, "é"]),
    )
    if version < 15:
        request.replica_id = rnd.choice([-1, -1, 2])
    elif rnd.random() < 0.1:
        request.replica_state = ReplicaState(replica_id=2, replica_epoch=9)
    if rnd.random() < 0.1:
        request.cluster_id = "cluster"
    return request


def _same(a, b) -> None:
    assert (a.api_key, a.api_version, a.correlation_id, a.client_id) == (
        b.api_key,
        b.api_version,
        b.correlation_id,
        b.client_id,
    )
    assert a.body == b.body
    assert a.header == b.header


@pytest.mark.parametrize("version", REQUEST_VERSIONS)
def test_requests_read_as_the_generated_decoder_reads_them(version):
    rnd = random.Random(500 + version)
    for cid in range(300):
        frame = frame_of(random_request(rnd, version), version, cid)
        _same(parse_request(frame, SUPPORTED), _parse_request(frame, SUPPORTED))


@pytest.mark.parametrize("version", range(13, FetchRequest.MAX_VERSION + 1))
def test_cut_short_or_garbled_requests_fail_as_before(version):
    rnd = random.Random(600 + version)
    request = FetchRequest(
        max_wait_ms=500,
        min_bytes=1,
        session_id=5,
        session_epoch=3,
        topics=[FetchTopic(topic_id=IDS[1], partitions=[FetchPartition(fetch_offset=9)])],
        rack_id="rack",
    )
    whole = bytes(frame_of(request, version, 1))
    frames = [whole[:cut] for cut in range(len(whole))]
    for _ in range(200):
        garbled = bytearray(whole)
        at = rnd.randrange(10, len(whole))
        garbled[at] = rnd.randrange(256)
        frames.append(bytes(garbled))
    for frame in frames:
        view = memoryview(bytearray(frame))
        try:
            expected = _parse_request(view, SUPPORTED)
        except InvalidRequest as exc:
            with pytest.raises(InvalidRequest) as raised:
                parse_request(view, SUPPORTED)
            assert str(raised.value) == str(exc)
        else:
            _same(parse_request(view, SUPPORTED), expected)
