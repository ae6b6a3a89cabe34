"""Transactions benchmark: transactional produce beside idempotent produce, and
read_committed consume beside read_uncommitted, on one trio-broker process.

    .venv/bin/python benchmarks/bench_txn.py [--smoke] [--records 200000] [--record-size 1024]
        [--txn-records 1000] [--abort-every 10]

produce   one confluent-kafka producer writes --records records of --record-size bytes to a
          1-partition topic: idempotent (acks=all), then transactional with --txn-records
          records per transaction, committed one after the other (one in --abort-every
          aborted, flushed first so its records are in the log); MB/s of records offered
consume   one consumer reads the transactional topic from the start to its end, with
          isolation.level read_uncommitted and read_committed (which skips the aborted
          transactions by the fetch's aborted list); MB/s of the log's bytes read

Progress goes to stderr, one table to stdout. No assertion on speed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402  (benchmarks/run.py: broker processes, progress)

from trio_broker.perf import ensure_topic  # noqa: E402


def _produce(bootstrap: str, topic: str, n: int, size: int, txn: int, abort_every: int) -> float:
    from confluent_kafka import Producer

    config = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "batch.size": 1 << 20,
        "enable.idempotence": True,
    }
    if txn:
        config["transactional.id"] = f"bench-{topic}"
    producer = Producer(config)
    value = b"x" * size
    if txn:
        producer.init_transactions(30)
    started = time.perf_counter()
    sent = 0
    number = 0
    while sent < n:
        if txn:
            producer.begin_transaction()
        batch = min(txn or n, n - sent)
        for _ in range(batch):
            while True:
                try:
                    producer.produce(topic, value=value, partition=0)
                    break
                except BufferError:
                    producer.poll(0.01)
        sent += batch
        if txn:
            number += 1
            if abort_every and number % abort_every == 0:
                producer.flush(60)
                producer.abort_transaction(60)
            else:
                producer.commit_transaction(60)
    producer.flush(60)
    return n * size / (time.perf_counter() - started) / 1e6


def _consume(bootstrap: str, topic: str, isolation: str) -> tuple[float, int]:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{isolation}",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 << 20,
            "max.partition.fetch.bytes": 8 << 20,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    started = time.perf_counter()
    count = size = 0
    while True:
        msgs = consumer.consume(10000, 1.0)
        done = False
        for msg in msgs:
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    done = True
                    continue
                raise RuntimeError(msg.error())
            count += 1
            size += len(msg.value())
        if done:
            break
    elapsed = time.perf_counter() - started
    consumer.close()
    return size / elapsed / 1e6, count


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a quick run (few records)")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--txn-records", type=int, default=1000)
    parser.add_argument("--abort-every", type=int, default=10)
    args = parser.parse_args(argv)
    if args.smoke:
        args.records, args.abort_every = 5000, 2
    workdir = Path(tempfile.mkdtemp(prefix="bench-txn-"))
    broker = bench.start_broker(
        bench.TRIO,
        workdir,
        None,
        {"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3"},
    )
    rows: list[tuple[str, str]] = []
    try:
        for topic in ("idem", "txn"):
            ensure_topic(broker.bootstrap, topic, 1)
        bench.progress(f"idempotent produce, {args.records} records")
        idem = _produce(broker.bootstrap, "idem", args.records, args.record_size, 0, 0)
        bench.progress(f"transactional produce, {args.txn_records} records per transaction")
        txn = _produce(
            broker.bootstrap,
            "txn",
            args.records,
            args.record_size,
            args.txn_records,
            args.abort_every,
        )
        rows.append(("produce MB/s, idempotent (acks=all)", f"{idem:,.1f}"))
        rows.append((f"produce MB/s, transactional ({args.txn_records}/txn)", f"{txn:,.1f}"))
        for isolation in ("read_uncommitted", "read_committed"):
            bench.progress(f"consume {isolation}")
            rate, count = _consume(broker.bootstrap, "txn", isolation)
            rows.append((f"consume MB/s, {isolation}", f"{rate:,.1f}"))
            rows.append((f"records seen, {isolation}", f"{count:,}"))
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    width = max(len(name) for name, _ in rows)
    print(f"{'figure':<{width}}  trio-broker")
    print("-" * (width + 13))
    for name, value in rows:
        print(f"{name:<{width}}  {value:>11}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
