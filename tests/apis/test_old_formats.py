"""Message formats 0 and 1 on the wire (Produce v0-v2, Fetch v0-v3) and the other versions
Kafka 3.9 serves below Kafka 4.0's baseline: raw requests, with the bytes and error codes a
client of that generation reads back, and what format 2 readers see of the same records."""

from __future__ import annotations

import socket
import struct
import zlib

import pytest
from wire import request_of, roundtrip

from trio_broker.errors import ErrorCode
from trio_broker.protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from trio_broker.protocol.legacy_records import build_message_set, iter_legacy_messages
from trio_broker.protocol.record_codec import build_batch, iter_records
from trio_broker.protocol.records import Compression, iter_batches
from trio_broker.testing import BrokerThread

TIMEOUT = 30
CODECS = [NONE, GZIP, SNAPPY, LZ4]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerThread(
        {
            "log.dirs": str(tmp_path_factory.mktemp("old-formats")),
            "num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
    ) as b:
        yield b


def raw(broker, api_key: int, version: int, **fields):
    with socket.create_connection((broker.host, broker.port), timeout=TIMEOUT) as sock:
        return roundtrip(sock, request_of(api_key, **fields), version)


def create(broker, topic: str, version: int = 0) -> None:
    from trio_broker.protocol._generated.create_topics_request import CreatableTopic

    answer = raw(
        broker,
        19,
        version,
        topics=[CreatableTopic(name=topic, num_partitions=1, replication_factor=1)],
        timeout_ms=10000,
    )
    assert [(t.name, t.error_code) for t in answer.topics] == [(topic, 0)]


def produce(broker, topic: str, version: int, records: bytes):
    from trio_broker.protocol._generated.produce_request import (
        PartitionProduceData,
        TopicProduceData,
    )

    answer = raw(
        broker,
        0,
        version,
        acks=1,
        timeout_ms=10000,
        topic_data=[
            TopicProduceData(
                name=topic, partition_data=[PartitionProduceData(index=0, records=records)]
            )
        ],
    )
    return answer.responses[0].partition_responses[0]


def fetch(broker, topic: str, version: int, offset: int = 0):
    from trio_broker.protocol._generated.fetch_request import FetchPartition, FetchTopic

    answer = raw(
        broker,
        1,
        version,
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        topics=[
            FetchTopic(
                topic=topic,
                partitions=[
                    FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
                ],
            )
        ],
    )
    return answer.responses[0].partitions[0]


def records_of_v2(data: bytes) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [
        (r.offset, r.timestamp, r.key, r.value)
        for pos, h in iter_batches(data)
        for r in iter_records(memoryview(data)[pos : pos + h.size])
    ]


def absolute(data: bytes) -> list[tuple[int, int, bytes | None, bytes | None, int]]:
    """(offset, timestamp, key, value, magic) of a fetched message set, offsets absolute
    (a magic 1 wrapper's inner offsets are relative to its last)."""
    out = []
    mv = memoryview(data)
    pos = 0
    while pos < len(mv):
        wrapper_offset, size = struct.unpack_from(">qi", mv, pos)
        inner = list(iter_legacy_messages(mv[pos : pos + 12 + size]))
        magic = mv[pos + 16]
        last = inner[-1].offset
        for m in inner:
            offset = wrapper_offset - last + m.offset if magic == 1 and m.codec else m.offset
            out.append((offset, m.timestamp, m.key, m.value, m.magic))
        pos += 12 + size
    return out


MESSAGES = [(i, 1_700_000_000_000 + i, b"k%d" % i, b"value-%d" % i) for i in range(3)]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("magic,version", [(0, 0), (0, 1), (1, 2)])
def test_old_message_sets_are_stored_as_format_2_and_read_back_in_every_format(
    broker, magic, version, codec
):
    topic = f"old-m{magic}-v{version}-c{codec}"
    create(broker, topic)
    sent = build_message_set(MESSAGES, magic=magic, codec=codec)
    answer = produce(broker, topic, version, sent)
    assert (answer.error_code, answer.base_offset) == (0, 0)
    # A format 2 reader (Fetch v4+) gets one batch of the client's codec, the records as
    # sent, magic 0's timestamps as "none" (-1).
    stored = fetch(broker, topic, 4)
    expected_ts = [ts if magic == 1 else -1 for _, ts, _, _ in MESSAGES]
    assert records_of_v2(stored.records) == [
        (i, ts, k, v) for (i, _, k, v), ts in zip(MESSAGES, expected_ts, strict=True)
    ]
    assert [h.compression for _, h in iter_batches(stored.records)] == [Compression(codec)]
    # Fetch v0/v1 reads magic 0 and v2/v3 magic 1, whatever the producer wrote.
    for fetch_version, fetch_magic in ((0, 0), (1, 0), (2, 1), (3, 1)):
        got = fetch(broker, topic, fetch_version)
        assert got.error_code == 0
        assert got.high_watermark == 3
        want_ts = expected_ts if fetch_magic == 1 else [-1, -1, -1]
        assert absolute(got.records) == [
            (i, ts, k, v, fetch_magic) for (i, _, k, v), ts in zip(MESSAGES, want_ts, strict=True)
        ]


def test_a_fetch_from_the_middle_of_a_compressed_batch_starts_at_its_wrapper(broker):
    create(broker, "old-middle")
    produce(broker, "old-middle", 2, build_message_set(MESSAGES, magic=1, codec=GZIP))
    produce(broker, "old-middle", 2, build_message_set(MESSAGES[:1], magic=1, codec=NONE))
    got = fetch(broker, "old-middle", 2, offset=3)
    assert [m[0] for m in absolute(got.records)] == [3]
    # As in Kafka, a fetch inside a batch returns the whole batch: the client skips ahead.
    got = fetch(broker, "old-middle", 2, offset=1)
    assert [m[0] for m in absolute(got.records)] == [0, 1, 2, 3]


def test_magic_0_lz4_is_read_whatever_its_header_checksum_and_written_with_the_old_one(broker):
    # KAFKA-3160: clients before Kafka 0.10 wrote the LZ4 frame's header checksum over the
    # magic number too; a correct checksum must be accepted as well.
    create(broker, "old-lz4")
    old = build_message_set(MESSAGES[:2], magic=0, codec=LZ4)
    assert produce(broker, "old-lz4", 0, old).error_code == 0
    from trio_broker.protocol.compression import compress
    from trio_broker.protocol.legacy_records import _message

    inner = build_message_set([(0, -1, k, v) for _, _, k, v in MESSAGES[2:]], magic=0)
    fixed = _message(0, 0, LZ4, -1, None, compress(LZ4, inner))  # a correct checksum
    assert produce(broker, "old-lz4", 0, fixed).error_code == 0
    got = fetch(broker, "old-lz4", 0)
    assert [(m[2], m[3]) for m in absolute(got.records)] == [(k, v) for _, _, k, v in MESSAGES]
    # The frame sent to a magic 0 reader carries the old checksum, as Kafka writes it.
    from trio_broker.protocol.legacy_records import _xxh32_short

    frame = got.records[12 + 4 + 2 + 4 + 4 :]
    assert frame[6] == (_xxh32_short(bytes(frame[:6])) >> 8) & 0xFF


def test_bad_old_message_sets_get_kafkas_error_codes(broker):
    create(broker, "old-bad")
    good = bytearray(build_message_set(MESSAGES, magic=1))
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    assert produce(broker, "old-bad", 2, bytes(corrupt)).error_code == ErrorCode.CORRUPT_MESSAGE
    assert produce(broker, "old-bad", 2, bytes(good[:-3])).error_code == ErrorCode.CORRUPT_MESSAGE
    v2 = build_batch([(b"k", b"v", (), 1)])
    assert produce(broker, "old-bad", 2, v2).error_code == ErrorCode.INVALID_RECORD
    # zstd has no message format 0 or 1 (KIP-110).
    zstd = bytearray(build_message_set(MESSAGES, magic=1, codec=GZIP))
    zstd[17] = (zstd[17] & ~0x07) | ZSTD
    zstd[12:16] = struct.pack(">I", zlib.crc32(zstd[16:]))
    assert (
        produce(broker, "old-bad", 2, bytes(zstd)).error_code
        == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    )
    # Nothing was appended by any of them.
    assert fetch(broker, "old-bad", 4).high_watermark == 0


def test_zstd_and_control_batches_in_an_old_fetch(broker):
    create(broker, "old-zstd")
    batch = build_batch([(b"k", b"v", (), 1)], compression=Compression.ZSTD)
    assert produce(broker, "old-zstd", 7, batch).error_code == 0
    # Kafka cannot down-convert zstd: the partition answers UNSUPPORTED_COMPRESSION_TYPE.
    got = fetch(broker, "old-zstd", 3)
    assert got.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert got.records in (b"", None)


def test_metadata_and_admin_apis_of_the_old_versions(broker):
    from trio_broker.protocol._generated.describe_configs_request import (
        DescribeConfigsResource,
    )
    from trio_broker.protocol._generated.metadata_request import MetadataRequestTopic

    create(broker, "old-admin", version=0)
    create(broker, "old-admin-1", version=1)
    for version in range(4):
        answer = raw(broker, 3, version, topics=[MetadataRequestTopic(name="old-admin")])
        assert [(t.name, t.error_code, len(t.partitions)) for t in answer.topics] == [
            ("old-admin", 0, 1)
        ]
    # Metadata v0: an empty list is every topic.
    names = {t.name for t in raw(broker, 3, 0, topics=[]).topics}
    assert {"old-admin", "old-admin-1"} <= names
    answer = raw(
        broker,
        32,
        0,
        resources=[
            DescribeConfigsResource(
                resource_type=2, resource_name="old-admin", configuration_keys=None
            )
        ],
    )
    (result,) = answer.results
    assert result.error_code == 0
    entries = {c.name: c for c in result.configs}
    assert entries["cleanup.policy"].value == "delete"
    assert entries["cleanup.policy"].is_default is True
    answer = raw(broker, 20, 0, topic_names=["old-admin-1"], timeout_ms=10000)
    assert [(r.name, r.error_code) for r in answer.responses] == [("old-admin-1", 0)]
    # Metadata v1 (always auto-creating) right after: the topic is created again, and that
    # answer lists no partitions (LEADER_NOT_AVAILABLE), as Kafka 3.9's answer to any
    # auto-creating Metadata; kafka-go's tests read "no partitions" after DeleteTopics.
    # The next Metadata lists the new topic.
    seen = []
    for _ in range(2):
        answer = raw(broker, 3, 1, topics=[MetadataRequestTopic(name="old-admin-1")])
        seen += [(t.name, t.error_code, len(t.partitions)) for t in answer.topics]
    assert seen == [
        ("old-admin-1", ErrorCode.LEADER_NOT_AVAILABLE, 0),
        ("old-admin-1", 0, 1),
    ]


def test_offsets_v0_and_v1_share_the_coordinators_store(broker):
    """Kafka 3.9 kept OffsetCommit v0's offsets in ZooKeeper; here they go to the group
    coordinator like every later version's, so v0, v1 and v8 all read the same offsets."""
    from trio_broker.protocol._generated.offset_commit_request import (
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )
    from trio_broker.protocol._generated.offset_fetch_request import OffsetFetchRequestTopic

    create(broker, "old-offsets")
    produce(broker, "old-offsets", 0, build_message_set(MESSAGES, magic=0))

    def commit(version: int, offset: int) -> None:
        answer = raw(
            broker,
            8,
            version,
            group_id="old-group",
            topics=[
                OffsetCommitRequestTopic(
                    name="old-offsets",
                    partitions=[
                        OffsetCommitRequestPartition(
                            partition_index=0,
                            committed_offset=offset,
                            committed_metadata=f"m{version}",
                        )
                    ],
                )
            ],
        )
        assert answer.topics[0].partitions[0].error_code == 0

    def fetched(version: int) -> tuple[int, str]:
        answer = raw(
            broker,
            9,
            version,
            group_id="old-group",
            topics=[OffsetFetchRequestTopic(name="old-offsets", partition_indexes=[0])],
        )
        p = answer.topics[0].partitions[0]
        assert p.error_code == 0
        return p.committed_offset, p.metadata

    commit(0, 1)
    assert fetched(0) == fetched(1) == fetched(7) == (1, "m0")
    commit(1, 2)
    assert fetched(0) == fetched(1) == (2, "m1")


def test_list_offsets_v0_and_join_group_v0(broker):
    from trio_broker.protocol._generated.join_group_request import JoinGroupRequestProtocol
    from trio_broker.protocol._generated.list_offsets_request import (
        ListOffsetsPartition,
        ListOffsetsTopic,
    )

    create(broker, "old-list")
    produce(broker, "old-list", 1, build_message_set(MESSAGES, magic=0))
    answer = raw(
        broker,
        2,
        0,
        replica_id=-1,
        topics=[
            ListOffsetsTopic(
                name="old-list",
                partitions=[
                    ListOffsetsPartition(partition_index=0, timestamp=-1, max_num_offsets=1)
                ],
            )
        ],
    )
    assert answer.topics[0].partitions[0].old_style_offsets == [3]
    answer = raw(
        broker,
        11,
        0,
        group_id="old-join",
        session_timeout_ms=10000,
        member_id="",
        protocol_type="consumer",
        protocols=[JoinGroupRequestProtocol(name="range", metadata=b"\x00\x00")],
    )
    assert answer.error_code == 0
    assert answer.member_id and answer.leader == answer.member_id
    assert answer.generation_id == 1


def test_leader_epoch_and_log_dir_apis_at_version_0(broker):
    from trio_broker.protocol._generated.alter_replica_log_dirs_request import (
        AlterReplicaLogDir,
        AlterReplicaLogDirTopic,
    )
    from trio_broker.protocol._generated.describe_log_dirs_request import (
        DescribableLogDirTopic,
    )
    from trio_broker.protocol._generated.offset_for_leader_epoch_request import (
        OffsetForLeaderPartition,
        OffsetForLeaderTopic,
    )

    create(broker, "old-epochs")
    produce(broker, "old-epochs", 2, build_message_set(MESSAGES, magic=1))
    for version in (0, 1):
        answer = raw(
            broker,
            23,
            version,
            topics=[
                OffsetForLeaderTopic(
                    topic="old-epochs",
                    partitions=[OffsetForLeaderPartition(partition=0, leader_epoch=0)],
                )
            ],
        )
        (p,) = answer.topics[0].partitions
        assert (p.error_code, p.end_offset) == (0, 3)
    answer = raw(broker, 35, 0, topics=[DescribableLogDirTopic(topic="old-epochs", partitions=[0])])
    (result,) = answer.results
    assert result.error_code == 0
    assert result.log_dir == str(broker.log_dir)
    (part,) = result.topics[0].partitions
    assert part.partition_index == 0 and part.partition_size > 0
    # Moving it to the directory it is in already is a no-op Kafka accepts.
    answer = raw(
        broker,
        34,
        0,
        dirs=[
            AlterReplicaLogDir(
                path=str(broker.log_dir),
                topics=[AlterReplicaLogDirTopic(name="old-epochs", partitions=[0])],
            )
        ],
    )
    assert [(r.topic_name, [p.error_code for p in r.partitions]) for r in answer.results] == [
        ("old-epochs", [0])
    ]
