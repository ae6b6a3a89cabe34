"""Our Trio ShareConsumer (KIP-932) on a real in-process broker: two members of one share
group take every record once; explicit acknowledgements release and reject; a librdkafka
ShareConsumer in the same group shares the work."""

from __future__ import annotations

import threading

import pytest
import trio
from consumer_helpers import broker, create_topic

from trio_broker.client import ShareConsumer, TopicPartition
from trio_broker.client.admin import Admin
from trio_broker.client.admin_types import ConfigResource, ConfigResourceType

confluent_kafka = pytest.importorskip("confluent_kafka")


def _produce(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        p.produce(topic, value=b"%d" % i, partition=i % partitions)
    assert p.flush(20) == 0


async def _from_earliest(bootstrap: str, group: str) -> None:
    async with Admin(bootstrap) as admin:
        resource = ConfigResource(ConfigResourceType.GROUP, group)
        await admin.incremental_alter_configs({resource: {"share.auto.offset.reset": "earliest"}})


async def test_two_members_take_every_record_once(tmp_path):
    async with broker(tmp_path) as bootstrap:
        await create_topic(bootstrap, "queue", 2)
        await trio.to_thread.run_sync(_produce, bootstrap, "queue", 2, 600)
        await _from_earliest(bootstrap, "workers")
        taken: list[list[tuple[int, int]]] = [[], []]
        done = trio.Event()

        async def member(i: int) -> None:
            async with ShareConsumer(bootstrap, group_id="workers") as consumer:
                consumer.subscribe(["queue"])
                while not done.is_set():
                    for record in await consumer.poll(0.2):
                        assert record.delivery_count == 1
                        taken[i].append((record.partition, record.offset))
                    if sum(map(len, taken)) >= 600:
                        done.set()

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(member, 0)
                nursery.start_soon(member, 1)
        everything = taken[0] + taken[1]
        assert len(everything) == len(set(everything)) == 600
        assert {p for p, _ in everything} == {0, 1}


async def test_explicit_release_comes_back_and_reject_does_not(tmp_path):
    async with broker(tmp_path) as bootstrap:
        await create_topic(bootstrap, "tasks", 1)
        await trio.to_thread.run_sync(_produce, bootstrap, "tasks", 1, 50)
        await _from_earliest(bootstrap, "crew")
        deliveries: dict[int, list[int]] = {}
        results = {}
        with trio.fail_after(60):
            async with ShareConsumer(
                bootstrap, group_id="crew", acknowledgement_mode="explicit"
            ) as consumer:
                consumer.subscribe(["tasks"])
                accepted = set()
                while len(accepted) < 40:
                    for record in await consumer.poll(0.5):
                        deliveries.setdefault(record.offset, []).append(record.delivery_count)
                        if record.offset % 5 == 0 and record.delivery_count == 1:
                            await consumer.acknowledge(record, "release")
                        elif record.offset % 5 == 1:
                            await consumer.acknowledge(record, "reject")
                        else:
                            await consumer.acknowledge(record, "accept")
                            accepted.add(record.offset)
                    results.update(await consumer.commit())
                # Nothing else comes: the rejected are gone, everything else is accepted.
                assert await consumer.poll(1.0) == []
        assert results == {TopicPartition("tasks", 0): 0}
        for offset, counts in deliveries.items():
            assert counts == ([1, 2] if offset % 5 == 0 else [1]), offset
        assert accepted == {o for o in range(50) if o % 5 != 1}


async def test_ours_and_librdkafkas_share_one_group(tmp_path):
    async with broker(tmp_path) as bootstrap:
        await create_topic(bootstrap, "mixed", 2)
        await trio.to_thread.run_sync(_produce, bootstrap, "mixed", 2, 1000)
        await _from_earliest(bootstrap, "both")
        theirs: list[tuple[int, int]] = []
        ours: list[tuple[int, int]] = []
        stop = threading.Event()

        def librdkafka() -> None:
            c = confluent_kafka.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "both"})
            c.subscribe(["mixed"])
            while not stop.is_set():
                for m in c.poll(0.2):
                    if m.error() is None:
                        theirs.append((m.partition(), m.offset()))
            c.close()

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, librdkafka)
                async with ShareConsumer(bootstrap, group_id="both") as consumer:
                    consumer.subscribe(["mixed"])
                    while len(ours) + len(theirs) < 1000:
                        for record in await consumer.poll(0.2):
                            ours.append((record.partition, record.offset))
                stop.set()
        everything = ours + theirs
        assert len(everything) == len(set(everything)) == 1000
