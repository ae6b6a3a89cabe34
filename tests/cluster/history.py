"""A Jepsen-style history: what clients were told and what they read, and a checker.

The workload, each part on its own thread, recording with wall-clock times:

    acks=all   an idempotent confluent-kafka producer (failover_helpers.CountingProducer)
    acks=1     `DirectProducer`: one record per Produce request on one socket to one
               broker, no retries and no leader discovery, so each acknowledgement is that
               broker's own word
    reads      `TailingConsumer`: a read_uncommitted consumer following every partition
               from the start, recording (partition, offset, value) as it goes

`check(...)` then proves, on the final state read from the cluster:

- every acks=all acknowledgement is read back exactly once, at its acknowledged offset;
- each partition's offsets are contiguous from its start (no gap a client was not told of);
- the tailing consumer never saw an offset go back, and everything it read is still there
  (it reads below the high watermark: nothing it saw may be truncated);
- every replica of a partition holds the same bytes;
- acks=1 records that were lost, and how many of them a broker acknowledged after it had
  logged that its ZooKeeper session expired (Kafka's documented window ends there: none).

It returns the figures (losses, acknowledgement gaps) for the test to assert or print.
"""

from __future__ import annotations

import datetime
import re
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
from confluent_kafka import Consumer, TopicPartition
from failover_helpers import log_bytes, read_all
from wire import request_of, roundtrip

from trio_broker.protocol._generated.produce_request import (
    PartitionProduceData,
    TopicProduceData,
)
from trio_broker.protocol.record_codec import build_batch

__all__ = ["DirectProducer", "Report", "TailingConsumer", "check", "log_time"]


class DirectProducer:
    """acks=1 (or 0, or -1) Produce requests of one record each to partition `partition`
    of `topic`, on one socket to one broker, every `interval_s`; records
    (time, error code, offset, value) for every answer. A broken or silent socket is
    opened again (a timeout counts as no answer)."""

    def __init__(
        self,
        host: str,
        port: int,
        topic: str,
        *,
        partition: int = 0,
        acks: int = 1,
        interval_s: float = 0.005,
        prefix: bytes = b"a1",
    ) -> None:
        self.address = (host, port)
        self.topic, self.partition, self.acks = topic, partition, acks
        self.interval_s = interval_s
        self.prefix = prefix
        self.answers: list[tuple[float, int, int, bytes]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DirectProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    @property
    def acked(self) -> list[tuple[float, int, bytes]]:
        """(time, offset, value) of every acknowledged record."""
        return [(t, o, v) for t, code, o, v in self.answers if code == 0]

    def _run(self) -> None:
        sock: socket.socket | None = None
        n = cid = 0
        while not self._stop.is_set():
            try:
                if sock is None:
                    sock = socket.create_connection(self.address, timeout=2)
                value = b"%s-%d" % (self.prefix, n)
                n += 1
                cid += 1
                batch = build_batch([(None, value, (), int(time.time() * 1000))])
                data = [
                    TopicProduceData(
                        name=self.topic,
                        partition_data=[PartitionProduceData(index=self.partition, records=batch)],
                    )
                ]
                request = request_of(0, acks=self.acks, timeout_ms=2000, topic_data=data)
                response = roundtrip(sock, request, 9, correlation_id=cid)
                part = response.responses[0].partition_responses[0]
                self.answers.append((time.time(), part.error_code, part.base_offset, value))
            except (OSError, AssertionError, ValueError):
                if sock is not None:
                    sock.close()
                sock = None
                time.sleep(0.05)
                continue
            time.sleep(self.interval_s)
        if sock is not None:
            sock.close()


class TailingConsumer:
    """A read_uncommitted consumer following `partitions` of `topic` from offset 0."""

    def __init__(self, bootstrap: str, topic: str, partitions: Iterable[int]) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.partitions = list(partitions)
        self.reads: list[tuple[int, int, bytes]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TailingConsumer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"tail-{time.monotonic_ns()}",
                "enable.auto.commit": False,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        try:
            consumer.assign([TopicPartition(self.topic, p, 0) for p in self.partitions])
            while not self._stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None or msg.error() is not None:
                    continue
                self.reads.append((msg.partition(), msg.offset(), msg.value()))
        finally:
            consumer.close()


_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def log_time(line: str) -> float | None:
    """The wall-clock time (time.time()) of a broker log line."""
    m = _LOG_TIME.match(line)
    if m is None:
        return None
    moment = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
    return moment.timestamp()


def first_line_time(lines: Iterable[str], pattern: str) -> float | None:
    for line in lines:
        if re.search(pattern, line):
            return log_time(line)
    return None


@attrs.frozen
class Report:
    acked_all: int  # acks=all acknowledgements, all read back once at their offsets
    acked_one: int  # acks=1 acknowledgements
    lost_one: int  # acks=1 acknowledged, then gone from the log
    lost_one_after_expiry: int  # of those, acknowledged after the broker knew
    longest_gap_s: float  # the longest a partition went without an acks=all acknowledgement
    reads: int  # records the tailing consumer read during the run


def check(
    *,
    bootstrap: str,
    topic: str,
    partitions: int,
    acked: list[tuple[int, int, bytes]],
    ack_times: list[float],
    replicas: Mapping[int, Path],
    direct: Mapping[str, tuple[DirectProducer, float | None]] = {},  # noqa: B006
    tail: TailingConsumer | None = None,
    window: tuple[float, float] | None = None,
) -> Report:
    """See the module docstring. `replicas`: broker id -> its log dir (every replica of
    every partition of `topic` and of the direct producers' topics is compared);
    `direct`: topic -> (its DirectProducer, the time its broker learned its session had
    expired, or None); `window`: (start, end) in time.monotonic() for the longest gap."""
    from failover_helpers import high_watermarks

    ends = high_watermarks(bootstrap, topic, range(partitions))
    final = read_all(bootstrap, topic, ends)
    at = {(p, o): v for p, records in final.items() for o, v in records}

    missing = [(p, o, v) for p, o, v in acked if at.get((p, o)) != v]
    assert not missing, f"{len(missing)} of {len(acked)} acks=all records lost: {missing[:5]}"
    counts: dict[bytes, int] = {}
    for v in at.values():
        counts[v] = counts.get(v, 0) + 1
    doubled = [v for _, _, v in acked if counts.get(v, 0) != 1]
    assert not doubled, f"{len(doubled)} acks=all records read more than once: {doubled[:5]}"

    for p, records in final.items():
        offsets = [o for o, _ in records]
        gaps = [(a, b) for a, b in zip(offsets, offsets[1:], strict=False) if b != a + 1]
        assert not gaps, f"partition {p} skips offsets: {gaps[:5]}"

    if tail is not None:
        last: dict[int, int] = {}
        for p, o, v in tail.reads:
            assert o > last.get(p, -1), f"partition {p} went back from {last[p]} to {o}"
            last[p] = o
            assert at.get((p, o)) == v, f"read {v!r} at {p}/{o} during the run, then it was gone"

    lost_one = lost_after = acked_one = 0
    for direct_topic, (producer, expired_at) in direct.items():
        acks = producer.acked
        acked_one += len(acks)
        d_ends = high_watermarks(bootstrap, direct_topic, [producer.partition])
        d_final = read_all(bootstrap, direct_topic, d_ends)[producer.partition]
        d_at = dict(d_final)
        for t, o, v in acks:
            if d_at.get(o) != v:
                lost_one += 1
                if expired_at is not None and t > expired_at:
                    lost_after += 1

    topics = [topic, *direct]
    for t in topics:
        for p in range(partitions if t == topic else 1):
            copies = {
                b: log_bytes(d, t, p) for b, d in replicas.items() if (d / f"{t}-{p}").exists()
            }
            first = next(iter(copies.values()), b"")
            differ = [b for b, data in copies.items() if data != first]
            assert not differ, (
                f"{t}-{p}: replicas {sorted(copies)} differ ({differ} from the first)"
            )

    # The longest time a partition went without an acks=all acknowledgement.
    by_partition: dict[int, list[float]] = {}
    for (p, _, _), at_time in zip(acked, ack_times, strict=False):
        by_partition.setdefault(p, []).append(at_time)
    gap = 0.0
    for times in by_partition.values():
        times.sort()
        if window is not None:
            start, end = window
            times = [start, *(x for x in times if start <= x <= end), end]
        gap = max(gap, max((b - a for a, b in zip(times, times[1:], strict=False)), default=0))
    return Report(
        acked_all=len(acked),
        acked_one=acked_one,
        lost_one=lost_one,
        lost_one_after_expiry=lost_after,
        longest_gap_s=gap,
        reads=len(tail.reads) if tail is not None else 0,
    )
