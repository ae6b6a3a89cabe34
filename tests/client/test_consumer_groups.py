"""Our consumers in groups on a real in-process trio-broker: exactly once across a rebalance
with a confluent-kafka member, cooperative-sticky rebalancing, static membership.

The exactly-once test keeps a ledger of values processed *and* committed: a value counts
only once a synchronous commit covering it succeeded. A value counted twice, or never,
fails the test (the pattern of tests/cluster/groups/test_groups_clients.py).
"""

from __future__ import annotations

import collections
import threading
import time

import pytest
import trio
from consumer_helpers import broker, create_topic

from trio_broker.client import (
    CommitFailedError,
    Consumer,
    ConsumerRebalanceListener,
    TopicPartition,
)
from trio_broker.client.admin import Admin

confluent_kafka = pytest.importorskip("confluent_kafka")

FAST = dict(heartbeat_interval_ms=100, session_timeout_ms=10_000, auto_offset_reset="earliest")


class Ledger:
    def __init__(self) -> None:
        self.committed: collections.Counter[int] = collections.Counter()
        self.by_member: collections.Counter[str] = collections.Counter()
        self.failed_commits = 0
        self.lock = threading.Lock()

    def settle(self, member: str, pending: dict, ok: bool) -> None:
        with self.lock:
            if ok:
                for _, values in pending.values():
                    self.committed.update(values)
                    self.by_member[member] += len(values)
            else:
                self.failed_commits += 1  # those records come again from the committed offset
            pending.clear()

    def total(self) -> int:
        with self.lock:
            return sum(self.committed.values())

    def check(self, count: int) -> None:
        duplicates = {v: n for v, n in self.committed.items() if n > 1}
        missing = set(range(count)) - set(self.committed)
        assert not duplicates, f"processed and committed more than once: {duplicates}"
        assert not missing, f"never committed: {sorted(missing)[:20]} ({len(missing)})"


def _produce_numbered(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        p.produce(topic, value=b"%d" % i, partition=i % partitions)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(20) == 0


async def test_three_of_ours_and_confluent_consume_exactly_once_while_one_leaves(tmp_path):
    count, topic, partitions = 3000, "eo", 6
    ledger = Ledger()
    finished = trio.Event()
    async with broker(tmp_path) as bootstrap:
        await create_topic(bootstrap, topic, partitions)
        assigned: dict[str, set] = {}

        def done() -> bool:
            return ledger.total() >= count

        async def ours(name: str, leave_at: int | None) -> None:
            pending: dict[int, tuple[int, list[int]]] = {}

            async def commit(c: Consumer) -> None:
                if not pending:
                    return
                offsets = {TopicPartition(topic, p): nxt for p, (nxt, _) in pending.items()}
                try:
                    await c.commit(offsets)
                    ok = True
                except CommitFailedError:
                    ok = False
                ledger.settle(name, pending, ok)

            class Listener(ConsumerRebalanceListener):
                async def on_partitions_revoked(self, revoked) -> None:  # noqa: ANN001
                    await commit(consumer)

            async with Consumer(bootstrap, group_id="eo-g", enable_auto_commit=False,
                                partition_assignment_strategy="range", **FAST) as consumer:  # fmt: skip
                consumer.subscribe([topic], listener=Listener())
                batches = 0
                while not done():
                    for tp, records in (
                        await consumer.getmany(timeout_ms=50, max_records=20)
                    ).items():
                        _, values = pending.get(tp.partition, (0, []))
                        values.extend(int(r.value) for r in records)
                        pending[tp.partition] = (records[-1].offset + 1, values)
                    assigned[name] = consumer.assignment()
                    batches += 1
                    if batches % 3 == 0:
                        await commit(consumer)
                    if leave_at is not None and ledger.total() >= leave_at and pending:
                        break  # leaving: the revoke callback commits, then LeaveGroup
                await commit(consumer)
            assigned.pop(name, None)

        def theirs() -> None:
            pending: dict[int, tuple[int, list[int]]] = {}

            def commit(c) -> None:  # noqa: ANN001
                if not pending:
                    return
                offsets = [
                    confluent_kafka.TopicPartition(topic, p, n) for p, (n, _) in pending.items()
                ]
                try:
                    ok = all(
                        tp.error is None for tp in c.commit(offsets=offsets, asynchronous=False)
                    )
                except confluent_kafka.KafkaException:
                    ok = False
                ledger.settle("confluent", pending, ok)

            c = confluent_kafka.Consumer({
                "bootstrap.servers": bootstrap, "group.id": "eo-g", "auto.offset.reset": "earliest",
                "enable.auto.commit": False, "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 100, "partition.assignment.strategy": "range",
            })  # fmt: skip
            c.subscribe([topic], on_revoke=lambda consumer, _: commit(consumer))
            batches = 0
            deadline = time.monotonic() + 50
            while not done() and not finished.is_set() and time.monotonic() < deadline:
                for m in c.consume(num_messages=20, timeout=0.05):
                    assert m.error() is None, m.error()
                    _, values = pending.get(m.partition(), (0, []))
                    values.append(int(m.value()))
                    pending[m.partition()] = (m.offset() + 1, values)
                batches += 1
                assigned["confluent"] = {(t.topic, t.partition) for t in c.assignment()}
                if batches % 3 == 0:
                    commit(c)
            commit(c)
            c.close()

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ours, "a", count // 3)
                nursery.start_soon(ours, "b", None)
                nursery.start_soon(ours, "c", None)
                nursery.start_soon(trio.to_thread.run_sync, theirs)
                try:
                    # Everybody in, with all six partitions handed out, before any record exists.
                    while len(assigned) < 4 or sorted(len(a) for a in assigned.values()) != [
                        1,
                        1,
                        2,
                        2,
                    ]:
                        await trio.sleep(0.05)
                    assert sorted(len(a) for a in assigned.values()) == [1, 1, 2, 2]
                    await trio.to_thread.run_sync(
                        _produce_numbered, bootstrap, topic, partitions, count
                    )
                    while not done():
                        await trio.sleep(0.05)

                finally:
                    finished.set()  # the thread cannot be cancelled: it stops on this
        ledger.check(count)
        assert set(ledger.by_member) == {"a", "b", "c", "confluent"}
        assert ledger.by_member["a"] < count
        async with Admin(bootstrap) as admin:
            committed = await admin.list_group_offsets("eo-g")
        assert committed == {TopicPartition(topic, p): count // partitions for p in range(6)}


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.revoked: list[set] = []
        self.assigned: list[set] = []

    async def on_partitions_revoked(self, revoked) -> None:  # noqa: ANN001
        self.revoked.append(set(revoked))

    async def on_partitions_assigned(self, assigned) -> None:  # noqa: ANN001
        self.assigned.append(set(assigned))


async def _until(consumers, condition, limit_s: float = 20) -> None:  # noqa: ANN001
    with trio.fail_after(limit_s):
        while not condition():
            for c in consumers:
                await c.getmany(timeout_ms=20)


async def test_cooperative_sticky_moves_only_what_it_must(tmp_path):
    async with broker(tmp_path) as bootstrap:
        await create_topic(bootstrap, "coop", 6)
        conf = dict(group_id="coop-g", partition_assignment_strategy="cooperative-sticky", **FAST)
        first, second = Recorder(), Recorder()
        async with Consumer(bootstrap, **conf) as a:
            a.subscribe(["coop"], listener=first)
            await _until([a], lambda: len(a.assignment()) == 6)
            everything = a.assignment()
            async with Consumer(bootstrap, **conf) as b:
                b.subscribe(["coop"], listener=second)
                await _until([a, b], lambda: len(a.assignment()) == 3 and len(b.assignment()) == 3)
                assert a.assignment() | b.assignment() == everything
                # a gave up exactly the three b got, and was never made to revoke the rest.
                assert first.revoked == [b.assignment()]
                assert second.revoked == []
                assert set().union(*second.assigned) == b.assignment()
                assert a.group.cooperative and b.group.rebalances >= 2


async def test_static_member_restart_gets_its_partitions_back_without_a_rebalance(tmp_path):
    async with broker(tmp_path) as bootstrap:
        await create_topic(bootstrap, "st", 4)
        conf = dict(group_id="st-g", partition_assignment_strategy="range", **FAST)
        async with Consumer(bootstrap, group_instance_id="i-1", **conf) as keeper:
            keeper.subscribe(["st"])
            async with Consumer(bootstrap, group_instance_id="i-2", **conf) as leaver:
                leaver.subscribe(["st"])
                await _until(
                    [keeper, leaver],
                    lambda: len(keeper.assignment()) == 2 == len(leaver.assignment()),
                )
                before = leaver.assignment()
            rebalances = keeper.group.rebalances
            async with Admin(bootstrap) as admin:
                members = (await admin.describe_groups(["st-g"]))["st-g"].members
                # A static member sends no LeaveGroup: its place waits for it.
                assert sorted(m.group_instance_id for m in members) == ["i-1", "i-2"]
            async with Consumer(bootstrap, group_instance_id="i-2", **conf) as back:
                back.subscribe(["st"])
                await _until([keeper, back], lambda: len(back.assignment()) == 2)
                assert back.assignment() == before
                for _ in range(5):
                    await keeper.getmany(timeout_ms=50)
                assert keeper.group.rebalances == rebalances


async def test_auto_commit_on_rebalance(tmp_path):
    """The auto-commit interval is long: only the rebalance (and then leaving) commits."""
    async with broker(tmp_path) as bootstrap:
        await create_topic(bootstrap, "ar", 2)
        await trio.to_thread.run_sync(_produce_numbered, bootstrap, "ar", 2, 100)
        conf = dict(group_id="ar-g", auto_commit_interval_ms=600_000,
                    partition_assignment_strategy="range", **FAST)  # fmt: skip
        async with Admin(bootstrap) as admin, Consumer(bootstrap, **conf) as a:
            a.subscribe(["ar"])
            got = []
            with trio.fail_after(15):
                while len(got) < 100:
                    for records in (await a.getmany(timeout_ms=100)).values():
                        got.extend(records)
            assert await admin.list_group_offsets("ar-g") == {}
            async with Consumer(bootstrap, **conf) as b:
                b.subscribe(["ar"])
                await _until([a, b], lambda: len(a.assignment()) == 1 == len(b.assignment()))
                assert await admin.list_group_offsets("ar-g") == {
                    TopicPartition("ar", 0): 50,
                    TopicPartition("ar", 1): 50,
                }
                assert await b.getmany(timeout_ms=300) == {}


async def test_a_member_whose_session_expired_loses_its_partitions_and_rejoins(tmp_path, nursery):
    """The broker hears nothing for longer than the session (a stalled network): the
    member's next heartbeat gets UNKNOWN_MEMBER_ID, on_partitions_lost runs (not
    on_partitions_revoked: a commit would be refused), and the member joins again."""
    from client_proxy import start_proxy

    import trio_broker
    from trio_broker.testing import free_port

    class Lost(Recorder):
        def __init__(self) -> None:
            super().__init__()
            self.lost: list[set] = []

        async def on_partitions_lost(self, lost) -> None:  # noqa: ANN001
            self.lost.append(set(lost))

    proxy = await start_proxy(nursery, ("127.0.0.1", 0))
    port = free_port()
    proxy.target = ("127.0.0.1", port)
    config = {
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.address[1]}",
        "log.dirs": str(tmp_path / "data"),
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "3",
        "group.min.session.timeout.ms": "500",
    }
    async with trio_broker.open_broker(config) as bootstrap:
        await create_topic(bootstrap, "lost", 2)
        listener = Lost()
        async with Consumer(f"127.0.0.1:{proxy.address[1]}", group_id="lost-g",
                            session_timeout_ms=1000, heartbeat_interval_ms=100,
                            request_timeout_ms=700, reconnect_backoff_ms=10,
                            auto_offset_reset="earliest") as c:  # fmt: skip
            c.subscribe(["lost"], listener=listener)
            await _until([c], lambda: len(c.assignment()) == 2)
            first_member = c.group.member_id
            proxy.stall = True
            await trio.sleep(2.5)  # the broker's session timer (1 s) expires meanwhile
            proxy.resume()
            proxy.cut()
            await _until([c], lambda: bool(listener.lost) and len(c.assignment()) == 2)
            assert listener.lost == [{TopicPartition("lost", 0), TopicPartition("lost", 1)}]
            assert listener.revoked == []
            assert c.group.member_id != first_member
            assert len(listener.assigned) == 2
