"""Produce and consume through real clients; records come back byte-identical and in order."""

import json
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def consume(bootstrap, topic, partition, count, *, timeout_s=30, offset=0, **extra):
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "interop",
            "enable.auto.commit": False,
            **extra,
        }
    )
    consumer.assign([TopicPartition(topic, partition, offset)])
    out = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        out.append(msg)
    consumer.close()
    return out


def produce(bootstrap, topic, records, **config):
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    reports = []
    for rec in records:
        producer.produce(topic, on_delivery=lambda err, msg: reports.append((err, msg)), **rec)
    assert producer.flush(30) == 0
    errors = [err for err, _ in reports if err is not None]
    assert errors == []
    return [msg for _, msg in reports]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_roundtrip_every_codec(kafka_broker, codec):
    topic = f"codec-{codec}"
    records = [
        {
            "key": None if i % 7 == 0 else f"key-{i}".encode(),
            "value": None if i % 11 == 0 else bytes([i % 256]) * (i % 300),
            "headers": [("n", str(i).encode()), ("empty", b"")] if i % 3 else None,
            "timestamp": 1_700_000_000_000 + i,
        }
        for i in range(2000)
    ]
    delivered = produce(kafka_broker.bootstrap, topic, records, **{"compression.type": codec})
    assert sorted(m.offset() for m in delivered) == list(range(2000))
    got = consume(kafka_broker.bootstrap, topic, 0, 2000)
    assert [m.offset() for m in got] == list(range(2000))
    for rec, msg in zip(records, got, strict=True):
        assert msg.key() == rec["key"]
        assert msg.value() == (rec["value"] if rec["value"] is not None else None)
        assert (msg.headers() or None) == rec["headers"]
        assert msg.timestamp() == (1, rec["timestamp"])  # CreateTime


def test_large_records_up_to_max_message_bytes(kafka_broker_factory):
    broker = kafka_broker_factory({"message.max.bytes": str(4 * 1024 * 1024)})
    value = bytes(range(256)) * (3 * 1024 * 1024 // 256)
    produce(broker.bootstrap, "big", [{"value": value}], **{"message.max.bytes": 8 * 1024 * 1024})
    (msg,) = consume(broker.bootstrap, "big", 0, 1, **{"fetch.max.bytes": 8 * 1024 * 1024})
    assert msg.value() == value


def test_record_over_max_message_bytes_is_refused(kafka_broker_factory):
    broker = kafka_broker_factory({"message.max.bytes": "10000"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 1_000_000})
    reports = []
    producer.produce("limited", value=b"x" * 50_000, on_delivery=lambda e, m: reports.append(e))
    producer.flush(30)
    assert reports[0] is not None and reports[0].name() == "MSG_SIZE_TOO_LARGE"
    produce(broker.bootstrap, "limited", [{"value": b"small"}])  # still serving
    assert [m.value() for m in consume(broker.bootstrap, "limited", 0, 1)] == [b"small"]


def test_hundred_partitions(kafka_broker_factory):
    broker = kafka_broker_factory({"num.partitions": "100"})
    records = [{"value": f"{p}:{i}".encode(), "partition": p} for i in range(5) for p in range(100)]
    produce(broker.bootstrap, "wide", records)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wide"})
    consumer.assign([TopicPartition("wide", p, 0) for p in range(100)])
    seen = {}
    deadline = time.monotonic() + 60
    while sum(len(v) for v in seen.values()) < 500 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            seen.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))
    consumer.close()
    assert len(seen) == 100
    for p, msgs in seen.items():
        assert msgs == [(i, f"{p}:{i}".encode()) for i in range(5)]


def test_idempotent_producer_delivers_each_record_once(kafka_broker):
    records = [{"value": f"idem-{i}".encode()} for i in range(3000)]
    produce(kafka_broker.bootstrap, "idem", records, **{"enable.idempotence": True})
    got = consume(kafka_broker.bootstrap, "idem", 0, 3000)
    assert [m.value() for m in got] == [r["value"] for r in records]


def test_kcat_produce_and_consume(kafka_broker, kcat):
    lines = "".join(f"k{i}:value {i}\n" for i in range(100))
    subprocess.run(
        [kcat, "-b", kafka_broker.bootstrap, "-P", "-t", "kcat-topic", "-K", ":"],
        input=lines,
        text=True,
        check=True,
        timeout=60,
    )
    out = subprocess.run(
        [
            kcat,
            "-b",
            kafka_broker.bootstrap,
            "-C",
            "-t",
            "kcat-topic",
            "-e",
            "-J",
            "-o",
            "beginning",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    msgs = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(m["offset"], m["key"], m["payload"]) for m in msgs] == [
        (i, f"k{i}", f"value {i}") for i in range(100)
    ]


def test_kafka_python_producer_and_consumer(kafka_broker):
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=5)
    futures = [
        producer.send(
            "kp",
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            headers=[("i", str(i).encode())],
            timestamp_ms=1_600_000_000_000 + i,
        )
        for i in range(500)
    ]
    producer.flush()
    assert sorted(f.get(timeout=10).offset for f in futures) == list(range(500))
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=kafka_broker.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
        enable_auto_commit=False,
    )
    from kafka import TopicPartition as KTP

    consumer.assign([KTP("kp", 0)])
    consumer.seek_to_beginning()
    got = [(m.offset, m.key, m.value, m.headers, m.timestamp) for m in consumer]
    consumer.close()
    assert got == [
        (i, f"k{i}".encode(), f"v{i}".encode(), [("i", str(i).encode())], 1_600_000_000_000 + i)
        for i in range(500)
    ]


def test_aiokafka_producer_and_consumer(kafka_broker):
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    async def main():
        producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
        await producer.start()
        try:
            for i in range(300):
                await producer.send("aio", key=b"%d" % i, value=b"aio-%d" % i)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=kafka_broker.bootstrap,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        try:
            consumer.assign([ATP("aio", 0)])
            await consumer.seek_to_beginning(ATP("aio", 0))
            out = []
            while len(out) < 300:
                batch = await consumer.getmany(timeout_ms=5000)
                if not batch:
                    break
                for msgs in batch.values():
                    out.extend((m.offset, m.key, m.value) for m in msgs)
            return out
        finally:
            await consumer.stop()

    got = asyncio.run(main())
    assert got == [(i, b"%d" % i, b"aio-%d" % i) for i in range(300)]
