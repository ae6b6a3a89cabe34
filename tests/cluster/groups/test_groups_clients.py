"""Consumer groups with more real clients: aiokafka groups, and exactly-once across a rebalance.

The exactly-once tests keep a ledger of records that were processed *and* whose offsets the
broker accepted. A record counted twice means the broker accepted a commit it should have
refused, or handed a partition out from an offset older than the last accepted commit; a
record never counted means an accepted commit skipped past records nobody processed.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from grouptest_helpers import create_topic


def produce_numbered(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    """Values b"0" .. b"count-1", record i on partition i % partitions."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        p.produce(topic, value=b"%d" % i, partition=i % partitions)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(20) == 0


# -- aiokafka ------------------------------------------------------------------------------


def _aio_consumer(bootstrap: str, group: str, **extra):
    from aiokafka import AIOKafkaConsumer

    conf = dict(
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=10000,
        heartbeat_interval_ms=200,
    )
    conf.update(extra)
    return AIOKafkaConsumer(**conf)


async def _until(consumers, done, limit_s: float = 30.0, sink: list | None = None) -> None:
    """Drive every consumer's getmany() until `done()`; records fetched go to `sink`."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        for c in consumers:
            batches = await c.getmany(timeout_ms=50)
            for records in batches.values():
                if sink is None:
                    raise AssertionError(f"unexpected records: {records[:3]}")
                sink.extend(records)
        if done():
            return
    raise AssertionError("condition not reached")


def _parts(c) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in c.assignment()}


def test_aiokafka_group_rebalance_commit_and_resume(broker):
    from aiokafka.structs import TopicPartition as ATP

    create_topic(broker.bootstrap, "aio", 4)
    every = {("aio", p) for p in range(4)}

    async def scenario() -> None:
        a = _aio_consumer(broker.bootstrap, "aio-g")
        b = _aio_consumer(broker.bootstrap, "aio-g")
        a.subscribe(["aio"])
        b.subscribe(["aio"])
        await a.start()
        await b.start()
        try:
            await _until([a, b], lambda: [len(a.assignment()), len(b.assignment())] == [2, 2])
            assert _parts(a) | _parts(b) == every
            assert not _parts(a) & _parts(b)
            await b.stop()  # sends LeaveGroup: the survivor takes everything
            await _until([a], lambda: len(a.assignment()) == 4)
            assert _parts(a) == every

            # 10 records per partition; consume them all and commit synchronously.
            await asyncio.to_thread(produce_numbered, broker.bootstrap, "aio", 4, 40)
            seen: list = []
            await _until([a], lambda: len(seen) == 40, sink=seen)
            assert sorted(int(r.value) for r in seen) == list(range(40))
            await a.commit()
            for p in range(4):
                assert await a.committed(ATP("aio", p)) == 10
            # An explicit commit of one partition moves only that one.
            await a.commit({ATP("aio", 3): 7})
            assert [await a.committed(ATP("aio", p)) for p in range(4)] == [10, 10, 10, 7]
        finally:
            await a.stop()

        # A new consumer in the group resumes from the committed offsets: partition 3
        # replays its last 3 records, then only the new records follow.
        await asyncio.to_thread(produce_numbered, broker.bootstrap, "aio", 4, 4)
        c = _aio_consumer(broker.bootstrap, "aio-g")
        c.subscribe(["aio"])
        await c.start()
        try:
            again: list = []
            await _until([c], lambda: len(c.assignment()) == 4, sink=again)
            for p in range(4):
                assert await c.committed(ATP("aio", p)) == (7 if p == 3 else 10)
            await _until([c], lambda: len(again) >= 7, sink=again)
            got = sorted((r.partition, r.offset, int(r.value)) for r in again)
            # produce_numbered restarts its values at 0: b"0".."3" land at offset 10.
            assert got == [(0, 10, 0), (1, 10, 1), (2, 10, 2)] + [
                (3, 7, 31),
                (3, 8, 35),
                (3, 9, 39),
                (3, 10, 3),
            ]
        finally:
            await c.stop()

    asyncio.run(scenario())


def test_aiokafka_static_member_restart_keeps_partitions(broker):
    from aiokafka.abc import ConsumerRebalanceListener

    create_topic(broker.bootstrap, "aio-static", 4)

    class Recorder(ConsumerRebalanceListener):
        def __init__(self) -> None:
            self.revoked: list = []

        async def on_partitions_revoked(self, revoked) -> None:
            self.revoked.extend(revoked)

        async def on_partitions_assigned(self, assigned) -> None:
            pass

    async def scenario() -> None:
        ra, rb = Recorder(), Recorder()
        a = _aio_consumer(broker.bootstrap, "aio-st", group_instance_id="a")
        b = _aio_consumer(broker.bootstrap, "aio-st", group_instance_id="b")
        a.subscribe(["aio-static"], listener=ra)
        b.subscribe(["aio-static"], listener=rb)
        await a.start()
        await b.start()
        try:
            await _until([a, b], lambda: [len(a.assignment()), len(b.assignment())] == [2, 2])
            a_before, b_before = _parts(a), _parts(b)
            rb.revoked.clear()  # the first rebalances are not what this test is about
            await a.stop()  # a static member sends no LeaveGroup
            a = _aio_consumer(broker.bootstrap, "aio-st", group_instance_id="a")
            a.subscribe(["aio-static"])
            await a.start()
            await _until([a, b], lambda: len(a.assignment()) == 2)
            # A few more heartbeats of b's: no rebalance reaches it.
            for _ in range(10):
                await b.getmany(timeout_ms=50)
            assert _parts(a) == a_before
            assert _parts(b) == b_before
            assert rb.revoked == []
        finally:
            await a.stop()
            await b.stop()

    asyncio.run(scenario())


# -- exactly once across a rebalance ---------------------------------------------------------


class Ledger:
    """Per value, how many times it was processed and then committed."""

    def __init__(self) -> None:
        self.committed: collections.Counter[int] = collections.Counter()
        self.by_member: collections.Counter[int] = collections.Counter()
        self.failed_commits = 0
        self.revoke_commits = 0
        self._total = 0  # kept apart so that other threads can read it while one settles

    def settle(self, member: int, pending: dict[int, tuple[int, list[int]]], ok: bool) -> None:
        """A commit of `pending` (partition -> (next offset, values)) came back; empty it."""
        if not ok:
            # Not counted: the records come again from the committed offset after the rebalance.
            self.failed_commits += 1
        for _, values in pending.values():
            if ok:
                self.committed.update(values)
                self.by_member[member] += len(values)
                self._total += len(values)
        pending.clear()

    def total(self) -> int:
        return self._total

    def check(self, count: int) -> None:
        duplicates = {v: n for v, n in self.committed.items() if n > 1}
        missing = set(range(count)) - set(self.committed)
        assert not duplicates, f"processed and committed more than once: {duplicates}"
        assert not missing, f"never committed: {sorted(missing)[:20]} ({len(missing)})"


def test_confluent_exactly_once_across_rebalance(broker):
    count, topic = 3000, "eo"
    create_topic(broker.bootstrap, topic, 6)
    ledger = Ledger()
    # Per member: partition -> (next offset, values processed since the last commit).
    pending: list[dict[int, tuple[int, list[int]]]] = [{}, {}, {}]

    def commit(i: int, c: Consumer) -> bool:
        if not pending[i]:
            return True
        offsets = [TopicPartition(topic, p, nxt) for p, (nxt, _) in pending[i].items()]
        try:
            results = c.commit(offsets=offsets, asynchronous=False)
            ok = all(tp.error is None for tp in results)
        except KafkaException:
            ok = False
        ledger.settle(i, pending[i], ok)
        return ok

    def on_revoke(i: int):
        def callback(c: Consumer, partitions: list) -> None:
            if pending[i]:
                ledger.revoke_commits += 1
            commit(i, c)

        return callback

    members: list[Consumer | None] = []
    for i in range(3):
        c = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "eo-g",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 200,
            }
        )
        c.subscribe([topic], on_revoke=on_revoke(i))
        members.append(c)

    deadline = time.monotonic() + 30
    while [len(c.assignment()) for c in members] != [2, 2, 2]:
        assert time.monotonic() < deadline, "no 2/2/2 assignment"
        for c in members:
            assert c.poll(0.05) is None
    produce_numbered(broker.bootstrap, topic, 6, count)

    batches = [0, 0, 0]
    closed_at: int | None = None
    deadline = time.monotonic() + 40
    while ledger.total() < count or any(pending):
        assert time.monotonic() < deadline, f"stuck at {ledger.total()} of {count}"
        for i, c in enumerate(members):
            if c is None:
                continue
            for m in c.consume(num_messages=20, timeout=0.05):
                assert m.error() is None, m.error()
                p = m.partition()
                _, values = pending[i].get(p, (0, []))
                values.append(int(m.value()))
                pending[i][p] = (m.offset() + 1, values)
            batches[i] += 1
            # Commit every third batch, so that a revocation usually finds work to commit.
            if batches[i] % 3 == 0:
                commit(i, c)
        first = members[0]
        if closed_at is None and first is not None and ledger.total() >= count // 3 and pending[0]:
            closed_at = ledger.total()
            first.close()  # on_revoke commits its pending records, then LeaveGroup
            members[0] = None

    ledger.check(count)
    assert closed_at is not None and closed_at < count
    assert ledger.revoke_commits >= 1
    assert ledger.by_member[0] > 0 and ledger.by_member[1] > 0 and ledger.by_member[2] > 0
    survivors = [c for c in members if c is not None]
    assert sorted(len(c.assignment()) for c in survivors) == [3, 3]
    committed = survivors[0].committed([TopicPartition(topic, p) for p in range(6)], timeout=10)
    assert [tp.offset for tp in committed] == [count // 6] * 6
    for c in survivors:
        c.close()


def test_kafka_python_exactly_once_across_rebalance(broker):
    """kafka-python 3.0.12 needs one thread per consumer and polls that outlast a rebalance.

    Its poll() leaves an unfinished JoinGroup/SyncGroup running when its timeout passes and
    then either sends a new JoinGroup (a rebalance storm when members take turns on one
    thread) or, after a metadata-triggered rejoin, never applies the assignment it got.
    Knowing the topic's partitions before subscribing avoids the metadata-triggered rejoin.
    """
    from kafka import AsyncConsumerRebalanceListener, KafkaConsumer
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTP

    count, topic = 1500, "eo-kp"
    create_topic(broker.bootstrap, topic, 6)
    ledger = Ledger()
    lock = threading.Lock()
    # Each member's pending records are touched only by its own thread, or by its
    # listener while that thread is inside poll() or close().
    pending: list[dict[int, tuple[int, list[int]]]] = [{}, {}, {}]
    members: list[KafkaConsumer] = []
    stop = threading.Event()
    closed = threading.Event()
    failures: list[BaseException] = []

    def offsets_of(i: int) -> dict:
        return {KTP(topic, p): OffsetAndMetadata(n, "", -1) for p, (n, _) in pending[i].items()}

    def settle(i: int, ok: bool) -> None:
        with lock:
            ledger.settle(i, pending[i], ok)

    class CommitOnRevoke(AsyncConsumerRebalanceListener):
        """kafka-python runs listeners on its IO loop, where a blocking commit() is refused."""

        def __init__(self, i: int) -> None:
            self.i = i

        async def on_partitions_revoked(self, revoked) -> None:
            if not pending[self.i]:
                return
            with lock:
                ledger.revoke_commits += 1
            try:
                await members[self.i].commit_async(offsets_of(self.i))
                settle(self.i, True)
            except KafkaError:
                settle(self.i, False)

        async def on_partitions_assigned(self, assigned) -> None:
            pass

    for i in range(3):
        c = KafkaConsumer(
            bootstrap_servers=broker.bootstrap,
            group_id="eo-kp-g",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            heartbeat_interval_ms=200,
            session_timeout_ms=6000,
        )
        assert c.partitions_for_topic(topic) == set(range(6))
        c.subscribe([topic], listener=CommitOnRevoke(i))
        members.append(c)

    def run(i: int) -> None:
        c = members[i]
        batches = 0
        try:
            while not stop.is_set():
                for tp, records in c.poll(timeout_ms=1000, max_records=20).items():
                    for r in records:
                        _, values = pending[i].get(tp.partition, (0, []))
                        values.append(int(r.value))
                        pending[i][tp.partition] = (r.offset + 1, values)
                batches += 1
                if batches % 3 == 0 and pending[i]:
                    try:
                        c.commit(offsets_of(i))
                        settle(i, True)
                    except KafkaError:  # CommitFailedError among others
                        settle(i, False)
                if i == 0 and ledger.total() >= count // 3 and pending[0]:
                    c.close()  # calls on_partitions_revoked (which commits), then LeaveGroup
                    closed.set()
                    return
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 30
        while [len(c.assignment()) for c in members] != [2, 2, 2]:
            assert time.monotonic() < deadline and not failures, "no 2/2/2 assignment"
            time.sleep(0.05)
        produce_numbered(broker.bootstrap, topic, 6, count)
        deadline = time.monotonic() + 30
        while ledger.total() < count or any(pending):
            assert time.monotonic() < deadline and not failures, f"at {ledger.total()}/{count}"
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert not failures, failures

    ledger.check(count)
    assert closed.is_set()
    assert ledger.revoke_commits >= 1
    assert ledger.by_member[0] > 0 and ledger.by_member[1] > 0 and ledger.by_member[2] > 0
    survivors = members[1:]
    assert sorted(len(c.assignment()) for c in survivors) == [3, 3]
    for p in range(6):
        assert survivors[0].committed(KTP(topic, p)) == count // 6
    for c in survivors:
        c.close()
