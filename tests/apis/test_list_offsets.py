"""ListOffsets, DeleteRecords and OffsetForLeaderEpoch against data produced with
confluent-kafka, through confluent-kafka's and kafka-python's admin clients."""

from __future__ import annotations

import socket
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kafka.admin import KafkaAdminClient
from kafka.structs import TopicPartition as KpTopicPartition
from wire import request_of, roundtrip

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsTopic,
)
from trio_broker.protocol._generated.offset_for_leader_epoch_request import (
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)

TIMEOUT = 30
BASE_TS = 1_700_000_000_000


def raw(broker, api_key: int, version: int, **fields):
    with socket.create_connection((broker.host, broker.port), timeout=TIMEOUT) as sock:
        return roundtrip(sock, request_of(api_key, **fields), version)


def produce(broker, topic: str, timestamps: list[int]) -> None:
    """One record per batch (flush after each), with the given CreateTime timestamps."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    delivered = []

    def on_delivery(err, msg):
        assert err is None, err
        delivered.append(msg.offset())

    for i, ts in enumerate(timestamps):
        producer.produce(
            topic, value=b"v%d" % i, partition=0, timestamp=ts, on_delivery=on_delivery
        )
        producer.flush(TIMEOUT)
    assert len(delivered) == len(timestamps)


@pytest.fixture
def topic_with_data(kafka_broker):
    client = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    client.create_topics([NewTopic("timed", 1, 1)])["timed"].result(TIMEOUT)
    # Out of order on purpose: the max timestamp is the third record's.
    produce(
        kafka_broker,
        "timed",
        [BASE_TS, BASE_TS + 1000, BASE_TS + 5000, BASE_TS + 2000, BASE_TS + 3000],
    )
    return kafka_broker, client


def list_offsets(client: AdminClient, spec: OffsetSpec, topic: str = "timed", partition: int = 0):
    tp = TopicPartition(topic, partition)
    return client.list_offsets({tp: spec})[tp].result(TIMEOUT)


def test_list_offsets_confluent(topic_with_data):
    broker, client = topic_with_data
    assert list_offsets(client, OffsetSpec.earliest()).offset == 0
    latest = list_offsets(client, OffsetSpec.latest())
    assert latest.offset == 5 and latest.leader_epoch == 0
    found = list_offsets(client, OffsetSpec.for_timestamp(BASE_TS + 1500))
    assert (found.offset, found.timestamp) == (2, BASE_TS + 5000)
    exact = list_offsets(client, OffsetSpec.for_timestamp(BASE_TS + 3000))
    assert (exact.offset, exact.timestamp) == (2, BASE_TS + 5000)
    first = list_offsets(client, OffsetSpec.for_timestamp(0))
    assert (first.offset, first.timestamp) == (0, BASE_TS)
    none = list_offsets(client, OffsetSpec.for_timestamp(BASE_TS + 10_000))
    assert none.offset == -1
    biggest = list_offsets(client, OffsetSpec.max_timestamp())
    assert (biggest.offset, biggest.timestamp) == (2, BASE_TS + 5000)


def test_list_offsets_raw_fencing_and_special_timestamps(topic_with_data):
    broker, _ = topic_with_data

    def ask(timestamp: int, epoch: int = -1, partition: int = 0):
        response = raw(
            broker,
            2,
            9,
            replica_id=-1,
            isolation_level=1,
            topics=[
                ListOffsetsTopic(
                    name="timed",
                    partitions=[
                        ListOffsetsPartition(
                            partition_index=partition,
                            current_leader_epoch=epoch,
                            timestamp=timestamp,
                        )
                    ],
                )
            ],
        )
        return response.topics[0].partitions[0]

    assert ask(-1).offset == 5  # read_committed: the last stable offset
    assert ask(-4).offset == 0  # earliest local
    assert (ask(-5).offset, ask(-5).error_code) == (-1, ErrorCode.NONE)  # nothing tiered
    assert ask(-1, epoch=0).error_code == ErrorCode.NONE
    assert ask(-1, epoch=5).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert ask(-1, partition=7).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_kafka_python_list_offsets_by_timestamp(topic_with_data):
    broker, _ = topic_with_data
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        tp = KpTopicPartition("timed", 0)
        result = kp.list_partition_offsets({tp: BASE_TS + 1500})
    finally:
        kp.close()
    assert result[tp].offset == 2


def test_delete_records(topic_with_data):
    broker, client = topic_with_data
    tp = TopicPartition("timed", 0, 3)
    deleted = client.delete_records([tp])[tp].result(TIMEOUT)
    assert deleted.low_watermark == 3
    assert list_offsets(client, OffsetSpec.earliest()).offset == 3
    # Timestamps below the new start find the first record still there.
    assert list_offsets(client, OffsetSpec.for_timestamp(0)).offset == 3
    beyond = TopicPartition("timed", 0, 6)
    with pytest.raises(KafkaException) as info:
        client.delete_records([beyond])[beyond].result(TIMEOUT)
    assert info.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    broker.restart()
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert list_offsets(client, OffsetSpec.earliest()).offset == 3
    # kafka-python, with -1: up to the high watermark.
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        kp.delete_records({KpTopicPartition("timed", 0): -1})
    finally:
        kp.close()
    assert list_offsets(client, OffsetSpec.earliest()).offset == 5
    assert list_offsets(client, OffsetSpec.latest()).offset == 5


def offset_for_leader_epoch(broker, topic: str, partitions: list[int]):
    """OffsetForLeaderEpoch v4 for epoch 0 of each partition (the first with its current
    leader epoch 0, the rest with none), as a consumer validating its position sends it."""
    response = raw(
        broker,
        23,
        4,
        replica_id=-1,
        topics=[
            OffsetForLeaderTopic(
                topic=topic,
                partitions=[
                    OffsetForLeaderPartition(
                        partition=p, current_leader_epoch=-1 if i else 0, leader_epoch=0
                    )
                    for i, p in enumerate(partitions)
                ],
            )
        ],
    )
    return response.topics[0].partitions


def test_offset_for_leader_epoch(topic_with_data):
    broker, _ = topic_with_data
    ok, missing = offset_for_leader_epoch(broker, "timed", [0, 3])
    assert (ok.error_code, ok.leader_epoch, ok.end_offset) == (ErrorCode.NONE, 0, 5)
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_offset_for_leader_epoch_of_a_new_empty_partition(kafka_broker):
    """A new partition's leader epoch starts when the broker becomes its leader, as in
    Kafka: OffsetForLeaderEpoch answers epoch 0 ending at 0 before any record, and the
    checkpoint that says so is on disk (written with the creation, not the first produce)."""
    client = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    client.create_topics([NewTopic("empty-epochs", 2, 1)])["empty-epochs"].result(TIMEOUT)
    for answer in offset_for_leader_epoch(kafka_broker, "empty-epochs", [0, 1]):
        assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (
            ErrorCode.NONE,
            0,
            0,
        )
    checkpoint = kafka_broker.log_dir / "empty-epochs-1" / "leader-epoch-checkpoint"
    deadline = time.monotonic() + TIMEOUT  # written by the log manager's writer thread
    while not checkpoint.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert checkpoint.read_text() == "0\n1\n0 0\n"


def test_list_offsets_v0_old_style_offsets(kafka_broker):
    """Version 0 (Burrow, old sarama, Kafka's old GetOffsetShell): up to max_num_offsets
    offsets, newest first, from the segments' base offsets and the log end offset."""
    client = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    topic = NewTopic("legacy", 1, 1, config={"segment.bytes": "1024"})
    client.create_topics([topic])["legacy"].result(TIMEOUT)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "linger.ms": 0})
    for i in range(20):
        producer.produce("legacy", value=b"%03d" % i + b"." * 300, partition=0)
        producer.flush(TIMEOUT)
    log_dir = kafka_broker.log_dir / "legacy-0"
    bases = sorted(int(p.stem) for p in log_dir.glob("*.log"))
    assert len(bases) > 3 and bases[0] == 0

    def ask(timestamp: int, max_num_offsets: int, partition: int = 0):
        response = raw(
            kafka_broker,
            2,
            0,
            replica_id=-1,
            topics=[
                ListOffsetsTopic(
                    name="legacy",
                    partitions=[
                        ListOffsetsPartition(
                            partition_index=partition,
                            timestamp=timestamp,
                            max_num_offsets=max_num_offsets,
                        )
                    ],
                )
            ],
        )
        answer = response.topics[0].partitions[0]
        return answer.error_code, list(answer.old_style_offsets)

    assert ask(-1, 1) == (ErrorCode.NONE, [20])
    assert ask(-2, 1) == (ErrorCode.NONE, [0])
    # Everything: the log end, then each segment's base offset, newest first.
    assert ask(-1, 100) == (ErrorCode.NONE, [20] + sorted(bases, reverse=True))
    assert ask(-1, 3) == (ErrorCode.NONE, [20] + sorted(bases, reverse=True)[:2])
    # Before a time: the segments modified by then (all of them, and the end, for a time
    # an hour from now; none before 1970).
    later = int(time.time() * 1000) + 3_600_000
    assert ask(later, 100) == ask(-1, 100)
    assert ask(0, 100) == (ErrorCode.NONE, [])
    assert ask(-1, 1, partition=3) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
