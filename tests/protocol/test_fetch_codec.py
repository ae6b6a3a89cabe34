"""Fetch's common answer written in one step (protocol/fetch_codec.py): for every version,
the same bytes and file regions as the generated encoder and the general path."""

import random
import uuid

import pytest

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
from trio_broker.protocol.quirks import _encode_response, encode_response

VERSIONS = range(FetchResponse.MIN_VERSION, FetchResponse.MAX_VERSION + 1)
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
