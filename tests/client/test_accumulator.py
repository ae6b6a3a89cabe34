"""RecordAccumulator on its own: batches built in place, linger, drain, retries in order."""

from __future__ import annotations

import pytest
import trio

from trio_broker.client.accumulator import RecordAccumulator
from trio_broker.client.buffer_pool import BufferPool
from trio_broker.protocol.record_codec import iter_records
from trio_broker.protocol.records import validate_batches


def _acc(codec: str = "none", *, linger_ms: int = 50, idempotent: bool = True, batch: int = 1024):
    pool = BufferPool(16 * batch, batch)
    return RecordAccumulator(
        pool,
        batch_size=batch,
        linger_ms=linger_ms,
        compression_type=codec,
        retry_backoff_ms=100,
        max_block_ms=1000,
        idempotent=idempotent,
    )


def _leader(topic: str, partition: int) -> int:
    return partition % 2  # partitions 0, 2 on node 0; 1, 3 on node 1


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_batches_are_valid_kafka_batches(codec, autojump_clock):
    acc = _acc(codec)
    sent = [
        (
            None if i % 3 == 0 else b"k%d" % i,
            b"v%d" % i * (i % 5),
            [("h", b"%d" % i)] * (i % 2),
            1000 + i * 3 - (i % 4),
        )
        for i in range(40)
    ]
    for key, value, headers, ts in sent:
        await acc.append("t", 0, ts, key, value, headers)
    drained = acc.drain(_leader, [0], 1 << 20, trio.current_time(), producer_id=7, producer_epoch=2)
    batch = drained[0][0]
    headers = validate_batches(batch.payload)  # CRC, lengths, counts: as the broker checks
    assert headers[0].producer_id == 7 and headers[0].producer_epoch == 2
    assert headers[0].base_sequence == 0 and headers[0].compression == [
        "none",
        "gzip",
        "snappy",
        "lz4",
        "zstd",
    ].index(codec)
    records = list(iter_records(batch.payload))
    got = [(r.key, r.value, list(r.headers), r.timestamp) for r in records]
    assert got == sent[: len(got)]
    assert [r.offset for r in records] == list(range(len(got)))
    assert headers[0].max_timestamp == max(r[3] for r in sent[: len(got)])


async def test_linger_full_batches_and_drain(autojump_clock):
    acc = _acc(linger_ms=50)
    start = trio.current_time()
    await acc.append("t", 0, 1, None, b"a", None)
    await acc.append("t", 1, 1, None, b"b", None)
    ready, delay, unknown = acc.ready(_leader, start)
    assert ready == set() and delay == pytest.approx(0.05) and unknown == set()
    # A full batch is ready at once (a second one exists behind it).
    for _ in range(20):
        await acc.append("t", 2, 1, None, b"x" * 100, None)
    ready, _, _ = acc.ready(_leader, trio.current_time())
    assert ready == {0}
    ready, _, _ = acc.ready(_leader, start + 0.05)
    assert ready == {0, 1}
    # One batch per partition per request, within max.request.size.
    drained = acc.drain(_leader, [0, 1], 1 << 20, start + 0.05)
    assert sorted((b.partition, b.base_sequence) for bs in drained.values() for b in bs) == [
        (0, 0),
        (1, 0),
        (2, 0),
    ]
    small = acc.drain(_leader, [0], 10, start + 0.05)  # the first batch goes even if larger
    assert [b.partition for b in small[0]] == [2]
    assert acc.ready(lambda t, p: None, start)[2] == {"t"}  # unknown leaders are reported


async def test_retries_go_back_in_sequence_order_and_alone(autojump_clock):
    acc = _acc(linger_ms=0, batch=256)
    for i in range(6):
        await acc.append("t", 0, 1, None, b"%d" % i * 100, None)
    now = trio.current_time()
    first = [acc.drain(_leader, [0], 1 << 20, now)[0][0] for _ in range(3)]
    assert [b.base_sequence for b in first] == [0, 1, 2]  # one record per batch
    assert acc.in_flight[("t", 0)] == 3
    # All three fail (a cut connection): back to the front, lowest sequence first.
    for batch in reversed(first):
        acc.sent_done(batch)
        acc.reenqueue(batch, now)
    assert [b.base_sequence for b in acc.batches[("t", 0)]] == [0, 1, 2, None, None, None]
    # After the backoff the first retry goes, and nothing else until it is answered.
    later = now + 0.1
    assert acc.drain(_leader, [0], 1 << 20, later)[0] == [first[0]]
    assert acc.drain(_leader, [0], 1 << 20, later) == {}
    acc.sent_done(first[0])
    acc.complete(first[0], 0, -1)
    assert acc.drain(_leader, [0], 1 << 20, later)[0] == [first[1]]
    assert first[0].finished and acc.pool.available_memory < acc.pool.total_memory
    acc.abort_all(RuntimeError("closed"))
    assert acc.pool.available_memory == acc.pool.total_memory
