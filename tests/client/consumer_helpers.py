"""Shared by the consumer and admin tests: a broker in the test's own Trio loop, records
produced by confluent-kafka (in a worker thread, so the broker keeps serving), and Tansu."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import trio

import trio_broker
from trio_broker.client.admin import Admin, NewTopic

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# No initial rebalance delay, few offsets partitions: groups form at once.
FAST_GROUPS = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"}

# partition, offset, key, value, headers, timestamp
Row = tuple[int, int, bytes | None, bytes | None, tuple, int]


@contextlib.asynccontextmanager
async def broker(tmp_path: Path, **overrides: str) -> AsyncIterator[str]:
    config = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data")}
    config.update(FAST_GROUPS)
    config.update(overrides)
    async with trio_broker.open_broker(config) as bootstrap:
        yield bootstrap


async def create_topic(bootstrap: str, name: str, partitions: int, **configs: str) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic(name, partitions, 1, configs)])


def _produce(bootstrap: str, topic: str, partitions: int, count: int, codec: str) -> list[Row]:
    import confluent_kafka

    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5}
    )
    sent: dict[bytes, tuple[int, int]] = {}

    def delivered(err, msg) -> None:  # noqa: ANN001
        assert err is None, err
        sent[msg.value()] = (msg.partition(), msg.offset())

    rows = []
    base = 1_700_000_000_000
    for i in range(count):
        key = None if i % 7 == 3 else b"key-%d" % i
        value = b"%s-%d-" % (codec.encode(), i) + bytes(range(256)) * (i % 3)
        headers = [("h", b"%d" % i), ("empty", b"")] if i % 2 else []
        partition = i % partitions
        producer.produce(topic, value=value, key=key, headers=headers, partition=partition,
                         timestamp=base + i, on_delivery=delivered)  # fmt: skip
        rows.append((partition, key, value, tuple(headers), base + i))
        if i % 100 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert all(sent[v][0] == p for p, _, v, _, _ in rows)
    return sorted((p, sent[v][1], k, v, h, ts) for p, k, v, h, ts in rows)


async def produce_confluent(
    bootstrap: str, topic: str, partitions: int, count: int, codec: str = "none"
) -> list[Row]:
    """Produce `count` records (keys, headers, timestamps) and return them with their offsets."""
    return await trio.to_thread.run_sync(_produce, bootstrap, topic, partitions, count, codec)


def tansu_binary() -> Path | None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import run  # noqa: PLC0415
    finally:
        sys.path.pop(0)
    return run.tansu_binary()


def start_tansu(workdir: Path):  # noqa: ANN201
    """Tansu on a free port, as benchmarks/run.py starts it; `.stop()` it."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import run  # noqa: PLC0415
    finally:
        sys.path.pop(0)
    return run.start_broker(run.TANSU, workdir, run.tansu_binary())


def client_tasks() -> list[str]:
    """The names of the tasks alive in this Trio run that run client code (not the broker's)."""
    found = []

    def walk(task) -> None:  # noqa: ANN001
        if "trio_broker.client" in task.name or "/trio_broker/client/" in str(
            getattr(task.coro, "cr_code", None)
        ):
            found.append(task.name)
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child)

    walk(trio.lowlevel.current_root_task())
    return found
