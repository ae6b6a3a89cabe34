"""The consumer (manual assignment) reading what confluent-kafka and our producer wrote."""

from __future__ import annotations

import confluent_kafka
import pytest
import trio
from client_helpers import create_topic

from trio_broker.client import Consumer, Producer
from trio_broker.client.errors import KafkaError
from trio_broker.errors import ErrorCode

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _confluent_produce(bootstrap: str, topic: str, codec: str, n: int) -> list[tuple]:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5}
    )
    sent = []
    for i in range(n):
        key = None if i % 4 == 0 else b"k%d" % i
        value = b"value-%d" % i * (1 + i % 3)
        headers = [("h", b"%d" % i), ("n", None)] if i % 2 else None
        ts = 1_700_000_000_000 + i
        producer.produce(topic, value, key, partition=i % 2, headers=headers, timestamp=ts)
        sent.append((i % 2, key, value, tuple(headers or ()), ts))
    assert producer.flush(30) == 0
    return sent


@pytest.mark.parametrize("codec", CODECS)
async def test_reads_what_confluent_wrote_in_every_codec(kafka_broker, codec):
    topic = f"consume-{codec}"
    await create_topic(kafka_broker.bootstrap, topic, 2)
    sent = await trio.to_thread.run_sync(
        _confluent_produce, kafka_broker.bootstrap, topic, codec, 300
    )
    async with Consumer(kafka_broker.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, 0), (topic, 1)])
        got = []
        with trio.fail_after(20):
            async for record in consumer:
                got.append(record)
                if len(got) == len(sent):
                    break
    for part in (0, 1):
        mine = [r for r in got if r.partition == part]
        assert [r.offset for r in mine] == list(range(len(mine)))
        assert [(r.key, r.value, r.headers, r.timestamp) for r in mine] == [
            (k, v, h, ts) for p, k, v, h, ts in sent if p == part
        ]


async def test_seek_getmany_and_latest(kafka_broker):
    topic = "seeking"
    await create_topic(kafka_broker.bootstrap, topic, 1)
    async with Producer(kafka_broker.bootstrap) as p:
        for i in range(50):
            await p.send_soon(topic, b"%d" % i)
    async with Consumer(kafka_broker.bootstrap) as consumer:  # latest by default
        consumer.assign([(topic, 0)])
        assert await consumer.getmany(timeout_ms=300) == {}
        assert consumer.position(topic, 0) == 50
        consumer.seek(topic, 0, 45)
        got = []
        with trio.fail_after(10):
            while len(got) < 5:
                for records in (await consumer.getmany(timeout_ms=1000, max_records=2)).values():
                    assert len(records) <= 2
                    got += records
        assert [r.value for r in got] == [b"%d" % i for i in range(45, 50)]
        # New records arrive while the consumer waits.
        async with Producer(kafka_broker.bootstrap) as p:
            await p.send(topic, b"late")
        with trio.fail_after(10):
            record = await consumer.__anext__()
        assert (record.offset, record.value) == (50, b"late")


async def test_no_reset_policy_is_an_error(kafka_broker):
    await create_topic(kafka_broker.bootstrap, "strict", 1)
    async with Consumer(kafka_broker.bootstrap, auto_offset_reset="none") as consumer:
        consumer.assign([("strict", 0)])
        with pytest.raises(KafkaError, match="OFFSET_OUT_OF_RANGE") as info:
            await consumer.getmany(timeout_ms=5000)
        assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


async def test_cancelling_the_nursery_closes_the_consumer(kafka_broker):
    await create_topic(kafka_broker.bootstrap, "cancel-c", 1)
    consumer = Consumer(kafka_broker.bootstrap, auto_offset_reset="earliest")
    got = trio.Event()

    async def run():
        async with consumer:
            consumer.assign([("cancel-c", 0)])
            async for _record in consumer:
                got.set()

    async with Producer(kafka_broker.bootstrap) as p:
        await p.send("cancel-c", b"x")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        with trio.fail_after(10):
            await got.wait()
        nursery.cancel_scope.cancel()
    assert consumer.client._nursery is None
