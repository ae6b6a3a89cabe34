"""Hostile requests that decode: every one gets an answer (or, for an acks=0 produce or a
request the broker refuses outright, a closed connection), never a handler failure; the
broker keeps serving, and the data it held is intact across a restart.

A fixed seed, so a failure reproduces: `run_fuzz(..., seed=N)` in tests/fuzz_requests.py.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from fuzz_requests import realistic_seeds, run_fuzz, seeds

from trio_broker.testing import BrokerThread

CONFIG = {
    "offsets.topic.num.partitions": "2",
    "transaction.state.log.num.partitions": "2",
    "group.initial.rebalance.delay.ms": "0",
}
KEPT = [f"kept-{i}".encode() for i in range(20)]


def _produce_kept(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in KEPT:
        producer.produce("kept", value=value)
    assert producer.flush(15) == 0


def _consume_all(bootstrap: str, topic: str, n: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
         "auto.offset.reset": "earliest"}
    )  # fmt: skip
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        while len(got) < n and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    return got


def test_hostile_requests_never_fail_a_handler(tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="trio_broker")
    broker = BrokerThread({"log.dirs": str(tmp_path), **CONFIG}).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics(
            [NewTopic("fuzz", 2, 1), NewTopic("kept", 1, 1)]
        ).values():
            future.result(15)
        _produce_kept(broker.bootstrap)

        outcome = run_fuzz(broker.host, broker.port, seeds(realistic_seeds("fuzz")), 1500, seed=1)

        failures = [r.getMessage() for r in caplog.records if "failed on api" in r.getMessage()]
        unencodable = [r.getMessage() for r in caplog.records if "cannot encode" in r.getMessage()]
        assert failures == [] and unencodable == []
        # Most mutated requests are answered with error codes; a connection closed is the
        # answer only to an acks=0 produce that failed or a request refused outright.
        assert outcome["answered"] > 1000, outcome
        assert outcome["slow"] == 0, outcome
        # The broker still serves a real client.
        _produce_kept(broker.bootstrap)
    finally:
        broker.stop()  # raises if the broker itself failed
    # What it held survives a restart, byte for byte.
    again = BrokerThread({"log.dirs": str(tmp_path), **CONFIG}).start()
    try:
        assert sorted(_consume_all(again.bootstrap, "kept", 40)) == sorted(KEPT * 2)
    finally:
        again.stop()
