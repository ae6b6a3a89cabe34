"""Produce's common shape read and written in one step (protocol/produce_codec.py) and the
request hot path of protocol/quirks.py: for every version, the same requests and the same
answer bytes as the generated codec and the general path, and the same errors for bad
bytes."""

import random

import pytest

from trio_broker.apis.registry import supported_versions
from trio_broker.protocol._generated.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from trio_broker.protocol._generated.produce_response import (
    BatchIndexAndErrorMessage,
    NodeEndpoint,
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from trio_broker.protocol._generated.request_header import RequestHeader
from trio_broker.protocol.quirks import (
    InvalidRequest,
    _encode_response,
    _parse_request,
    encode_response,
    parse_request,
)
from trio_broker.protocol.record_codec import build_batch

VERSIONS = range(ProduceRequest.MIN_VERSION, ProduceRequest.MAX_VERSION + 1)
SUPPORTED = supported_versions()
BATCH = build_batch([(None, b"v" * 100, (), 1_700_000_000_000)])
NAMES = ["perf", "t", "a.b-c_d", "x" * 130, "é"]


def _flexible(version: int) -> bool:
    return version >= ProduceRequest.FLEXIBLE_MIN_VERSION


def frame_of(request: ProduceRequest, version: int, cid: int, client_id: str | None) -> bytes:
    buf = bytearray()
    RequestHeader(
        request_api_key=0, request_api_version=version, correlation_id=cid, client_id=client_id
    ).encode(2 if _flexible(version) else 1, buf)
    request.encode(version, buf)
    return bytes(buf)


def random_request(rnd: random.Random, version: int) -> ProduceRequest:
    # Mostly the common shape (one topic, one partition), sometimes not.
    def partition() -> PartitionProduceData:
        records = rnd.choice([BATCH, BATCH, None, b"", bytes(rnd.randint(1, 300))])
        return PartitionProduceData(index=rnd.randint(0, 1 << 20), records=records)

    def topic() -> TopicProduceData:
        count = rnd.choice([1, 1, 1, 0, 2])
        return TopicProduceData(
            name=rnd.choice(NAMES), partition_data=[partition() for _ in range(count)]
        )

    return ProduceRequest(
        transactional_id=rnd.choice([None, None, "txn", "y" * 200]) if version >= 3 else None,
        acks=rnd.choice([0, 1, -1, 7]),
        timeout_ms=rnd.randint(-5, 1 << 30),
        topic_data=[topic() for _ in range(rnd.choice([1, 1, 1, 0, 2]))],
    )


def _same(a, b) -> None:
    assert type(a) is type(b)
    assert (a.api_key, a.api_version, a.correlation_id, a.client_id) == (
        b.api_key,
        b.api_version,
        b.correlation_id,
        b.client_id,
    )

    # Records are views of the frame: compare their bytes.
    def flat(body):
        return (
            body.transactional_id,
            body.acks,
            body.timeout_ms,
            [
                (
                    t.name,
                    [
                        (p.index, None if p.records is None else bytes(p.records))
                        for p in t.partition_data
                    ],
                )
                for t in body.topic_data
            ],
        )

    assert flat(a.body) == flat(b.body)
    assert a.header == b.header


@pytest.mark.parametrize("version", VERSIONS)
def test_requests_read_as_the_generated_decoder_reads_them(version):
    rnd = random.Random(version)
    for i in range(200):
        request = random_request(rnd, version)
        client_id = rnd.choice(["rdkafka", None, "", "c" * 300])
        frame = memoryview(bytearray(frame_of(request, version, i, client_id)))
        _same(parse_request(frame, SUPPORTED), _parse_request(frame, SUPPORTED))


@pytest.mark.parametrize("version", VERSIONS)
def test_cut_short_or_garbled_requests_fail_as_before(version):
    rnd = random.Random(100 + version)
    request = ProduceRequest(
        acks=1,
        timeout_ms=30000,
        topic_data=[
            TopicProduceData(
                name="perf", partition_data=[PartitionProduceData(index=0, records=BATCH)]
            )
        ],
    )
    whole = frame_of(request, version, 7, "rdkafka")
    frames = [whole[:n] for n in range(len(whole))]
    for _ in range(200):
        garbled = bytearray(whole)
        garbled[rnd.randrange(len(garbled))] = rnd.randrange(256)
        frames.append(bytes(garbled))
    for frame in frames:
        view = memoryview(bytearray(frame))
        try:
            expected = _parse_request(view, SUPPORTED)
        except InvalidRequest as exc:
            with pytest.raises(InvalidRequest) as info:
                parse_request(view, SUPPORTED)
            assert str(info.value) == str(exc)
        else:
            _same(parse_request(view, SUPPORTED), expected)


def random_response(rnd: random.Random) -> ProduceResponse:
    def partition() -> PartitionProduceResponse:
        answer = PartitionProduceResponse(
            index=rnd.randint(0, 1 << 20),
            error_code=rnd.choice([0, 0, 6, 87]),
            base_offset=rnd.randint(-1, 1 << 40),
            log_append_time_ms=rnd.choice([-1, 1_700_000_000_000]),
            log_start_offset=rnd.randint(-1, 1 << 30),
        )
        roll = rnd.random()
        if roll < 0.05:
            answer.error_message = "no"
        elif roll < 0.1:
            answer.record_errors = [BatchIndexAndErrorMessage(batch_index=0)]
        elif roll < 0.15:
            answer.current_leader.leader_id = 2
            answer.current_leader.leader_epoch = 5
        return answer

    response = ProduceResponse(
        responses=[
            TopicProduceResponse(
                name=rnd.choice(NAMES),
                partition_responses=[partition() for _ in range(rnd.choice([1, 1, 1, 2, 0]))],
            )
            for _ in range(rnd.choice([1, 1, 1, 2, 0]))
        ],
        throttle_time_ms=rnd.choice([0, 0, 250]),
    )
    if rnd.random() < 0.05:
        response.node_endpoints = [NodeEndpoint(node_id=1, host="h", port=9092)]
    return response


@pytest.mark.parametrize("version", VERSIONS)
def test_answers_are_the_generated_encoders_bytes(version):
    rnd = random.Random(200 + version)
    for cid in range(300):
        response = random_response(rnd)
        assert encode_response(0, version, cid, response) == _encode_response(
            0, version, cid, response
        )


def test_an_answer_the_schema_cannot_carry_fails_as_before():
    response = ProduceResponse(
        responses=[
            TopicProduceResponse(
                name="perf", partition_responses=[PartitionProduceResponse(error_code=1 << 20)]
            )
        ]
    )
    for version in VERSIONS:
        with pytest.raises(ValueError, match="cannot encode ProduceResponse"):
            encode_response(0, version, 1, response)
