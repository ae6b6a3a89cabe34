"""The admin commands (`trio-broker topics|groups|configs|cluster|produce|consume`), each
run as a subprocess against a real broker, with confluent-kafka as the real consumer."""

from __future__ import annotations

import json

import pytest
from cli_run import cli_json as as_json
from cli_run import run_cli as cli
from confluent_kafka import Consumer, Producer, TopicPartition

from trio_broker.testing import free_port

TIMEOUT = 30


def one_error_line(out) -> str:
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("trio-broker: error: ")
    return lines[0]


def test_topics_lifecycle(kafka_broker):
    assert (
        "Created topic orders" in cli(kafka_broker, "topics", "create", "orders", "-p", "3").stdout
    )
    again = cli(kafka_broker, "topics", "create", "orders", "-p", "3", check=False)
    assert again.returncode == 1
    assert "TOPIC_ALREADY_EXISTS" in one_error_line(again)
    cli(kafka_broker, "topics", "create", "orders", "--if-not-exists")

    listed = as_json(kafka_broker, "topics", "list")
    assert {"name": "orders", "partitions": 3, "replication_factor": 1, "internal": False} in listed
    table = cli(kafka_broker, "topics", "list").stdout.splitlines()
    assert table[0].split() == ["NAME", "PARTITIONS", "REPLICATION-FACTOR"]
    assert ["orders", "3", "1"] in [line.split() for line in table]

    cli(kafka_broker, "topics", "add-partitions", "orders", "--num", "2")
    cli(kafka_broker, "topics", "alter", "orders", "-c", "retention.ms=3600000")
    [described] = as_json(kafka_broker, "topics", "describe", "orders")
    assert described["partition_count"] == 5
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2, 3, 4]
    assert all(p["leader"] == 1 and p["isr"] == [1] for p in described["partitions"])
    assert described["configs"] == {"retention.ms": "3600000"}

    configs = as_json(kafka_broker, "configs", "describe", "topic", "orders")
    assert {
        "name": "retention.ms",
        "value": "3600000",
        "source": "TOPIC_CONFIG",
        "read_only": False,
        "sensitive": False,
    } in configs
    cli(kafka_broker, "configs", "set", "topic", "orders", "cleanup.policy=compact")
    cli(kafka_broker, "configs", "delete", "topic", "orders", "retention.ms")
    names = {
        c["name"]: c["value"]
        for c in as_json(kafka_broker, "configs", "describe", "topic", "orders")
    }
    assert names == {"cleanup.policy": "compact"}
    bad = cli(kafka_broker, "configs", "set", "topic", "orders", "retention.ms=soon", check=False)
    assert bad.returncode == 1 and "INVALID_CONFIG" in one_error_line(bad)

    cli(kafka_broker, "topics", "delete", "orders")
    gone = cli(kafka_broker, "topics", "describe", "orders", check=False)
    assert gone.returncode == 3
    assert "UNKNOWN_TOPIC_OR_PARTITION" in one_error_line(gone)
    cli(kafka_broker, "topics", "delete", "orders", "--if-exists")
    assert cli(kafka_broker, "topics", "delete", "orders", check=False).returncode == 3


def test_errors_are_one_line_with_meaningful_exit_codes(kafka_broker, tmp_path):
    unreachable = cli(f"127.0.0.1:{free_port()}", "topics", "list", check=False)
    assert unreachable.returncode == 4
    assert "cannot connect" in one_error_line(unreachable)
    missing = cli(kafka_broker, "consume", "no-such-topic", check=False)
    assert missing.returncode == 3
    one_error_line(missing)
    assert cli(kafka_broker, "groups", "describe", "no-such-group", check=False).returncode == 3
    props = tmp_path / "client.properties"
    props.write_text("client.id=ops-test\nrequest.timeout.ms=20000\n")
    cli(kafka_broker, "cluster", "info", "--command-config", str(props))
    props.write_text("no.such.client.key=1\n")  # a key no Kafka client has
    bad = cli(kafka_broker, "cluster", "info", "--command-config", str(props), check=False)
    assert bad.returncode == 2
    assert "no.such.client.key" in one_error_line(bad)


def test_produce_consume_and_cluster_info(kafka_broker):
    cli(kafka_broker, "topics", "create", "looks", "-p", "2")
    sent = as_json(
        kafka_broker, "produce", "looks", "--key-separator", ":", stdin="a:1\nb:2\nc:3\n"
    )
    assert len(sent) == 3 and all(r["topic"] == "looks" for r in sent)
    out = cli(kafka_broker, "consume", "looks", "--json").stdout
    records = [json.loads(line) for line in out.splitlines()]
    assert sorted((r["key"], r["value"]) for r in records) == [("a", "1"), ("b", "2"), ("c", "3")]
    assert {(r["partition"], r["offset"]) for r in records} == {
        (r["partition"], r["offset"]) for r in sent
    }
    assert len(cli(kafka_broker, "consume", "looks", "-n", "2").stdout.splitlines()) == 2
    info = as_json(kafka_broker, "cluster", "info")
    assert info["controller_id"] == 1
    assert info["brokers"] == [
        {"id": 1, "host": kafka_broker.host, "port": kafka_broker.port, "controller": True}
    ]


def _produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, n in counts.items():
        for i in range(n):
            producer.produce(topic, value=b"%d-%d" % (partition, i), partition=partition)
    assert producer.flush(TIMEOUT) == 0


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": "lag-checker",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )


def _read_all(consumer: Consumer, n: int) -> list:
    got = []
    while len(got) < n:
        msg = consumer.poll(TIMEOUT)
        assert msg is not None and msg.error() is None
        got.append(msg)
    return got


def test_groups_describe_lag_and_reset_offsets_honoured(kafka_broker_factory):
    # No initial rebalance delay: the consumers below join at once.
    kafka_broker = kafka_broker_factory({"group.initial.rebalance.delay.ms": "0"})
    bootstrap = kafka_broker.bootstrap
    cli(kafka_broker, "topics", "create", "ledger", "-p", "2")
    _produce(bootstrap, "ledger", {0: 6, 1: 4})
    consumer = _consumer(bootstrap, "billing")
    consumer.subscribe(["ledger"])
    _read_all(consumer, 10)
    # The consumer leaves 2 + 3 records behind.
    consumer.commit(
        offsets=[TopicPartition("ledger", 0, 4), TopicPartition("ledger", 1, 1)],
        asynchronous=False,
    )
    rows = as_json(kafka_broker, "groups", "describe", "billing")
    assert [(r["partition"], r["current_offset"], r["log_end_offset"], r["lag"]) for r in rows] == [
        (0, 4, 6, 2),
        (1, 1, 4, 3),
    ]
    for r in rows:
        assert set(r) == {
            "group", "topic", "partition", "current_offset", "log_end_offset", "lag",
            "consumer_id", "host", "client_id",
        }  # fmt: skip
        assert r["group"] == "billing" and r["client_id"] == "lag-checker"
        assert r["consumer_id"] and r["host"]
    members = as_json(kafka_broker, "groups", "describe", "billing", "--members")[0]
    assert members["state"] == "Stable"
    assert sorted(a["partition"] for a in members["members"][0]["assignment"]) == [0, 1]
    # An active group is not reset.
    active = cli(
        kafka_broker, "groups", "reset-offsets", "billing", "--all-topics", "--to-earliest",
        "--execute", check=False,
    )  # fmt: skip
    assert active.returncode == 1 and "inactive" in one_error_line(active)
    consumer.close()

    dry = as_json(
        kafka_broker, "groups", "reset-offsets", "billing", "--all-topics", "--to-earliest"
    )
    assert [(r["partition"], r["current_offset"], r["new_offset"]) for r in dry] == [
        (0, 4, 0),
        (1, 1, 0),
    ]
    # A dry run changed nothing.
    assert [
        r["current_offset"] for r in as_json(kafka_broker, "groups", "describe", "billing")
    ] == [4, 1]
    shifted = as_json(
        kafka_broker, "groups", "reset-offsets", "billing", "--topic", "ledger:0",
        "--shift-by", "-3", "--execute",
    )  # fmt: skip
    assert [(r["partition"], r["new_offset"]) for r in shifted] == [(0, 1)]
    assert [r["lag"] for r in as_json(kafka_broker, "groups", "describe", "billing")] == [5, 3]

    # A restarted consumer starts where the reset left the group.
    consumer = _consumer(bootstrap, "billing")
    consumer.subscribe(["ledger"])
    got = _read_all(consumer, 8)
    assert sorted((m.partition(), m.offset()) for m in got) == [(0, o) for o in range(1, 6)] + [
        (1, o) for o in range(1, 4)
    ]
    assert consumer.poll(1.0) is None
    consumer.close()

    cli(
        kafka_broker,
        "groups",
        "reset-offsets",
        "billing",
        "--topic",
        "ledger",
        "--to-latest",
        "--execute",
    )
    assert [r["lag"] for r in as_json(kafka_broker, "groups", "describe", "billing")] == [0, 0]
    cli(
        kafka_broker, "groups", "reset-offsets", "billing", "--topic", "ledger",
        "--to-datetime", "2000-01-01T00:00:00", "--execute",
    )  # fmt: skip
    assert [
        r["current_offset"] for r in as_json(kafka_broker, "groups", "describe", "billing")
    ] == [0, 0]
    listed = as_json(kafka_broker, "groups", "list")
    assert {
        "group": "billing",
        "type": "classic",
        "state": "Empty",
        "protocol_type": "consumer",
    } in listed
    cli(kafka_broker, "groups", "delete", "billing")
    assert "billing" not in {g["group"] for g in as_json(kafka_broker, "groups", "list")}


@pytest.mark.parametrize("partitions", [700])
def test_reset_offsets_over_many_partitions_shows_progress(kafka_broker, partitions):
    cli(kafka_broker, "topics", "create", "wide", "-p", str(partitions))
    out = cli(
        kafka_broker, "groups", "reset-offsets", "sweepers", "--topic", "wide", "--to-earliest",
        "--execute", "--json",
    )  # fmt: skip
    assert len(json.loads(out.stdout)) == partitions
    assert f"committed 500/{partitions} partitions" in out.stderr
    assert f"committed {partitions}/{partitions} partitions" in out.stderr
    rows = as_json(kafka_broker, "groups", "describe", "sweepers")
    assert len(rows) == partitions and all(r["current_offset"] == 0 for r in rows)


def test_configs_of_brokers(kafka_broker):
    cli(kafka_broker, "configs", "set", "broker", "1", "log.retention.ms=3600000")
    cli(kafka_broker, "configs", "set", "broker", "message.max.bytes=2000000")  # the default ""
    rows = {r["name"]: r for r in as_json(kafka_broker, "configs", "describe", "broker", "1")}
    assert rows["log.retention.ms"]["value"] == "3600000"
    assert rows["log.retention.ms"]["source"] == "DYNAMIC_BROKER_CONFIG"
    assert rows["message.max.bytes"]["source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG"
    assert rows["log.dirs"]["source"] == "STATIC_BROKER_CONFIG"
    assert rows["log.dirs"]["read_only"] is True
    assert "num.partitions" not in rows  # a default: shown with --all only
    every = {
        r["name"]: r for r in as_json(kafka_broker, "configs", "describe", "broker", "1", "--all")
    }
    assert every["num.partitions"]["source"] == "DEFAULT_CONFIG"
    assert every["broker.id"]["value"] == "1"
    defaults = as_json(kafka_broker, "configs", "describe", "broker")
    assert [(r["name"], r["value"]) for r in defaults] == [("message.max.bytes", "2000000")]
    cli(kafka_broker, "configs", "delete", "broker", "1", "log.retention.ms")
    rows = {r["name"]: r for r in as_json(kafka_broker, "configs", "describe", "broker", "1")}
    assert "log.retention.ms" not in rows
    static = cli(kafka_broker, "configs", "set", "broker", "1", "log.dirs=/elsewhere", check=False)
    assert static.returncode == 1
    assert "Cannot update these configs dynamically" in one_error_line(static)
