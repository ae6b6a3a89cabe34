"""Client benchmark: our Trio producer against aiokafka and confluent-kafka, same broker.

    .venv/bin/python benchmarks/bench_client.py [--records-100 300000] [--records-1k 100000]

One trio-broker process (benchmarks/run.py's `start_broker`) serves every client in the
same run. Each client runs in its own process and produces keyless records (100 B and
1 KiB values, acks=1, linger 5 ms, 64 KiB batches, no compression) to a fresh 4-partition
topic, then reports records/s, MB/s and its own CPU seconds per GB (`cpu_seconds` of its
process, so librdkafka's threads count too). Then each consumes the same log (the 1 KiB
records, 4 partitions assigned, from the beginning, no group).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run  # noqa: E402  (benchmarks/run.py: start_broker, cpu_seconds)

CLIENTS = ("trio-broker", "aiokafka", "confluent-kafka")
PARTITIONS = 4
LINGER_MS = 5
BATCH_BYTES = 64 * 1024


# ---------------------------------------------------------------- one client, in a child


def _produce_ours(bootstrap: str, topic: str, n: int, value: bytes) -> None:
    import trio

    from trio_broker.client import Producer

    async def main() -> None:
        async with Producer(
            bootstrap, acks=1, linger_ms=LINGER_MS, batch_size=BATCH_BYTES
        ) as producer:
            send_soon = producer.send_soon
            for _ in range(n):
                await send_soon(topic, value)
            await producer.flush()

    trio.run(main)


def _produce_aiokafka(bootstrap: str, topic: str, n: int, value: bytes) -> None:
    import asyncio

    import aiokafka

    async def main() -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks=1, linger_ms=LINGER_MS, max_batch_size=BATCH_BYTES
        )
        await producer.start()
        try:
            send = producer.send
            for _ in range(n):
                await send(topic, value)
            await producer.flush()
        finally:
            await producer.stop()

    asyncio.run(main())


def _produce_confluent(bootstrap: str, topic: str, n: int, value: bytes) -> None:
    import confluent_kafka

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": LINGER_MS,
            "batch.size": BATCH_BYTES,
            "queue.buffering.max.kbytes": 32 * 1024,
        }
    )
    produce = producer.produce
    for _ in range(n):
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(600)


def _consume_ours(bootstrap: str, topic: str, n: int) -> None:
    import trio

    from trio_broker.client import Consumer

    async def main() -> None:
        async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([(topic, p) for p in range(PARTITIONS)])
            count = 0
            while count < n:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    count += len(records)

    trio.run(main)


def _consume_aiokafka(bootstrap: str, topic: str, n: int) -> None:
    import asyncio

    import aiokafka

    async def main() -> None:
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            tps = [aiokafka.TopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            count = 0
            while count < n:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    count += len(records)
        finally:
            await consumer.stop()

    asyncio.run(main())


def _consume_confluent(bootstrap: str, topic: str, n: int) -> None:
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False}
    )
    consumer.assign(
        [
            confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
            for p in range(PARTITIONS)
        ]
    )
    count = 0
    while count < n:
        for msg in consumer.consume(10_000, timeout=1.0):
            if not msg.error():
                count += 1
    consumer.close()


_CONSUMERS = {
    "trio-broker": _consume_ours,
    "aiokafka": _consume_aiokafka,
    "confluent-kafka": _consume_confluent,
}

_PRODUCERS = {
    "trio-broker": _produce_ours,
    "aiokafka": _produce_aiokafka,
    "confluent-kafka": _produce_confluent,
}


# What each client imports, loaded before the clock starts: the figures are steady-state
# produce cost, not import time.
_IMPORTS = {
    "trio-broker": (
        "trio",
        "trio_broker.client.producer",
        "trio_broker.protocol._generated.produce_response",
        "trio_broker.protocol._generated.fetch_request",
        "trio_broker.protocol._generated.fetch_response",
    ),
    "aiokafka": ("asyncio", "aiokafka"),
    "confluent-kafka": ("confluent_kafka",),
}


def child(client: str, bootstrap: str, topic: str, n: int, size: int, consume: bool) -> None:
    import importlib

    for module in _IMPORTS[client]:
        importlib.import_module(module)
    if consume:
        importlib.import_module(
            {"trio-broker": "trio_broker.client.consumer"}.get(client, _IMPORTS[client][-1])
        )
    value = os.urandom(size)
    cpu0 = run.cpu_seconds(os.getpid())
    t0 = time.perf_counter()
    if consume:
        _CONSUMERS[client](bootstrap, topic, n)
    else:
        _PRODUCERS[client](bootstrap, topic, n, value)
    elapsed = time.perf_counter() - t0
    cpu = run.cpu_seconds(os.getpid()) - cpu0
    print(json.dumps({"elapsed": elapsed, "cpu": cpu, "n": n, "size": size}))


# ---------------------------------------------------------------- the runner


def _create_topic(bootstrap: str, topic: str) -> None:
    import trio

    from trio_broker.client.admin import Admin

    async def main() -> None:
        async with Admin(bootstrap) as admin:
            await admin.create_topics({topic: PARTITIONS})

    trio.run(main)


def measure(client: str, bootstrap: str, n: int, size: int, topic: str | None = None) -> dict:
    """Produce n records of `size` to a new topic or, given `topic`, consume them from it."""
    consume = topic is not None
    if topic is None:
        topic = f"bench-{client}-{size}-{time.monotonic_ns()}"
        _create_topic(bootstrap, topic)
    cmd = [sys.executable, __file__, "--child", client, "--bootstrap", bootstrap,
           "--topic", topic, "-n", str(n), "--size", str(size)]  # fmt: skip
    if consume:
        cmd.append("--consume")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("{"):
            result = json.loads(line)
            mb = n * size / 1e6
            return {
                "topic": topic,
                "records_s": n / result["elapsed"],
                "mb_s": mb / result["elapsed"],
                "cpu_s_per_gb": result["cpu"] / (mb / 1000),
            }
    raise RuntimeError(f"{client} failed ({out.returncode}): {out.stderr[-3000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records-100", type=int, default=300_000)
    parser.add_argument("--records-1k", type=int, default=100_000)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--child")
    parser.add_argument("--bootstrap")
    parser.add_argument("--topic")
    parser.add_argument("-n", type=int)
    parser.add_argument("--size", type=int)
    parser.add_argument("--consume", action="store_true")
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.bootstrap, args.topic, args.n, args.size, args.consume)
        return 0
    clients = args.clients.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        broker = run.start_broker(run.TRIO, Path(tmp), None)
        try:
            rows = []
            for size, n in ((100, args.records_100), (1024, args.records_1k)):
                for client in clients:
                    run.progress(f"{client}: produce {n} records of {size} B")
                    result = measure(client, broker.bootstrap, n, size)
                    rows.append((client, f"produce {size} B", result))
            # Every client consumes the same log: the 1 KiB records produced above.
            log_topic = rows[-1][2]["topic"]
            for client in clients:
                run.progress(f"{client}: consume {args.records_1k} records of 1024 B")
                result = measure(client, broker.bootstrap, args.records_1k, 1024, log_topic)
                rows.append((client, "consume 1024 B", result))
        finally:
            broker.stop()
    print(f"{'client':<16} {'workload':<15} {'records/s':>11} {'MB/s':>8} {'CPU s/GB':>9}")
    for client, what, r in rows:
        print(
            f"{client:<16} {what:<15} {r['records_s']:>11,.0f} {r['mb_s']:>8.1f} "
            f"{r['cpu_s_per_gb']:>9.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
