"""Client quotas: AlterClientQuotas / DescribeClientQuotas, and a producer over its byte
rate held to it, told so by throttle_time_ms."""

from __future__ import annotations

import socket
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from wire import encode_request, read_response, request_of, roundtrip

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.alter_client_quotas_request import (
    EntityData,
    EntryData,
    OpData,
)
from trio_broker.protocol._generated.describe_client_quotas_request import ComponentData


def alter(broker, entity, ops, validate_only=False):
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        request = request_of(
            49,
            entries=[
                EntryData(
                    entity=[EntityData(entity_type=t, entity_name=n) for t, n in entity],
                    ops=[OpData(key=k, value=v or 0.0, remove=v is None) for k, v in ops],
                )
            ],
            validate_only=validate_only,
        )
        (entry,) = roundtrip(sock, request, 1).entries
        return entry.error_code, entry.error_message


def describe(broker, components, strict=False):
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        request = request_of(
            48,
            components=[
                ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components
            ],
            strict=strict,
        )
        answer = roundtrip(sock, request, 1)
        assert answer.error_code == 0, answer
        entries = [
            (
                tuple((e.entity_type, e.entity_name) for e in entry.entity),
                {v.key: v.value for v in entry.values},
            )
            for entry in answer.entries
        ]
        return sorted(entries, key=str)


def test_alter_and_describe_quotas_survive_restart(kafka_broker_factory):
    broker = kafka_broker_factory()
    assert alter(broker, [("user", "alice")], [("producer_byte_rate", 1024.0)]) == (0, None)
    assert alter(broker, [("user", None)], [("consumer_byte_rate", 2048.0)]) == (0, None)
    assert (
        alter(broker, [("client-id", "c1"), ("user", "alice")], [("request_percentage", 50.0)])[0]
        == 0
    )
    assert alter(broker, [("client-id", "x")], [("nonsense", 1.0)])[0] == ErrorCode.INVALID_REQUEST
    assert (
        alter(broker, [("client-id", "x")], [("producer_byte_rate", -1.0)])[0]
        == ErrorCode.INVALID_REQUEST
    )
    assert alter(
        broker, [("client-id", "v")], [("producer_byte_rate", 5.0)], validate_only=True
    ) == (0, None)
    everything = [
        ((("client-id", "c1"), ("user", "alice")), {"request_percentage": 50.0}),
        ((("user", "alice"),), {"producer_byte_rate": 1024.0}),
        ((("user", None),), {"consumer_byte_rate": 2048.0}),
    ]
    assert describe(broker, []) == everything  # no filter
    assert describe(broker, [("user", 2, None)]) == everything[:2]  # a named user, and more
    assert describe(broker, [("user", 2, None)], strict=True) == [everything[1]]  # only that
    assert describe(broker, [("user", 1, None)]) == [everything[2]]  # the default
    assert describe(broker, [("user", 0, "alice")], strict=True) == [everything[1]]
    log_dir = broker.log_dir
    broker.stop()
    broker = kafka_broker_factory({"log.dirs": str(log_dir)})
    assert describe(broker, []) == everything
    assert alter(broker, [("user", "alice")], [("producer_byte_rate", None)]) == (0, None)
    assert describe(broker, [("user", 0, "alice")], strict=True) == []


def test_producer_is_held_to_its_byte_rate(kafka_broker_factory):
    broker = kafka_broker_factory()
    quota = 200_000.0
    assert alter(broker, [("client-id", "slow")], [("producer_byte_rate", quota)]) == (0, None)
    throttles = []
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": "slow",
            "linger.ms": 5,
            "batch.size": 16384,
            "queue.buffering.max.kbytes": 256,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    delivered = [0]

    def on_delivery(err, msg):
        if err is None:
            delivered[0] += len(msg.value())

    value = b"q" * 1000
    start = time.monotonic()
    while time.monotonic() - start < 10:
        try:
            producer.produce("quota", value=value, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    at_ten = delivered[0]
    producer.flush(30)
    rate = at_ten / 10
    assert abs(rate - quota) <= 0.1 * quota, rate
    assert throttles and max(throttles) > 0
    # An unthrottled client on the same broker is not slowed.
    fast = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "fast", "linger.ms": 5})
    start = time.monotonic()
    for _ in range(5000):
        fast.produce("quota", value=value)
        fast.poll(0)
    assert fast.flush(30) == 0
    assert 5_000_000 / (time.monotonic() - start) > 3 * quota


def test_consumer_is_held_to_its_byte_rate(kafka_broker_factory):
    # Two 1 s windows: the allowance before throttling starts is one second's worth.
    broker = kafka_broker_factory({"quota.window.num": "2"})
    # Batches of at most 50 kB: a fetch answers at least one whole batch, and the records
    # queued while the auto-created topic first answers LEADER_NOT_AVAILABLE (as Kafka's
    # does) would otherwise go as two 1 MB batches, each sent whole before the throttle.
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 50_000}
    )
    for _ in range(2000):
        producer.produce("cq", value=b"c" * 1000)
    assert producer.flush(30) == 0
    assert alter(broker, [("user", None)], [("consumer_byte_rate", 400_000.0)]) == (0, None)
    throttles = []
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "cq",
            "client.id": "reader",
            # Small fetches: each answer is sent whole before the mute, so the rate is only
            # as fine as the answers are small.
            "fetch.max.bytes": 100_000,
            "max.partition.fetch.bytes": 100_000,
            "message.max.bytes": 100_000,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    consumer.assign([TopicPartition("cq", 0, 0)])
    got = 0
    start = time.monotonic()
    while got < 2000 and time.monotonic() - start < 60:
        for msg in consumer.consume(1000, 0.5):
            if not msg.error():
                got += 1
    elapsed = time.monotonic() - start
    consumer.close()
    assert got == 2000
    # 2 MB at 400 kB/s: 5 s, less the first window's allowance and the last answer.
    assert elapsed >= 3.5, elapsed
    assert elapsed < 30, elapsed
    assert throttles and max(throttles) > 0


def test_request_percentage_throttles_a_busy_client(kafka_broker_factory):
    broker = kafka_broker_factory()
    # 0.01% of a handler: a tenth of a millisecond per second.
    assert alter(broker, [("client-id", "busy")], [("request_percentage", 0.01)]) == (0, None)
    throttled = None
    with socket.create_connection((broker.host, broker.port), timeout=30) as sock:
        for i in range(50):
            request = encode_request(request_of(3, topics=None), 9, i, client_id="busy")
            sock.sendall(request)
            _, answer = read_response(sock, 3, 9)
            if answer.throttle_time_ms > 0:
                throttled = answer.throttle_time_ms
                break
        assert throttled is not None
        # The connection is muted for that long: the next answer waits.
        start = time.monotonic()
        sock.sendall(encode_request(request_of(3, topics=None), 9, 99, client_id="busy"))
        read_response(sock, 3, 9)
        assert time.monotonic() - start >= min(throttled, 2000) / 1000 * 0.8
    # Another client id is not throttled.
    with socket.create_connection((broker.host, broker.port), timeout=30) as sock:
        for i in range(20):
            sock.sendall(encode_request(request_of(3, topics=None), 9, i, client_id="idle"))
            _, answer = read_response(sock, 3, 9)
            assert answer.throttle_time_ms == 0
