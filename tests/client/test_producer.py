"""The producer against a real trio-broker, read back by confluent-kafka and kafka-python."""

from __future__ import annotations

from contextlib import asynccontextmanager

import confluent_kafka
import pytest
import trio
from client_helpers import create_topic, read_confluent, read_kafka_python
from client_proxy import start_proxy

import trio_broker
from trio_broker.client import Producer
from trio_broker.client.config import ProducerConfig
from trio_broker.client.errors import BufferExhaustedError, KafkaError, KafkaTimeoutError
from trio_broker.client.producer import RecordMetadata
from trio_broker.errors import ErrorCode
from trio_broker.testing import free_port


async def _until(predicate, timeout_s: float = 10) -> None:
    with trio.fail_after(timeout_s):
        while not predicate():
            await trio.sleep(0.001)


CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _records(n: int):
    """Keys (some null), values (one null), headers (some null values), explicit timestamps."""
    out = []
    for i in range(n):
        key = None if i % 5 == 0 else f"key-{i % 13}".encode()
        value = None if i == 7 else (f"value-{i}-".encode() * (1 + i % 4))
        headers = [] if i % 3 else [("h1", f"v{i}".encode()), ("h2", None), ("ünï", b"\x00\xff")]
        out.append((key, value, headers, 1_700_000_000_000 + i * 17 - (i % 3) * 5))
    return out


@pytest.mark.parametrize("codec", CODECS)
async def test_every_codec_reads_back_byte_for_byte(kafka_broker, codec):
    topic = f"codec-{codec}"
    await create_topic(kafka_broker.bootstrap, topic, 3)
    records = _records(300)
    async with Producer(kafka_broker.bootstrap, compression_type=codec, batch_size=4096) as p:
        handles = [
            await p.send_soon(topic, value, key=key, headers=headers, timestamp_ms=ts)
            for key, value, headers, ts in records
        ]
        await p.flush()
        metas = [await h.wait() for h in handles]
    assert all(isinstance(m, RecordMetadata) and m.topic == topic for m in metas)
    # Offsets are dense per partition and in send order.
    for partition in {m.partition for m in metas}:
        offsets = [m.offset for m in metas if m.partition == partition]
        assert offsets == list(range(len(offsets)))
    expected = sorted(
        (m.partition, m.offset, key, value, tuple(headers), ts)
        for m, (key, value, headers, ts) in zip(metas, records, strict=True)
    )
    assert [m.timestamp for m in metas] == [r[3] for r in records]
    confluent = await trio.to_thread.run_sync(
        read_confluent, kafka_broker.bootstrap, topic, 3, len(records)
    )
    assert confluent == expected
    expected_kp = [
        (p, o, k, v, tuple((hk, hv) for hk, hv in h), ts) for p, o, k, v, h, ts in expected
    ]
    kp = await trio.to_thread.run_sync(
        read_kafka_python, kafka_broker.bootstrap, topic, 3, len(records)
    )
    assert kp == expected_kp


async def test_keys_land_where_confluent_murmur2_random_puts_them(kafka_broker):
    topic = "keyed"
    await create_topic(kafka_broker.bootstrap, topic, 7)
    keys = [f"user-{i}".encode() for i in range(60)] + [b"", b"a", b"ab", b"abc", b"\xff" * 9]

    def confluent_partitions() -> list[int]:
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": kafka_broker.bootstrap, "partitioner": "murmur2_random"}
        )
        got: dict[bytes, int] = {}
        for key in keys:
            producer.produce(
                topic,
                b"c",
                key=key,
                on_delivery=lambda err, msg: got.__setitem__(msg.key(), msg.partition()),
            )
        producer.flush(30)
        return [got[key] for key in keys]

    theirs = await trio.to_thread.run_sync(confluent_partitions)
    async with Producer(kafka_broker.bootstrap) as p:
        ours = [(await p.send(topic, b"o", key=key)).partition for key in keys]
    assert ours == theirs
    assert len(set(ours)) == 7  # the keys really spread


async def test_keyless_records_stick_to_a_partition_per_batch(kafka_broker):
    topic = "sticky"
    await create_topic(kafka_broker.bootstrap, topic, 4)
    async with Producer(kafka_broker.bootstrap, batch_size=1024, linger_ms=1000) as p:
        handles = [await p.send_soon(topic, b"x" * 100) for _ in range(40)]
        await p.flush()
        parts = [(await h.wait()).partition for h in handles]
    # Runs of one partition, about a batch (9 records of ~110 bytes) long each.
    runs = [1]
    for a, b in zip(parts, parts[1:], strict=False):
        if a == b:
            runs[-1] += 1
        else:
            runs.append(1)
    assert len(runs) >= 4 and max(runs) <= 10
    assert all(parts[i] != parts[i + 1] for i in range(len(parts) - 1) if parts[i] != parts[i + 1])


async def test_config_by_underscore_and_dotted_names():
    cfg = ProducerConfig.build(
        {"linger.ms": 7, "compression.type": "LZ4", "acks": "1"},
        bootstrap_servers="h:1",
        batch_size=5000,
    )
    assert (cfg.linger_ms, cfg.compression_type, cfg.acks, cfg.batch_size) == (7, "lz4", 1, 5000)
    assert cfg.enable_idempotence is False  # acks=1 turns the default off, as in Kafka
    assert ProducerConfig.build(bootstrap_servers="h:1").enable_idempotence is True
    with pytest.raises(ValueError, match="lingr_ms"):
        ProducerConfig.build(bootstrap_servers="h:1", lingr_ms=5)
    with pytest.raises(ValueError, match="acks='all'"):
        ProducerConfig.build(bootstrap_servers="h:1", acks=1, enable_idempotence=True)


@pytest.mark.parametrize("acks", [0, 1, "all"])
async def test_acks(kafka_broker, acks):
    topic = f"acks-{acks}"
    await create_topic(kafka_broker.bootstrap, topic, 1)
    async with Producer(kafka_broker.bootstrap, acks=acks, linger_ms=0) as p:
        metas = [await p.send(topic, f"v{i}".encode()) for i in range(20)]
    if acks == 0:
        assert {m.offset for m in metas} == {-1}
    else:
        assert [m.offset for m in metas] == list(range(20))
    rows = await trio.to_thread.run_sync(read_confluent, kafka_broker.bootstrap, topic, 1, 20)
    assert [r[3] for r in rows] == [f"v{i}".encode() for i in range(20)]


async def test_broker_errors_are_exceptions_naming_the_kafka_error(kafka_broker):
    await create_topic(kafka_broker.bootstrap, "small", 2, **{"max.message.bytes": "2000"})
    async with Producer(kafka_broker.bootstrap, linger_ms=0) as p:
        with pytest.raises(KafkaError, match="MESSAGE_TOO_LARGE") as info:
            await p.send("small", b"x" * 5000)
        assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
        with pytest.raises(KafkaError, match="UNKNOWN_TOPIC_OR_PARTITION"):
            await p.send("small", b"x", partition=2)
        # The producer carries on after a failed batch.
        assert (await p.send("small", b"ok", partition=1)).offset == 0


async def test_buffer_memory_blocks_fifo_then_times_out_with_a_stopped_broker(kafka_broker):
    topic = "pool"
    await create_topic(kafka_broker.bootstrap, topic, 1)
    batch = 1024
    async with Producer(
        kafka_broker.bootstrap,
        batch_size=batch,
        buffer_memory=3 * batch,
        max_block_ms=500,
        linger_ms=0,
        request_timeout_ms=2000,
        reconnect_backoff_ms=20,
        reconnect_backoff_max_ms=100,
    ) as p:
        assert (await p.send(topic, b"first")).offset == 0
        pool = p.pool
        assert pool.available_memory == 3 * batch
        await trio.to_thread.run_sync(kafka_broker.stop)
        # Three batches (a 700-byte record fills one) take all of buffer.memory.
        handles = [await p.send_soon(topic, bytes([i]) * 700) for i in range(3)]
        assert pool.available_memory == 0
        order: list[str] = []

        async def blocked(name: str, task_status=trio.TASK_STATUS_IGNORED):
            task_status.started()
            try:
                handles.append(await p.send_soon(topic, name.encode() * 700))
                order.append(name)
            except BufferExhaustedError as exc:
                order.append(f"{name} timed out: {exc}")

        async with trio.open_nursery() as nursery:
            await nursery.start(blocked, "a")
            await _until(lambda: pool.queued == 1)
            await trio.sleep(0.1)  # b's deadline comes clearly after a's
            await nursery.start(blocked, "b")
            await _until(lambda: pool.queued == 2)
        assert [o.split(":")[0] for o in order] == ["a timed out", "b timed out"]
        assert "max blocking time 500 ms" in order[0]
        assert pool.queued == 0 and pool.available_memory == 0
        # The broker comes back: the held batches are delivered and memory returns.
        await trio.to_thread.run_sync(kafka_broker.restart)
        waiters: list[str] = []

        async def later(name: str, task_status=trio.TASK_STATUS_IGNORED):
            task_status.started()
            handles.append(await p.send_soon(topic, name.encode() * 700))
            waiters.append(name)

        async with trio.open_nursery() as nursery:
            for i, name in enumerate(("c", "d", "e", "f")):
                await nursery.start(later, name)
                await _until(lambda i=i: pool.queued == i + 1 or waiters)
        assert waiters == ["c", "d", "e", "f"]  # first come, first served
        await p.flush()
        offsets = [(await h.wait()).offset for h in handles]
        assert offsets == list(range(1, 8))
        assert pool.available_memory == 3 * batch
        # Buffers are per batch and reused from the free list, never one per record.
        created = pool.buffers_created
        for i in range(200):
            await p.send_soon(topic, b"%03d" % i)
        await p.flush()
        assert pool.buffers_created - created <= 3
        assert pool.available_memory == 3 * batch


async def test_memory_returns_after_failed_batches(kafka_broker):
    topic = "failing"
    await create_topic(kafka_broker.bootstrap, topic, 1)
    async with Producer(
        kafka_broker.bootstrap,
        delivery_timeout_ms=800,
        request_timeout_ms=300,
        linger_ms=0,
        reconnect_backoff_ms=20,
        batch_size=1024,
        buffer_memory=8 * 1024,
    ) as p:
        await p.send(topic, b"x")
        await trio.to_thread.run_sync(kafka_broker.stop)
        handles = [await p.send_soon(topic, b"y" * 600) for _ in range(5)]
        assert p.pool.available_memory == 3 * 1024
        for h in handles:
            with pytest.raises(KafkaTimeoutError, match="delivery.timeout.ms=800"):
                await h.wait()
        assert p.pool.available_memory == 8 * 1024
        assert not p.accumulator.incomplete


def _value(i: int) -> bytes:
    return b"%06d" % i + b"." * 94


@asynccontextmanager
async def _broker_behind_proxy(tmp_path, nursery):
    """A broker that advertises a proxy's address, so every client connection goes through it."""
    proxy = await start_proxy(nursery, ("127.0.0.1", 0))
    port = free_port()
    config = {
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.address[1]}",
        "log.dirs": str(tmp_path / "data"),
    }
    proxy.target = ("127.0.0.1", port)
    async with trio_broker.open_broker(config):
        yield proxy, f"127.0.0.1:{proxy.address[1]}", f"127.0.0.1:{port}"


async def test_idempotence_across_cut_connections_no_duplicate_no_gap(tmp_path, nursery):
    async with _broker_behind_proxy(tmp_path, nursery) as (proxy, where, direct):
        await create_topic(direct, "idem", 2)
        n = 4000
        async with Producer(
            where, batch_size=2048, linger_ms=2, reconnect_backoff_ms=10, retry_backoff_ms=10
        ) as p:
            assert p.config.enable_idempotence

            async def cutter():
                for _ in range(6):
                    # Cut in the middle of a request: the broker sees it torn.
                    proxy.cut_at_bytes_up = proxy.bytes_up + 30_011
                    while proxy.cut_at_bytes_up != float("inf"):
                        await trio.sleep(0.001)
                    await trio.sleep(0.02)

            handles = []
            async with trio.open_nursery() as inner:
                inner.start_soon(cutter)
                for i in range(n):
                    handles.append(await p.send_soon("idem", _value(i), partition=i % 2))
                    if i % 200 == 0:
                        await trio.sleep(0.005)
                await p.flush()
                inner.cancel_scope.cancel()
            metas = [await h.wait() for h in handles]
        assert proxy.connections >= 5  # the cuts happened and the producer reconnected
        for part in (0, 1):
            assert [m.offset for m in metas if m.partition == part] == list(range(n // 2))
        rows = await trio.to_thread.run_sync(read_confluent, direct, "idem", 2, n)
        for part in (0, 1):
            values = [r[3] for r in rows if r[0] == part]
            offsets = [r[1] for r in rows if r[0] == part]
            assert offsets == list(range(n // 2))
            assert values == [_value(i) for i in range(part, n, 2)]


async def test_cancelling_the_nursery_closes_the_producer(tmp_path, nursery):
    async with _broker_behind_proxy(tmp_path, nursery) as (proxy, where, _direct):
        producer = Producer(where, linger_ms=0, batch_size=1024)
        started = trio.Event()
        handles = []

        async def run():
            async with producer as p:
                await p.send("cancel-me", b"first")
                proxy.stall = True  # nothing gets acknowledged from here on
                for _ in range(50):
                    handles.append(await p.send_soon("cancel-me", b"z" * 500))
                started.set()
                await trio.sleep_forever()

        async with trio.open_nursery() as scope_nursery:
            scope_nursery.start_soon(run)
            await started.wait()
            assert producer.pool.available_memory < producer.config.buffer_memory
            scope_nursery.cancel_scope.cancel()
        assert producer.pool.available_memory == producer.config.buffer_memory
        assert not producer.accumulator.incomplete
        assert producer.client._nursery is None  # its tasks are gone with it
        for h in handles:
            with pytest.raises(KafkaError, match="closed"):
                await h.wait()
        proxy.resume()


async def test_unknown_topic_refreshes_metadata_and_retries(kafka_broker):
    """UNKNOWN_TOPIC_OR_PARTITION from the broker (the topic was deleted under the producer)
    asks for fresh metadata; auto-creation brings the topic back and the retry lands."""
    from trio_broker.client import Admin

    async with Producer(kafka_broker.bootstrap, linger_ms=0, retry_backoff_ms=20) as p:
        assert (await p.send("vanishing", b"one")).offset == 0
        async with Admin(kafka_broker.bootstrap) as admin:
            await admin.delete_topics(["vanishing"])
        seen = p.metadata.version
        meta = await p.send("vanishing", b"two")
        assert (meta.partition, meta.offset) == (0, 0)
        assert p.metadata.version > seen
    rows = await trio.to_thread.run_sync(read_confluent, kafka_broker.bootstrap, "vanishing", 1, 1)
    assert [r[3] for r in rows] == [b"two"]


async def test_a_rejected_batch_does_not_break_its_partitions_sequence(kafka_broker):
    """With idempotence, a batch the broker rejects for good (MESSAGE_TOO_LARGE) leaves a
    hole in the sequence numbers; the batches after it, some already in flight, are
    renumbered and land, in order, with no gap in the offsets."""
    await create_topic(kafka_broker.bootstrap, "holes", 1, **{"max.message.bytes": "3000"})
    # 5100-byte batches: a 5000-byte record leaves no room for a 100-byte one.
    async with Producer(kafka_broker.bootstrap, linger_ms=0, batch_size=5100) as p:
        assert (await p.send("holes", b"before")).offset == 0
        handles = []
        for i in range(12):
            value = b"x" * 5000 if i in (2, 7) else (b"small-%d" % i).ljust(100, b".")
            handles.append(await p.send_soon("holes", value))
            await trio.sleep(0)  # let the sender put each in its own request
        results = []
        for i, h in enumerate(handles):
            try:
                results.append((await h.wait()).offset)
            except KafkaError as exc:
                assert exc.code == ErrorCode.MESSAGE_TOO_LARGE, (i, exc)
                results.append("too large")
    assert results[2] == results[7] == "too large", results
    assert [r for r in results if r != "too large"] == list(range(1, 11)), results
    rows = await trio.to_thread.run_sync(read_confluent, kafka_broker.bootstrap, "holes", 1, 11)
    assert [r[3] for r in rows] == [b"before"] + [
        (b"small-%d" % i).ljust(100, b".") for i in range(12) if i not in (2, 7)
    ]


async def test_an_error_in_the_body_propagates_unwrapped(kafka_broker):
    with pytest.raises(KafkaError, match="UNKNOWN_TOPIC_OR_PARTITION"):
        async with Producer(kafka_broker.bootstrap) as p:
            await p.send("unwrapped", b"x", partition=5)
    with pytest.raises(ZeroDivisionError):
        async with Producer(kafka_broker.bootstrap):
            1 / 0  # noqa: B018
