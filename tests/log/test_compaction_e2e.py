"""Log compaction end to end: records produced by a real client, cleaned by the broker's
cleaner task, read back by confluent-kafka, kafka-python, aiokafka and kcat.

Compacted topics also refuse records without a key (INVALID_RECORD), appending nothing.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

SEGMENT_BYTES = 4096
KEYS = [b"key-%02d" % i for i in range(20)]
ROUNDS = 12
DELETED = KEYS[:4]  # each gets a tombstone after the last round
# Bigger than segment.bytes: its append always rolls, so everything before it is in
# closed (cleanable) segments and it alone is in the active one.
TAIL_VALUE = b"t" * (SEGMENT_BYTES + 100)


@pytest.fixture
def broker(kafka_broker_factory):
    # The cleaner task sleeps log.cleaner.backoff.ms between passes.
    return kafka_broker_factory({"log.cleaner.backoff.ms": "50"})


def create_topic(bootstrap: str, topic: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, config=configs)])
    futures[topic].result(15)


def compacted_topic(bootstrap: str, topic: str, *, delete_retention_ms: int) -> None:
    create_topic(
        bootstrap,
        topic,
        **{
            "cleanup.policy": "compact",
            "segment.bytes": str(SEGMENT_BYTES),
            "min.cleanable.dirty.ratio": "0.01",
            "min.compaction.lag.ms": "0",
            "delete.retention.ms": str(delete_retention_ms),
        },
    )


def produce_history(
    bootstrap: str, topic: str, *, idempotent: bool
) -> dict[int, tuple[bytes, bytes | None]]:
    """Rounds of values over KEYS, then tombstones, then the tail; offset -> (key, value)."""
    # Idempotent batches carry a producer id, so a batch whose records all go is kept
    # empty by the cleaner (consumers must step over it); other such batches are dropped,
    # leaving whole segments empty.
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": idempotent}
    )
    produced: dict[int, tuple[bytes, bytes | None]] = {}
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            produced[msg.offset()] = (msg.key(), msg.value())

    # Timestamps a minute old: with delete.retention.ms=0 the tombstones' segment is then
    # surely past the horizon when the cleaner looks at it, whatever the clock's resolution.
    timestamp = int(time.time() * 1000) - 60_000

    def send(key: bytes, value: bytes | None) -> None:
        producer.produce(topic, key=key, value=value, timestamp=timestamp, on_delivery=on_delivery)

    for round_ in range(ROUNDS):
        for key in KEYS:
            send(key, b"%s=round-%02d;" % (key, round_) + b"v" * 60)
        # One flush per round: a batch per round, several batches per segment.
        assert producer.flush(15) == 0
    for key in DELETED:
        send(key, None)
    assert producer.flush(15) == 0
    send(b"tail", TAIL_VALUE)
    assert producer.flush(15) == 0
    assert errors == []
    assert sorted(produced) == list(range(ROUNDS * len(KEYS) + len(DELETED) + 1))
    return produced


def cleaner_checkpoint(log_dir: Path, topic: str) -> int | None:
    """The cleaner's `cleaner-offset-checkpoint` entry for partition 0: cleaned below it."""
    path = log_dir / "cleaner-offset-checkpoint"
    if not path.exists():
        return None
    for line in path.read_text().splitlines()[2:]:
        name, partition, offset = line.split()
        if name == topic and partition == "0":
            return int(offset)
    return None


def wait_until_cleaned(log_dir: Path, topic: str, end_offset: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done = cleaner_checkpoint(log_dir, topic)
        if done is not None and done >= end_offset:
            return
        time.sleep(0.05)
    raise AssertionError(f"the cleaner did not reach offset {end_offset} of {topic}")


def expected_after_clean(
    produced: dict[int, tuple[bytes, bytes | None]], *, tombstones_kept: bool
) -> list[tuple[int, bytes, bytes | None]]:
    latest: dict[bytes, int] = {}
    for offset in sorted(produced):
        latest[produced[offset][0]] = offset
    return [
        (offset, produced[offset][0], produced[offset][1])
        for offset in sorted(latest.values())
        if tombstones_kept or produced[offset][1] is not None
    ]


# -- the four consumers: each returns [(offset, key, value)] from offset 0 to the end ------


def read_confluent(bootstrap: str, topic: str, end: int) -> list:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "e2e", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + 15
    while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        out.append((msg.offset(), msg.key(), msg.value()))
    consumer.close()
    return out


def read_kafka_python(bootstrap: str, topic: str, end: int) -> list:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    consumer.assign([KTP(topic, 0)])
    consumer.seek(KTP(topic, 0), 0)
    out = []
    deadline = time.monotonic() + 15
    while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            out += [(r.offset, r.key, r.value) for r in records]
    consumer.close()
    return out


def read_aiokafka(bootstrap: str, topic: str, end: int) -> list:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP

    async def main():
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            consumer.assign([ATP(topic, 0)])
            consumer.seek(ATP(topic, 0), 0)
            out = []
            while not out or out[-1][0] < end - 1:
                batches = await consumer.getmany(timeout_ms=200)
                for records in batches.values():
                    out += [(r.offset, r.key, r.value) for r in records]
            return out
        finally:
            await consumer.stop()

    async def bounded():
        return await asyncio.wait_for(main(), 15)

    return asyncio.run(bounded())


def read_kcat(kcat: str, bootstrap: str, topic: str) -> list:
    done = subprocess.run(
        [kcat, "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-J"],
        capture_output=True,
        timeout=30,
        check=True,
    )
    out = []
    for line in done.stdout.decode().splitlines():
        rec = json.loads(line)
        value = rec["payload"]
        out.append((rec["offset"], rec["key"].encode(), None if value is None else value.encode()))
    return out


def read_with(client: str, bootstrap: str, topic: str, end: int, kcat: str) -> list:
    if client == "kcat":
        return read_kcat(kcat, bootstrap, topic)
    read = {
        "confluent-kafka": read_confluent,
        "kafka-python": read_kafka_python,
        "aiokafka": read_aiokafka,
    }[client]
    return read(bootstrap, topic, end)


def test_cleaned_topic_reads_the_same_through_every_client(broker, kcat):
    kept, dropped = "compacted-keep-tombstones", "compacted-drop-tombstones"
    compacted_topic(broker.bootstrap, kept, delete_retention_ms=86_400_000)
    compacted_topic(broker.bootstrap, dropped, delete_retention_ms=0)
    for topic, tombstones_kept in ((kept, True), (dropped, False)):
        produced = produce_history(broker.bootstrap, topic, idempotent=tombstones_kept)
        end = len(produced)
        tail = end - 1
        segments_before = sorted((broker.log_dir / f"{topic}-0").glob("*.log"))
        assert len(segments_before) > 5
        # Everything below the tail's (active) segment gets cleaned.
        wait_until_cleaned(broker.log_dir, topic, tail)
        expected = expected_after_clean(produced, tombstones_kept=tombstones_kept)
        # The overwritten rounds really left the disk: the closed segments now hold about
        # one value per key (plus the emptied batches' headers), not ROUNDS of them.
        *closed, active = sorted((broker.log_dir / f"{topic}-0").glob("*.log"))
        assert active.name == f"{tail:020d}.log"
        value_bytes = sum(len(v or b"") for o, (_, v) in produced.items() if o != tail)
        assert sum(p.stat().st_size for p in closed) < value_bytes / 4

        for client in ("confluent-kafka", "kafka-python", "aiokafka", "kcat"):
            got = read_with(client, broker.bootstrap, topic, end, kcat)
            assert got == expected, client
            offsets = [offset for offset, _, _ in got]
            assert offsets == sorted(set(offsets)), client  # strictly increasing
            assert offsets[0] > 0 and offsets[-1] == tail  # gaps where records went
            keys = [key for _, key, _ in got]
            assert len(keys) == len(set(keys)), client  # each key once
            values = {key: value for _, key, value in got}
            for key in KEYS:
                if key in DELETED:
                    if tombstones_kept:
                        assert values[key] is None, client
                    else:
                        assert key not in values, client
                else:
                    assert values[key] == b"%s=round-%02d;" % (key, ROUNDS - 1) + b"v" * 60
            assert values[b"tail"] == TAIL_VALUE


# -- keyless records on a compacted topic ---------------------------------------------------


def high_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    return high


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_keyless_records_are_refused_and_not_appended(kafka_broker, policy):
    topic = "keyless-" + policy.replace(",", "-")
    create_topic(kafka_broker.bootstrap, topic, **{"cleanup.policy": policy})
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "linger.ms": 0})
    reports = []
    producer.produce(topic, key=b"k", value=b"with key", on_delivery=lambda e, m: reports.append(e))
    assert producer.flush(15) == 0
    assert reports == [None]
    assert high_watermark(kafka_broker.bootstrap, topic) == 1

    # confluent-kafka: the delivery report carries INVALID_RECORD (87), not retried.
    reports.clear()
    producer.produce(topic, value=b"no key", on_delivery=lambda e, m: reports.append(e))
    assert producer.flush(15) == 0
    assert len(reports) == 1 and reports[0] is not None
    assert reports[0].code() == KafkaError.INVALID_RECORD == 87

    # kafka-python: the send future fails with InvalidRecordError.
    from kafka import KafkaProducer
    from kafka.errors import InvalidRecordError

    kp = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, retries=0)
    try:
        future = kp.send(topic, value=b"no key either")
        with pytest.raises(InvalidRecordError):
            future.get(timeout=15)
        # A keyed record through the same producer still goes in.
        assert kp.send(topic, key=b"k", value=b"again").get(timeout=15).offset == 1
    finally:
        kp.close(timeout=5)

    assert high_watermark(kafka_broker.bootstrap, topic) == 2
    got = read_confluent(kafka_broker.bootstrap, topic, 2)
    assert got == [(0, b"k", b"with key"), (1, b"k", b"again")]
