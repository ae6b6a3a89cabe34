"""Transactions with kafka-python's and aiokafka's transactional producers."""

from __future__ import annotations

import asyncio

from kafka import KafkaProducer
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
