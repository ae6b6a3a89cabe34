"""DescribeCluster and DescribeLogDirs through confluent-kafka and kafka-python."""

from __future__ import annotations

import os
import socket

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from wire import request_of, roundtrip

from trio_broker.errors import ErrorCode

TIMEOUT = 30


def raw(broker, api_key: int, version: int, **fields):
    with socket.create_connection((broker.host, broker.port), timeout=TIMEOUT) as sock:
        return roundtrip(sock, request_of(api_key, **fields), version)


def test_describe_cluster(kafka_broker):
    client = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    result = client.describe_cluster().result(TIMEOUT)
    assert [(n.id, n.host, n.port) for n in result.nodes] == [
        (1, kafka_broker.host, kafka_broker.port)
    ]
    assert result.controller.id == 1
    assert result.cluster_id
    kp = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        described = kp.describe_cluster()
    finally:
        kp.close()
    assert described["cluster_id"] == result.cluster_id
    assert described["controller_id"] == 1
    response = raw(kafka_broker, 60, 1, include_cluster_authorized_operations=True, endpoint_type=1)
    assert (response.error_code, response.cluster_id) == (ErrorCode.NONE, result.cluster_id)
    assert [(b.broker_id, b.port) for b in response.brokers] == [(1, kafka_broker.port)]
    # No authorizer: every operation the cluster resource supports (ALTER=7 ... IDEMPOTENT_WRITE=12).
    assert response.cluster_authorized_operations & (
        1 << 7
    ) and response.cluster_authorized_operations & (1 << 12)
    # The controllers endpoint type belongs to controllers.
    response = raw(
        kafka_broker, 60, 1, include_cluster_authorized_operations=False, endpoint_type=2
    )
    assert response.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE


def test_describe_log_dirs(kafka_broker):
    client = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    for f in client.create_topics([NewTopic("sized", 2, 1), NewTopic("other", 1, 1)]).values():
        f.result(TIMEOUT)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for _ in range(10):
        producer.produce("sized", value=b"x" * 1000, partition=1)
    assert producer.flush(TIMEOUT) == 0
    kp = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        (per_broker,) = kp.describe_log_dirs()
        (only_sized,) = kp.describe_log_dirs({"sized": [1]})
    finally:
        kp.close()
    (log_dir,) = per_broker["log_dirs"]
    assert log_dir["error_code"] == 0
    assert log_dir["log_dir"] == os.path.abspath(kafka_broker.log_dir)
    sizes = {
        (t["name"], p["partition_index"]): p["partition_size"]
        for t in log_dir["topics"]
        for p in t["partitions"]
    }
    assert set(sizes) >= {("sized", 0), ("sized", 1), ("other", 0)}
    assert sizes[("sized", 0)] == 0
    on_disk = sum(f.stat().st_size for f in (kafka_broker.log_dir / "sized-1").glob("*.log"))
    assert sizes[("sized", 1)] == on_disk >= 10_000
    assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
    (filtered,) = only_sized["log_dirs"]
    assert [
        (t["name"], [p["partition_index"] for p in t["partitions"]]) for t in filtered["topics"]
    ] == [("sized", [1])]
