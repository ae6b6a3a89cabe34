"""`trio-broker consume --group G` joins a consumer group and commits what it printed, as
kafka-console-consumer and `kcat -G` do; `--from-beginning` is `--offset earliest`."""

from __future__ import annotations

import json

from cli_run import run_cli as cli
from confluent_kafka import Producer

TIMEOUT = 30
# A new group's first rebalance waits group.initial.rebalance.delay.ms (3 s) for members.
FAST_JOIN = {"group.initial.rebalance.delay.ms": "0"}


def _produce(broker, topic: str, values: list[str], partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for value in values:
        producer.produce(topic, value=value.encode(), partition=partition)
    assert producer.flush(TIMEOUT) == 0


def _values(out: str) -> list[str]:
    return [json.loads(line)["value"] for line in out.splitlines()]


def _committed(broker, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, as `groups describe` (Kafka's columns) shows them."""
    rows = json.loads(cli(broker, "groups", "describe", group, "--json").stdout)
    return {
        (r["topic"], r["partition"]): r["current_offset"]
        for r in rows
        if r["current_offset"] is not None
    }


def test_consume_with_a_group_commits_and_resumes(kafka_broker_factory):
    kafka_broker = broker = kafka_broker_factory(FAST_JOIN)
    cli(kafka_broker, "topics", "create", "grouped", "-p", "2")
    _produce(kafka_broker, "grouped", ["a0", "a1", "a2"], partition=0)
    _produce(kafka_broker, "grouped", ["b0", "b1"], partition=1)

    # -n 2 of 5: the group commits exactly what was printed, not the fetch position.
    first = cli(kafka_broker, "consume", "grouped", "--group", "g1", "-n", "2", "--json")
    got = _values(first.stdout)
    assert len(got) == 2
    committed = _committed(kafka_broker, "g1")
    assert sum(committed.values()) == 2, committed

    # The second run resumes after the committed offsets and reads the rest, once each.
    second = cli(kafka_broker, "consume", "grouped", "--group", "g1", "--json")
    rest = _values(second.stdout)
    assert sorted(got + rest) == ["a0", "a1", "a2", "b0", "b1"]
    assert _committed(kafka_broker, "g1") == {("grouped", 0): 3, ("grouped", 1): 2}

    # Nothing new: a third run prints nothing; new records: only those.
    assert _values(cli(kafka_broker, "consume", "grouped", "-G", "g1", "--json").stdout) == []
    _produce(kafka_broker, "grouped", ["a3"], partition=0)
    assert _values(cli(kafka_broker, "consume", "grouped", "-G", "g1", "--json").stdout) == ["a3"]
    # Each run left the group when it was done (no member holds the partitions).
    rows = json.loads(cli(broker, "groups", "describe", "g1", "--json").stdout)
    assert rows and all(r["consumer_id"] is None for r in rows)


def test_group_without_commits_starts_where_offset_says(kafka_broker_factory):
    kafka_broker = kafka_broker_factory(FAST_JOIN)
    cli(kafka_broker, "topics", "create", "fresh", "-p", "1")
    _produce(kafka_broker, "fresh", ["old"])
    # A new group with --offset latest starts at the end, as kafka-console-consumer without
    # --from-beginning does; it commits that position only when it prints something.
    out = cli(kafka_broker, "consume", "fresh", "--group", "late", "--offset", "latest")
    assert out.stdout == ""
    # --from-beginning: a new group reads from the start.
    out = cli(kafka_broker, "consume", "fresh", "--group", "early", "--from-beginning")
    assert out.stdout.splitlines() == ["old"]
    assert _committed(kafka_broker, "early") == {("fresh", 0): 1}


def test_from_beginning_is_offset_earliest(kafka_broker):
    cli(kafka_broker, "topics", "create", "begin", "-p", "1")
    _produce(kafka_broker, "begin", ["x", "y"])
    with_flag = cli(kafka_broker, "consume", "begin", "--from-beginning").stdout
    with_offset = cli(kafka_broker, "consume", "begin", "--offset", "earliest").stdout
    assert with_flag.splitlines() == with_offset.splitlines() == ["x", "y"]
    # Without a group nothing is committed anywhere.
    assert cli(kafka_broker, "consume", "begin", "--offset", "latest").stdout == ""


def test_group_refuses_partition_and_numeric_offset(kafka_broker):
    cli(kafka_broker, "topics", "create", "usage", "-p", "1")
    for extra in (["--partition", "0"], ["--offset", "3"]):
        out = cli(kafka_broker, "consume", "usage", "--group", "g", *extra, check=False)
        assert out.returncode == 2, (extra, out.stderr)
        assert "--group reads the partitions and offsets the group gives it" in out.stderr
