"""A share group (KIP-932) in a 3-broker cluster: partitions led by different brokers, each
leader keeping its share-partitions, two confluent-kafka ShareConsumers accepting every
record exactly once; the group's configs, set through one broker, hold on all of them;
FindCoordinator answers share-partition keys; deleting and altering the group's state acts
at the share coordinators and the partition leaders follow."""

from __future__ import annotations

import base64
import socket
import threading
import time

from confluent_kafka import Producer, ShareConsumer
from failover_helpers import create_topic, partitions, wait_for_leaders
from wire import request_of, roundtrip

from trio_broker.cluster.coordinator_log import partition_for
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.alter_share_group_offsets_request import (
    AlterShareGroupOffsetsRequestPartition as AlterPartition,
)
from trio_broker.protocol._generated.alter_share_group_offsets_request import (
    AlterShareGroupOffsetsRequestTopic as AlterTopic,
)
from trio_broker.protocol._generated.delete_share_group_offsets_request import (
    DeleteShareGroupOffsetsRequestTopic as DeleteTopic,
)
from trio_broker.protocol._generated.describe_configs_request import DescribeConfigsResource
from trio_broker.protocol._generated.describe_share_group_offsets_request import (
    DescribeShareGroupOffsetsRequestGroup as DescribeGroup,
)
from trio_broker.protocol._generated.incremental_alter_configs_request import (
    AlterableConfig,
    AlterConfigsResource,
)
from trio_broker.protocol._generated.read_share_group_state_request import (
    PartitionData as ReadPartition,
)
from trio_broker.protocol._generated.read_share_group_state_request import ReadStateData


def _set_group_config(broker, group: str, name: str, value: str) -> None:
    resource = AlterConfigsResource(
        resource_type=32,
        resource_name=group,
        configs=[AlterableConfig(name=name, config_operation=0, value=value)],
    )
    with socket.create_connection((broker.host, broker.port), timeout=30) as sock:
        response = roundtrip(sock, request_of(44, resources=[resource]), 1)
    assert response.responses[0].error_code == 0


def _group_config(broker, group: str, name: str) -> tuple[str, bool]:
    """A group config as one broker describes it: (value, whether set for the group)."""
    resource = DescribeConfigsResource(
        resource_type=32, resource_name=group, configuration_keys=[name]
    )
    with socket.create_connection((broker.host, broker.port), timeout=30) as sock:
        response = roundtrip(sock, request_of(32, resources=[resource]), 4)
    (result,) = response.results
    assert result.error_code == 0
    (entry,) = [c for c in result.configs if c.name == name]
    return entry.value, entry.config_source == 8  # GROUP_CONFIG


def _everywhere(brokers, group: str, name: str, want: tuple[str, bool]) -> None:
    deadline = time.monotonic() + 30
    for broker in brokers:
        while (got := _group_config(broker, group, name)) != want:
            assert time.monotonic() < deadline, (got, want)
            time.sleep(0.1)


def _raw(broker, api_key: int, version: int, **fields):
    with socket.create_connection((broker.host, broker.port), timeout=30) as sock:
        return roundtrip(sock, request_of(api_key, **fields), version)


def _until_empty(call):
    """Call until the group is no longer refused NON_EMPTY_GROUP (its members are leaving);
    the answer."""
    deadline = time.monotonic() + 30
    while True:
        answer = call()
        codes = [getattr(answer, "error_code", 0)] + [
            r.error_code for r in getattr(answer, "results", [])
        ]
        if ErrorCode.NON_EMPTY_GROUP not in codes or time.monotonic() > deadline:
            assert not any(codes), codes
            return answer
        time.sleep(0.2)


def test_share_group_reads_partitions_led_by_every_broker(kafka_cluster):
    bootstrap = kafka_cluster.bootstrap
    create_topic(bootstrap, "spread", 6, 3)
    leaders = wait_for_leaders(bootstrap, "spread", 6, isr_size=3)
    assert len({p.leader for p in leaders.values()}) == 3  # every broker leads some
    # A group config set through one broker holds on every broker (through ZooKeeper):
    # each leads share-partitions of the group, and each must start them at the earliest.
    brokers = list(kafka_cluster.brokers.values())
    assert _group_config(brokers[1], "pool", "share.auto.offset.reset") == ("latest", False)
    _set_group_config(brokers[0], "pool", "share.auto.offset.reset", "earliest")
    _everywhere(brokers, "pool", "share.auto.offset.reset", ("earliest", True))
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(3000):
        producer.produce("spread", b"%d" % i, partition=i % 6)
    assert producer.flush(60) == 0
    taken: list[list[tuple[int, int]]] = [[], []]
    stop = threading.Event()

    def member(i: int) -> None:
        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "pool"})
        consumer.subscribe(["spread"])
        while not stop.is_set():
            for m in consumer.poll(0.5):
                if m.error() is None:
                    taken[i].append((m.partition(), m.offset()))
        consumer.close()

    threads = [threading.Thread(target=member, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 90
    while sum(map(len, taken)) < 3000 and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(60)
    everything = taken[0] + taken[1]
    assert len(everything) == len(set(everything)) == 3000

    # FindCoordinator v6 with share-partition keys ("group:topic id:partition"), asked of
    # every broker: the leader of the key's __share_group_state partition (Kafka's hash).
    state = partitions(bootstrap, "__share_group_state")
    first = next(iter(kafka_cluster.brokers.values()))
    with socket.create_connection((first.host, first.port), timeout=30) as sock:
        metadata = roundtrip(sock, request_of(3, topics=None), 12)
    (topic_id,) = [t.topic_id for t in metadata.topics if t.name == "spread"]
    text = base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
    keys = [f"pool:{text}:{p}" for p in range(6)]
    want = [state[partition_for(k, len(state))].leader for k in keys]
    for broker in kafka_cluster.brokers.values():
        with socket.create_connection((broker.host, broker.port), timeout=30) as sock:
            found = roundtrip(sock, request_of(10, key_type=2, coordinator_keys=keys), 6)
        assert [(c.key, c.error_code, c.node_id) for c in found.coordinators] == [
            (k, 0, node) for k, node in zip(keys, want, strict=True)
        ]

    # Once the group is empty, DeleteShareGroupOffsets and AlterShareGroupOffsets act at the
    # share coordinators, and the partition leaders, which still hold the old state in
    # memory, follow: the topic is read again, partition 0 from offset 400 only.
    (coordinator,) = [
        kafka_cluster.brokers[c.node_id]
        for c in _raw(first, 10, 4, key_type=0, coordinator_keys=["pool"]).coordinators
    ]

    def start_offsets() -> list[int]:
        out = []
        for p, node in enumerate(want):
            data = ReadStateData(topic_id=topic_id, partitions=[ReadPartition(partition=p)])
            answer = _raw(kafka_cluster.brokers[node], 84, 0, group_id="pool", topics=[data])
            (row,) = answer.results[0].partitions
            assert row.error_code == 0
            out.append(row.start_offset)
        return out

    assert start_offsets() == [500] * 6

    def described() -> dict[int, int]:
        group = DescribeGroup(group_id="pool", topics=None)
        (answer,) = _raw(coordinator, 90, 0, groups=[group]).groups
        assert answer.error_code == 0
        return {p.partition_index: p.start_offset for t in answer.topics for p in t.partitions}

    assert described() == dict.fromkeys(range(6), 500)  # from the share coordinators
    topics = [DeleteTopic(topic_name="spread")]
    deleted = _until_empty(lambda: _raw(coordinator, 92, 0, group_id="pool", topics=topics))
    assert [(t.topic_name, t.error_code) for t in deleted.responses] == [("spread", 0)]
    assert start_offsets() == [-1] * 6
    alter = AlterTopic(
        topic_name="spread", partitions=[AlterPartition(partition_index=0, start_offset=400)]
    )
    altered = _raw(coordinator, 91, 0, group_id="pool", topics=[alter])
    assert (altered.error_code, altered.responses[0].partitions[0].error_code) == (0, 0)
    assert start_offsets() == [400] + [-1] * 5
    assert described() == {0: 400}
    again = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "pool"})
    again.subscribe(["spread"])
    got: set[tuple[int, int]] = set()
    deadline = time.monotonic() + 60
    while len(got) < 2600 and time.monotonic() < deadline:
        got |= {(m.partition(), m.offset()) for m in again.poll(0.5) if m.error() is None}
    again.close()
    assert got == {(0, o) for o in range(400, 500)} | {
        (p, o) for p in range(1, 6) for o in range(500)
    }
    # DeleteGroups: the group's state goes at every share coordinator.
    gone = _until_empty(lambda: _raw(coordinator, 42, 2, groups_names=["pool"]))
    assert [(r.group_id, r.error_code) for r in gone.results] == [("pool", 0)]
    assert start_offsets() == [-1] * 6

    # A broker started later reads the group's configs from ZooKeeper.
    later = kafka_cluster.add_broker(4)
    _everywhere([later], "pool", "share.auto.offset.reset", ("earliest", True))
