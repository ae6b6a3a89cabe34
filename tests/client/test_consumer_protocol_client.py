"""Our Consumer with `group_protocol="consumer"` (KIP-848) on a real in-process broker:
alone, beside a librdkafka consumer of the same protocol in one group, and through a
member leaving, checked as a user checks a group: who owns which partition, which
records came back, which offsets were committed."""

from __future__ import annotations

import time

import pytest
import trio
from consumer_helpers import broker, create_topic

from trio_broker.client import Consumer, ConsumerRebalanceListener, TopicPartition
from trio_broker.client.admin import Admin

confluent_kafka = pytest.importorskip("confluent_kafka")

KIP848 = {
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.min.heartbeat.interval.ms": "300",
}
OURS = dict(group_protocol="consumer", auto_offset_reset="earliest", enable_auto_commit=False)


def _produce_numbered(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        p.produce(topic, value=b"%d" % i, partition=i % partitions)
    assert p.flush(20) == 0


class Listener(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.assigned: list[set[TopicPartition]] = []
        self.revoked: list[set[TopicPartition]] = []

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.assigned.append(set(assigned))

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.revoked.append(set(revoked))


async def test_one_member_owns_every_partition_and_commits(tmp_path):
    async with broker(tmp_path, **KIP848) as bootstrap:
        await create_topic(bootstrap, "solo", 3)
        await trio.to_thread.run_sync(_produce_numbered, bootstrap, "solo", 3, 300)
        listener = Listener()
        async with Consumer(bootstrap, group_id="solo-g", **OURS) as c:
            c.subscribe(["solo"], listener=listener)
            seen = set()
            with trio.fail_after(60):
                async for record in c:
                    seen.add((record.partition, record.value))
                    if len(seen) == 300:
                        break
            assert seen == {(i % 3, b"%d" % i) for i in range(300)}
            assert c.assignment() == {TopicPartition("solo", p) for p in range(3)}
            assert listener.assigned == [{TopicPartition("solo", p) for p in range(3)}]
            await c.commit()
        async with Admin(bootstrap) as admin:
            offsets = await admin.list_group_offsets("solo-g")
            described = (await admin.describe_groups(["solo-g"]))["solo-g"]
        assert {tp.partition: o for tp, o in offsets.items()} == {0: 100, 1: 100, 2: 100}
        # The member left with epoch -1 on close: an empty group.
        assert not described.members


async def test_ours_and_librdkafka_share_a_group_and_one_leaves(tmp_path):
    """Four partitions for two members of two clients: two each, never one owned twice;
    when librdkafka's leaves (after committing), ours takes its partitions from its
    commits, and keeps its own throughout (no revocation of what it keeps)."""
    async with broker(tmp_path, **KIP848) as bootstrap:
        await create_topic(bootstrap, "mixed", 4)
        await trio.to_thread.run_sync(_produce_numbered, bootstrap, "mixed", 4, 400)
        theirs = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "mixed-g",
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        theirs.subscribe(["mixed"])
        their_records: set[tuple[int, bytes]] = set()
        our_records: set[tuple[int, bytes]] = set()
        listener = Listener()

        def their_owned() -> set[int]:
            return {tp.partition for tp in theirs.assignment()}

        async with Consumer(bootstrap, group_id="mixed-g", **OURS) as ours:
            ours.subscribe(["mixed"], listener=listener)

            def our_owned() -> set[int]:
                return {tp.partition for tp in ours.assignment()}

            async def poll_both(done, limit_s: float = 60.0) -> None:
                deadline = time.monotonic() + limit_s
                while not done():
                    assert time.monotonic() < deadline, (our_owned(), their_owned())
                    msg = await trio.to_thread.run_sync(theirs.poll, 0.05)
                    if msg is not None and not msg.error():
                        their_records.add((msg.partition(), msg.value()))
                    batches = await ours.getmany(timeout_ms=20)
                    for tp, records in batches.items():
                        our_records.update((tp.partition, r.value) for r in records)
                    assert not our_owned() & their_owned(), (our_owned(), their_owned())

            def read_by_owner() -> bool:
                # Each member has read all 100 records of each partition it owns.
                return all(
                    sum(1 for q, _ in got if q == p) == 100
                    for owned, got in ((our_owned(), our_records), (their_owned(), their_records))
                    for p in owned
                )

            await poll_both(
                lambda: len(our_owned()) == 2 and len(their_owned()) == 2 and read_by_owner()
            )
            assert our_owned() | their_owned() == {0, 1, 2, 3}
            assert our_records | their_records == {(i % 4, b"%d" % i) for i in range(400)}
            assert {p for p, _ in our_records} <= our_owned() | {
                tp.partition for s in listener.revoked for tp in s
            }
            kept = our_owned()
            await ours.commit()
            # Our Admin describes the group as Kafka's does (ConsumerGroupDescribe).
            async with Admin(bootstrap) as admin:
                described = (await admin.describe_groups(["mixed-g"]))["mixed-g"]
                listed = {g.group_id: g for g in await admin.list_groups()}
            assert (described.group_type, described.protocol_type) == ("consumer", "consumer")
            assert described.protocol == "uniform" and described.state == "Stable"
            assert described.group_epoch == described.assignment_epoch > 0
            by_member = {m.member_id: m for m in described.members}
            ours_described = by_member[ours.group.member_id]
            assert {tp.partition for tp in ours_described.assignment} == kept
            assert ours_described.target_assignment == ours_described.assignment
            assert ours_described.member_epoch == described.group_epoch
            assert sorted(tp.partition for m in described.members for tp in m.assignment) == [
                0,
                1,
                2,
                3,
            ]
            assert (listed["mixed-g"].group_type, listed["mixed-g"].protocol_type) == (
                "consumer",
                "consumer",
            )

            # librdkafka's member commits what it read and leaves.
            await trio.to_thread.run_sync(lambda: theirs.commit(asynchronous=False))
            await trio.to_thread.run_sync(theirs.close)
            left = {0, 1, 2, 3} - kept
            our_records.clear()
            deadline = time.monotonic() + 60
            while our_owned() != {0, 1, 2, 3}:
                assert time.monotonic() < deadline, our_owned()
                for tp, records in (await ours.getmany(timeout_ms=50)).items():
                    our_records.update((tp.partition, r.value) for r in records)
            # What it committed is not read again; what ours kept was never revoked.
            assert not our_records, f"read again after the leaver's commits: {our_records}"
            assert all(
                not (s & {TopicPartition("mixed", p) for p in kept}) for s in listener.revoked
            )
            assert listener.assigned[-1] == {TopicPartition("mixed", p) for p in left}

            await trio.to_thread.run_sync(_produce_numbered, bootstrap, "mixed", 4, 40)
            with trio.fail_after(60):
                while len(our_records) < 40:
                    for tp, records in (await ours.getmany(timeout_ms=100)).items():
                        our_records.update((tp.partition, r.value) for r in records)
            assert our_records == {(i % 4, b"%d" % i) for i in range(40)}
