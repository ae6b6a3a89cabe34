"""KafkaJS (npm `kafkajs`, a Kafka client with its own protocol code in JavaScript) against
a lone broker; tests/cluster/test_kafkajs_failover.py runs it on a cluster. `suite.js` runs
admin calls, an idempotent gzip producer, a consumer group, and transactions; this test
checks what it was told and what it read, and crosses clients both ways with
confluent-kafka (gzip: KafkaJS has no other codec built in).

Needs Node.js and `npm ci` in this directory (.ci/run does both; the `kafkajs` fixture
of tests/conftest.py skips without them)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

HERE = Path(__file__).resolve().parent
PY_TOPIC = "py-made"
PY_COUNT = 50


@pytest.fixture
def node(kafkajs) -> str:
    return kafkajs[0]


def produce_with_confluent(bootstrap: str) -> None:
    # gzip: KafkaJS decompresses only gzip without a codec plugin of its own.
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "gzip", "acks": "all"})
    for i in range(PY_COUNT):
        producer.produce(PY_TOPIC, key=b"pk%d" % i, value=b"pv%d" % i, partition=0)
    assert producer.flush(30) == 0


def run_suite(node: str, bootstrap: str, replication_factor: int) -> dict:
    out = subprocess.run(
        [node, str(HERE / "suite.js"), bootstrap, PY_TOPIC, str(PY_COUNT), str(replication_factor)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[:3000]
    return json.loads(out.stdout.strip().splitlines()[-1])


def read_with_confluent(bootstrap: str, topic: str, partitions: int, count: int) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "confluent-reader",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = []
    try:
        for _ in range(100):
            for msg in consumer.consume(count, timeout=1):
                assert msg.error() is None, msg.error()
                got.append((msg.key(), msg.value(), dict(msg.headers() or [])))
            if len(got) >= count:
                break
    finally:
        consumer.close()
    return got


def check(result: dict, bootstrap: str, brokers: list[int], rf: int) -> None:
    assert result["brokers"] == brokers
    assert result["controller"] in brokers
    assert result["created"] is True
    parts = result["partitions"]
    assert [p["partition"] for p in parts] == [0, 1, 2]
    for p in parts:
        assert len(p["replicas"]) == rf and sorted(p["isr"]) == sorted(p["replicas"])
        assert p["leader"] in p["replicas"]
    assert result["cleanupPolicy"] == "delete"

    # Every send acknowledged without error; the offsets the producer was told line up
    # with the partitions' end offsets.
    assert all(s["errorCode"] == 0 for s in result["sent"])
    ends = {p["partition"]: p["high"] for p in result["endOffsets"]}
    assert sum(ends.values()) == 300
    assert all(p["low"] == 0 for p in result["endOffsets"])

    # The group read each record once, at contiguous offsets per partition, with its key,
    # value and header; then its committed offsets are the partitions' ends.
    consumed = result["consumed"]
    assert len(consumed) == 300
    assert sorted(int(m["value"][1:]) for m in consumed) == list(range(300))
    for m in consumed:
        i = m["value"][1:]
        assert (m["key"], m["headers"]) == (f"k{i}", {"n": i})
    for partition, end in ends.items():
        offsets = [m["offset"] for m in consumed if m["partition"] == partition]
        assert offsets == list(range(end))
    assert {c["partition"]: c["offset"] for c in result["committed"]} == ends
    assert result["groupState"] == "Empty"

    # confluent-kafka's records, read by KafkaJS.
    from_python = result["fromPython"]
    assert [(m["key"], m["value"], m["offset"]) for m in from_python] == [
        (f"pk{i}", f"pv{i}", i) for i in range(PY_COUNT)
    ]

    # Transactions: only the committed ones, in order; the offsets sent in one committed.
    assert [m["value"] for m in result["committedTx"]] == [f"a{i}" for i in range(10)] + [
        f"c{i}" for i in range(5)
    ]
    assert {o["partition"]: o["offset"] for o in result["txGroupOffsets"]}[0] == 7
    assert result["topicsAfterDelete"] == ["js-orders"]

    # The rest of the admin calls: each did what it says.
    assert result["txPartitions"] == 2
    assert result["retentionMs"] == "7200000"
    after = {p["partition"]: (p["low"], p["high"]) for p in result["afterDeleteRecords"]}
    assert after == {p: (5 if p == 0 else 0, end) for p, end in ends.items()}
    # Offsets by timestamp 0: the first record still there in each partition.
    assert {p["partition"]: p["offset"] for p in result["byTimestamp"]} == {0: 5, 1: 0, 2: 0}
    assert {"js-group", "js-reader", "js-tx-group", "js-tx-reader"} <= set(result["groups"])
    assert result["movedOffset"] == 3
    assert result["deletedGroups"] == [["js-reader", 0]]
    assert "js-reader" not in result["groupsAfterDelete"]

    # KafkaJS's gzip batches, read by confluent-kafka: all but the five deleted above.
    deleted = {m["value"] for m in consumed if m["partition"] == 0 and m["offset"] < 5}
    expected = [
        (b"k%d" % i, b"v%d" % i, {"n": b"%d" % i}) for i in range(300) if f"v{i}" not in deleted
    ]
    read = read_with_confluent(bootstrap, "js-orders", 3, len(expected))
    assert sorted(read) == sorted(expected)


# Each of the suite's consumers joins a new group: no initial rebalance delay to wait out.
FAST_GROUPS = {"group.initial.rebalance.delay.ms": "0"}


def test_kafkajs_against_a_lone_broker(node, kafka_broker_factory):
    broker = kafka_broker_factory(FAST_GROUPS)
    produce_with_confluent(broker.bootstrap)
    result = run_suite(node, broker.bootstrap, 1)
    check(result, broker.bootstrap, [1], 1)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafkajs_over_sasl_ssl(node, kafka_broker_factory, tmp_path, mechanism):
    """KafkaJS's own TLS (Node's) and SASL code against a SASL_SSL listener: a wrong
    password is refused with an authentication error; the right one produces and
    consumes."""
    import trustme
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    ca = trustme.CA()
    server_pem, ca_pem = tmp_path / "server.pem", tmp_path / "ca.pem"
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(server_pem)
    )
    ca.cert_pem.write_to_path(str(ca_pem))
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'user_alice="alice-secret";'
    )
    broker = kafka_broker_factory(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            "ssl.keystore.location": str(server_pem),
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "sasl.jaas.config": jaas,
            **FAST_GROUPS,
        }
    )
    plain, sasl_ssl = ("{}:{}".format(*a[:2]) for a in broker.addresses)
    if mechanism.startswith("SCRAM"):
        admin = AdminClient({"bootstrap.servers": plain})
        info = ScramCredentialInfo(ScramMechanism[mechanism.replace("-", "_")], 4096)
        upsert = UserScramCredentialUpsertion("alice", info, b"alice-secret")
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(30)
    out = subprocess.run(
        [node, str(HERE / "secure.js"), sasl_ssl, mechanism, "alice", "alice-secret", str(ca_pem)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[:3000]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["wrongPassword"] == "KafkaJSSASLAuthenticationError"
    assert result["created"] is True
    assert result["sentErrors"] == [0]
    assert result["consumed"] == [[i, f"secret-{i}"] for i in range(20)]
