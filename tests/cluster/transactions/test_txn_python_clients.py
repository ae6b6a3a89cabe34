"""Transactions with kafka-python's and aiokafka's transactional producers."""

from __future__ import annotations

import asyncio

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata
from txntest_helpers import consume_all, create_topic


def test_kafka_python_commit_and_abort(broker):
    create_topic(broker.bootstrap, "kp", 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-writer")
    try:
        producer.init_transactions()
        for txn in range(4):
            producer.begin_transaction()
            for i in range(3):
                producer.send("kp", value=b"%d-%d" % (txn, i), partition=0)
            producer.flush()
            if txn % 2 == 0:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close()
    committed = [v for _, _, v in consume_all(broker.bootstrap, "kp", 1, "read_committed")]
    assert committed == [b"%d-%d" % (t, i) for t in (0, 2) for i in range(3)]
    assert len(consume_all(broker.bootstrap, "kp", 1, "read_uncommitted")) == 12


def test_kafka_python_send_offsets_to_transaction(broker):
    create_topic(broker.bootstrap, "kp-in", 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-eos")
    tp = TopicPartition("kp-in", 0)
    try:
        producer.init_transactions()
        for offset, commit in ((5, True), (9, False)):
            producer.begin_transaction()
            producer.send_offsets_to_transaction({tp: OffsetAndMetadata(offset, "", -1)}, "kp-g")
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="kp-g")
    try:
        assert consumer.committed(tp) == 5  # the aborted transaction's 9 never counted
    finally:
        consumer.close()


def test_aiokafka_commit_and_abort(broker):
    from aiokafka import AIOKafkaProducer

    create_topic(broker.bootstrap, "aio", 1)

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="aio-w")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait("aio", b"kept", partition=0)
            await producer.begin_transaction()
            await producer.send_and_wait("aio", b"dropped", partition=0)
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send_and_wait("aio", b"kept too", partition=0)
        finally:
            await producer.stop()

    asyncio.run(run())
    committed = [v for _, _, v in consume_all(broker.bootstrap, "aio", 1, "read_committed")]
    assert committed == [b"kept", b"kept too"]
    assert len(consume_all(broker.bootstrap, "aio", 1, "read_uncommitted")) == 3
