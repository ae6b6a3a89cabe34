"""`trio-broker groups list|describe` on a KIP-848 group (`group.protocol=consumer`): the
group's type, its assignor and epochs, and each member's epoch, assignment and target, as
`kafka-consumer-groups --describe --members --verbose` shows them."""

from __future__ import annotations

import time

from cli_run import cli_json as as_json
from cli_run import run_cli as cli
from confluent_kafka import Consumer, Producer

KIP848 = {
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.min.heartbeat.interval.ms": "300",
}


def test_list_and_describe_show_the_consumer_protocol(kafka_broker_factory):
    broker = kafka_broker_factory(KIP848)
    cli(broker, "topics", "create", "orders", "-p", "3")
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(30):
        producer.produce("orders", value=b"%d" % i, partition=i % 3)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "shipping",
            "group.protocol": "consumer",
            "group.remote.assignor": "range",
            "auto.offset.reset": "earliest",
            "client.id": "shipper",
        }
    )
    consumer.subscribe(["orders"])
    deadline = time.monotonic() + 60
    read = 0
    while read < 30 or len(consumer.assignment()) < 3:
        assert time.monotonic() < deadline, consumer.assignment()
        msg = consumer.poll(0.1)
        read += msg is not None and not msg.error()
    try:
        listed = {g["group"]: g for g in as_json(broker, "groups", "list")}
        assert listed["shipping"]["type"] == "consumer"
        assert listed["shipping"]["protocol_type"] == "consumer"
        [described] = as_json(broker, "groups", "describe", "shipping", "--members")
        assert described["type"] == "consumer"
        assert described["protocol"] == "range"  # the assignor the member asked for
        assert described["group_epoch"] == described["assignment_epoch"] >= 1
        [member] = described["members"]
        assert member["client_id"] == "shipper"
        assert member["member_epoch"] == described["group_epoch"]
        everything = [{"topic": "orders", "partition": p} for p in range(3)]
        assert member["assignment"] == member["target_assignment"] == everything
        text = cli(broker, "groups", "describe", "shipping").stdout
        assert "Type: consumer" in text and "Assignor: range" in text
    finally:
        consumer.close()
