"""`trio-broker perf produce|consume`: load generators for any Kafka-compatible broker.

In the spirit of Kafka's `kafka-producer-perf-test` and `kafka-consumer-perf-test`, driven
by librdkafka (confluent-kafka) so that the client is the same fast C client whichever
broker is measured. Each run prints a human summary and, with `--json`, one JSON line
that `benchmarks/run.py` parses.

    trio-broker perf produce --bootstrap 127.0.0.1:9092 --topic t --num-records 100000 \\
        --record-size 1024 [--acks 1] [--linger-ms 5] [--batch-size 1048576] [--json]
    trio-broker perf consume --bootstrap 127.0.0.1:9092 --topic t [--num-records N | --bytes B]

confluent-kafka is imported when a subcommand runs, so the broker itself never needs it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import struct
import sys
import time
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger(__name__)

# Values produced with --stamp start with the wall-clock send time, so that a consumer on
# the same machine can measure end-to-end latency without any shared state.
_STAMP = struct.Struct(">q")


def percentiles(samples: list[float], points: Sequence[float] = (50, 95, 99, 99.9)) -> dict:
    """Nearest-rank percentiles of `samples` (seconds) in milliseconds, keyed "p50" etc."""
    if not samples:
        return {}
    ordered = sorted(samples)
    out = {}
    for p in points:
        rank = min(len(ordered) - 1, max(0, int(round(p / 100 * len(ordered))) - 1))
        key = "p" + (f"{p:g}".replace(".", "_"))
        out[key] = round(ordered[rank] * 1000, 3)
    out["max"] = round(ordered[-1] * 1000, 3)
    return out


def ensure_topic(
    bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None
) -> None:
    """Create `topic` with `partitions` (and topic `config`) if it does not exist; tolerate
    brokers that race us."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=10).topics
    if topic in existing and not existing[topic].error:
        return
    futures = admin.create_topics(
        [NewTopic(topic, partitions, 1, config=config or {})], operation_timeout=10
    )
    try:
        futures[topic].result(timeout=15)
    except KafkaException as exc:
        # TOPIC_ALREADY_EXISTS is fine: a previous run or a concurrent client made it.
        if "exist" not in str(exc).lower():
            raise
    # Wait until metadata shows the leaders, or the first produce will stall on it.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=5).topics.get(topic)
        if md is not None and not md.error and len(md.partitions) >= partitions:
            return
        time.sleep(0.05)
    raise RuntimeError(f"topic {topic} did not appear in metadata")


def _cpu_seconds() -> float:
    """CPU time of this process so far, librdkafka's threads included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _payload(size: int) -> bytes:
    # Random bytes so that compression, if asked for, measures a realistic worst case.
    return os.urandom(size)


def _report(kind: str, result: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"kind": kind, **result}), flush=True)
        return
    lat = result.get("latency_ms", {})
    lat_text = ", ".join(f"{k} {v:.2f} ms" for k, v in lat.items())
    print(
        f"{result['records']} records, {result['records_per_s']:.0f} records/s, "
        f"{result['mb_per_s']:.2f} MB/s, {result['elapsed_s']:.3f} s"
        + (f"; latency {lat_text}" if lat_text else ""),
        flush=True,
    )
    if result.get("errors"):
        print(f"{result['errors']} errors, first: {result.get('first_error')}", flush=True)


def run_produce(args: argparse.Namespace) -> dict:
    from confluent_kafka import Producer

    if args.partitions:
        topic_config = dict(item.partition("=")[::2] for item in args.topic_config)
        ensure_topic(args.bootstrap, args.topic, args.partitions, topic_config)
    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "acks": str(args.acks),
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_size,
        "compression.type": args.compression,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "message.max.bytes": max(1_000_000, args.batch_size + 65536),
        "enable.idempotence": False,
    }
    if args.batch_num_messages:
        conf["batch.num.messages"] = args.batch_num_messages
    for item in args.producer_prop:
        key, _, value = item.partition("=")
        conf[key] = value

    latencies: list[float] = []
    state = {"acked": 0, "errors": 0, "first_error": None}

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            state["errors"] += 1
            if state["first_error"] is None:
                state["first_error"] = str(err)
            return
        state["acked"] += 1
        lat = msg.latency()
        if lat is not None:
            latencies.append(lat)

    producers = [Producer(conf) for _ in range(args.connections)]
    # Warm up metadata and connections so the timed run measures produce, not bootstrap.
    for p in producers:
        p.list_topics(args.topic, timeout=10)
    payload = _payload(args.record_size)
    n = args.num_records
    interval = 1.0 / args.throughput if args.throughput > 0 else 0.0
    stamp = args.stamp
    count = len(producers)

    start = time.perf_counter()
    cpu0 = _cpu_seconds()
    next_send = start
    for i in range(n):
        p = producers[i % count]
        value = _STAMP.pack(time.time_ns()) + payload[8:] if stamp else payload
        while True:
            try:
                p.produce(args.topic, value, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.01)
        if interval:
            next_send += interval
            # Serve delivery callbacks, then sleep out the gap: a busy poll() loop would take a
            # whole core from the broker and the consumer on a small machine.
            p.poll(0)
            if (delay := next_send - time.perf_counter()) > 0:
                time.sleep(delay)
        elif i & 1023 == 0:
            p.poll(0)
    for p in producers:
        remaining = p.flush(120)
        if remaining:
            state["errors"] += remaining
            state["first_error"] = state["first_error"] or f"{remaining} not delivered"
    elapsed = time.perf_counter() - start
    cpu = _cpu_seconds() - cpu0

    acked = state["acked"]
    nbytes = acked * args.record_size
    return {
        "records": acked,
        "sent": n,
        "bytes": nbytes,
        "elapsed_s": round(elapsed, 4),
        "records_per_s": acked / elapsed if elapsed else 0.0,
        "mb_per_s": nbytes / elapsed / 1e6 if elapsed else 0.0,
        "latency_ms": percentiles(latencies),
        "client_cpu_s": round(cpu, 3),
        "errors": state["errors"],
        "first_error": state["first_error"],
    }


def run_consume(args: argparse.Namespace) -> dict:
    from confluent_kafka import (
        OFFSET_BEGINNING,
        TIMESTAMP_LOG_APPEND_TIME,
        Consumer,
        KafkaError,
        TopicPartition,
    )

    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        # assign() without a group: no coordinator, no commits, just Fetch.
        "group.id": "trio-broker-perf",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "fetch.max.bytes": args.fetch_max_bytes,
        "max.partition.fetch.bytes": min(args.partition_fetch_max_bytes, args.fetch_max_bytes),
        "fetch.wait.max.ms": args.fetch_wait_max_ms,
        "queued.max.messages.kbytes": 1_048_576,
        "receive.message.max.bytes": args.fetch_max_bytes + 1_000_000,
    }
    consumer = Consumer(conf)
    try:
        deadline = time.monotonic() + 15
        while True:
            md = consumer.list_topics(args.topic, timeout=10).topics.get(args.topic)
            if md is not None and not md.error and md.partitions:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {args.topic} not found")
            time.sleep(0.1)
        parts = sorted(md.partitions)
        consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in parts])
        if args.ready_file:
            # Tells a driving process that fetching has begun, so it can start producing.
            with open(args.ready_file, "w") as f:
                f.write("ready\n")

        want_records = args.num_records or 0
        want_bytes = args.bytes or 0
        records = nbytes = 0
        eof: set[int] = set()
        e2e: list[float] = []
        # With LogAppendTime (the broker stamps each batch when it appends it, in ms): the
        # same latency split at the append, producer side and consumer side.
        to_append: list[float] = []
        from_append: list[float] = []
        first_error = None
        errors = 0
        idle_deadline = None
        start = time.perf_counter()
        cpu0 = _cpu_seconds()
        first_at = None
        stop_at_eof = args.until_eof
        idle_exit = False
        last_at = None
        while True:
            # consume(n) waits for n records or the timeout, which would add up to the
            # timeout to every latency sample; --e2e takes records one at a time instead.
            if args.e2e:
                m = consumer.poll(0.2)
                msgs = [m] if m is not None else []
            else:
                msgs = consumer.consume(10_000, 0.2)
            now_ns = time.time_ns() if args.e2e else 0
            if not msgs:
                if idle_deadline is None:
                    idle_deadline = time.monotonic() + args.idle_timeout
                elif time.monotonic() > idle_deadline:
                    idle_exit = True
                    break
                continue
            idle_deadline = None
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        eof.add(m.partition())
                    else:
                        errors += 1
                        first_error = first_error or str(err)
                    continue
                eof.discard(m.partition())
                last_at = time.perf_counter()
                v = m.value()
                if first_at is None:
                    first_at = time.perf_counter()
                records += 1
                nbytes += len(v)
                if now_ns and len(v) >= 8:
                    sent_ns = _STAMP.unpack_from(v)[0]
                    e2e.append((now_ns - sent_ns) / 1e9)
                    kind, append_ms = m.timestamp()
                    if kind == TIMESTAMP_LOG_APPEND_TIME:
                        to_append.append(append_ms / 1e3 - sent_ns / 1e9)
                        from_append.append(now_ns / 1e9 - append_ms / 1e3)
            if want_records and records >= want_records:
                break
            if want_bytes and nbytes >= want_bytes:
                break
            if stop_at_eof and len(eof) == len(parts) and records:
                break
        # Waiting out the idle timeout is not consuming: stop the clock at the last record.
        end = last_at if idle_exit and last_at else time.perf_counter()
        elapsed = end - start
        cpu = _cpu_seconds() - cpu0
    finally:
        consumer.close()
    result = {
        "records": records,
        "bytes": nbytes,
        "elapsed_s": round(elapsed, 4),
        "first_record_s": round(first_at - start, 4) if first_at else None,
        "records_per_s": records / elapsed if elapsed else 0.0,
        "mb_per_s": nbytes / elapsed / 1e6 if elapsed else 0.0,
        # From the first record on: excludes metadata, assignment and the first fetch wait.
        "steady_mb_per_s": nbytes / (end - first_at) / 1e6 if first_at and end > first_at else 0.0,
        "client_cpu_s": round(cpu, 3),
        "errors": errors,
        "first_error": first_error,
    }
    if e2e:
        # Drop the first 5%: connection setup and the first fetch's wait are not steady state.
        warm = e2e[len(e2e) // 20 :]
        result["latency_ms"] = percentiles(warm)
        if to_append:
            skip = len(to_append) // 20
            result["to_append_ms"] = percentiles(to_append[skip:])
            result["from_append_ms"] = percentiles(from_append[skip:])
    return result


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `perf produce|consume` to the `trio-broker` subcommand parsers."""
    perf = subparsers.add_parser("perf", help="measure a Kafka-compatible broker")
    sub = perf.add_subparsers(dest="perf_command", required=True)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap", required=True, metavar="HOST:PORT")
    common.add_argument("--topic", required=True)
    common.add_argument("--json", action="store_true", help="print one JSON line")

    prod = sub.add_parser("produce", parents=[common], help="producer throughput and latency")
    prod.add_argument("--num-records", type=int, required=True)
    prod.add_argument("--record-size", type=int, required=True, metavar="BYTES")
    prod.add_argument("--acks", default="1", choices=["0", "1", "-1", "all"])
    prod.add_argument("--linger-ms", type=float, default=5)
    prod.add_argument("--batch-size", type=int, default=1_048_576)
    prod.add_argument(
        "--batch-num-messages",
        type=int,
        default=0,
        help="records per batch cap (1 = one record per Produce request)",
    )
    prod.add_argument(
        "--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"]
    )
    prod.add_argument(
        "--throughput", type=float, default=0, help="records/s to pace at (0 = as fast as possible)"
    )
    prod.add_argument(
        "--connections",
        type=int,
        default=1,
        help="independent producer clients, each with its own connection",
    )
    prod.add_argument(
        "--partitions", type=int, default=0, help="create the topic with this many partitions first"
    )
    prod.add_argument(
        "--stamp", action="store_true", help="put the send time in each value, for consume --e2e"
    )
    prod.add_argument("--producer-prop", action="append", default=[], metavar="key=value")
    prod.add_argument(
        "--topic-config",
        action="append",
        default=[],
        metavar="key=value",
        help="a config of the topic --partitions creates (e.g. message.timestamp.type="
        "LogAppendTime, which lets consume --e2e split the latency at the broker's append)",
    )

    cons = sub.add_parser("consume", parents=[common], help="consumer throughput")
    cons.add_argument("--num-records", type=int, default=0)
    cons.add_argument("--bytes", type=int, default=0)
    cons.add_argument(
        "--until-eof", action="store_true", help="stop when every partition reaches its end"
    )
    cons.add_argument(
        "--idle-timeout",
        type=float,
        default=10,
        help="stop after this many seconds without a record",
    )
    cons.add_argument("--fetch-max-bytes", type=int, default=52_428_800)
    cons.add_argument(
        "--partition-fetch-max-bytes",
        type=int,
        default=8_388_608,
        help="max.partition.fetch.bytes: a few batches per answer; 50 MB answers cost the "
        "client a fresh 50 MB buffer each (page faults)",
    )
    cons.add_argument("--fetch-wait-max-ms", type=int, default=100)
    cons.add_argument(
        "--e2e",
        action="store_true",
        help="measure end-to-end latency from values made by produce --stamp",
    )
    cons.add_argument("--ready-file", help="write this file once assigned")
    return perf


def run(args: argparse.Namespace) -> int:
    """Run the parsed `perf` subcommand; 0 when every record was delivered."""
    if args.perf_command == "produce":
        if args.record_size < 8 and args.stamp:
            raise SystemExit("--stamp needs --record-size >= 8")
        result = run_produce(args)
    else:
        if not (args.num_records or args.bytes or args.until_eof):
            args.until_eof = True
        result = run_consume(args)
    _report(args.perf_command, result, args.json)
    return 1 if result["errors"] else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trio-broker")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main(["perf", *sys.argv[1:]]))
