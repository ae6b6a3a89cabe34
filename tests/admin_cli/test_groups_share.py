"""Share groups (KIP-932) through the admin side: `trio-broker groups list|describe` shows a
share group's members, its share-partition start offsets and lag; our Admin reads, sets and
deletes the start offsets (Describe/Alter/DeleteShareGroupOffsets), which the next
ShareConsumer follows."""

from __future__ import annotations

import time

import pytest
import trio
from cli_run import cli_json as as_json
from cli_run import run_cli as cli
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer

from trio_broker.client import TopicPartition
from trio_broker.client.admin import Admin
from trio_broker.client.admin_types import AdminError, ConfigResource, ConfigResourceType
from trio_broker.errors import ErrorCode


def _admin_call(broker, method: str, *args):
    async def call():
        async with Admin(broker.bootstrap) as admin:
            return await getattr(admin, method)(*args)

    return trio.run(call)


def test_describe_alter_delete_share_group_offsets(kafka_broker_factory):
    broker = kafka_broker_factory({"offsets.topic.num.partitions": "3"})
    cli(broker, "topics", "create", "work", "-p", "2")
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(40):
        producer.produce("work", value=b"%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    group = ConfigResource(ConfigResourceType.GROUP, "crew")
    _admin_call(
        broker, "incremental_alter_configs", {group: {"share.auto.offset.reset": "earliest"}}
    )
    consumer = ShareConsumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "crew",
            "client.id": "worker",
            "share.acknowledgement.mode": "explicit",
        }
    )
    consumer.subscribe(["work"])
    # Accept partition 0's first 15 records and partition 1's first 5.
    accepted = set()
    deadline = time.monotonic() + 60
    while len(accepted) < 20:
        assert time.monotonic() < deadline
        for m in consumer.poll(0.5):
            keep = m.offset() < (15 if m.partition() == 0 else 5)
            consumer.acknowledge(m, AcknowledgeType.ACCEPT if keep else AcknowledgeType.RELEASE)
            if keep:
                accepted.add((m.partition(), m.offset()))
        consumer.commit_sync(30)
    try:
        listed = {g["group"]: g for g in as_json(broker, "groups", "list")}
        assert (listed["crew"]["type"], listed["crew"]["state"]) == ("share", "Stable")
        [described] = as_json(broker, "groups", "describe", "crew", "--members")
        assert (described["type"], described["protocol"]) == ("share", "simple")
        [member] = described["members"]
        assert member["client_id"] == "worker"
        assert member["assignment"] == [{"topic": "work", "partition": p} for p in (0, 1)]
        rows = {r["partition"]: r for r in as_json(broker, "groups", "describe", "crew")}
        assert (rows[0]["current_offset"], rows[0]["log_end_offset"], rows[0]["lag"]) == (15, 20, 5)
        assert (rows[1]["current_offset"], rows[1]["lag"]) == (5, 15)
        text = cli(broker, "groups", "describe", "crew").stdout
        assert "Type: share" in text and "Assignor: simple" in text
        # Not while the group has members.
        with pytest.raises(AdminError) as refused:
            _admin_call(broker, "alter_share_group_offsets", "crew", {TopicPartition("work", 0): 0})
        assert refused.value.errors[TopicPartition("work", 0)].code == ErrorCode.NON_EMPTY_GROUP
    finally:
        consumer.close()
    deadline = time.monotonic() + 60
    while as_json(broker, "groups", "describe", "crew", "--members")[0]["members"]:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    offsets = _admin_call(broker, "list_share_group_offsets", "crew")
    assert offsets == {TopicPartition("work", 0): 15, TopicPartition("work", 1): 5}
    # Partition 0 starts over at 18; partition 1's state is deleted: it starts again where
    # share.auto.offset.reset says (earliest).
    _admin_call(broker, "alter_share_group_offsets", "crew", {TopicPartition("work", 0): 18})
    _admin_call(broker, "delete_share_group_offsets", "crew", ["work"])
    assert _admin_call(broker, "list_share_group_offsets", "crew") == {}
    _admin_call(broker, "alter_share_group_offsets", "crew", {TopicPartition("work", 0): 18})
    assert _admin_call(broker, "list_share_group_offsets", "crew") == {
        TopicPartition("work", 0): 18
    }
    again = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "crew"})
    again.subscribe(["work"])
    got = set()
    deadline = time.monotonic() + 60
    while len(got) < 22:
        assert time.monotonic() < deadline, sorted(got)
        got |= {(m.partition(), m.offset()) for m in again.poll(0.5) if m.error() is None}
    again.close()
    assert got == {(0, o) for o in range(18, 20)} | {(1, o) for o in range(20)}
