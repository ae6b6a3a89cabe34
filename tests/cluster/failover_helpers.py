"""Shared by the replication tests: what real clients see of a replicated cluster, a
producer that counts what was acknowledged, and the replicas' bytes on disk."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from clustertest_helpers import eventually
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def close_producer(producer: Producer) -> None:
    """End a confluent-kafka producer's librdkafka instance now, with whatever it still
    holds dropped (close() alone flushes with no time limit).

    Dropping the last reference is not enough: an exception raised by
    commit_transaction/abort_transaction can stay alive (nothing the garbage collector
    sees holds it) with its traceback's frames and their locals, the producer among them.
    Such producers went on reconnecting to a torn-down nemesis lab's addresses for the
    rest of the session (`Invalid response size 1213486160` after the summary)."""
    try:
        producer.purge()
    except (KafkaException, RuntimeError):  # a fatal error, or already closed
        pass
    try:
        producer.close()
    except KafkaException:
        pass  # a fatal error, raised by the flush's poll: the instance is gone all the same


def partitions(bootstrap: str, topic: str) -> dict[int, Any]:
    """partition -> confluent PartitionMetadata (.leader, .replicas, .isrs), as this broker
    (or whichever of the bootstrap list answers) reports it."""
    md = admin(bootstrap).list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return {}
    return dict(t.partitions)


def create_topic(
    bootstrap: str,
    topic: str,
    num_partitions: int = 1,
    replication_factor: int = 3,
    config: dict[str, str] | None = None,
    replica_assignment: list[list[int]] | None = None,
) -> None:
    if replica_assignment is not None:
        new = NewTopic(
            topic,
            len(replica_assignment),
            replica_assignment=replica_assignment,
            config=config or {},
        )
    else:
        new = NewTopic(topic, num_partitions, replication_factor, config=config or {})
    client = admin(bootstrap)  # kept alive until the answer (a dropped client cancels it)
    futures = client.create_topics([new], operation_timeout=30, request_timeout=40)
    futures[topic].result(60)


def wait_for_leaders(
    bootstrap: str, topic: str, count: int, *, isr_size: int | None = None, budget_s: float = 30
) -> dict[int, Any]:
    """Every partition has a leader (and, if asked, an ISR of `isr_size`)."""

    def ready() -> dict[int, Any] | None:
        parts = partitions(bootstrap, topic)
        if len(parts) != count:
            return None
        for p in parts.values():
            if p.error is not None or p.leader < 0:
                return None
            if isr_size is not None and len(p.isrs) != isr_size:
                return None
        return parts

    return eventually(ready, budget_s=budget_s, what=f"leaders of {topic}")


def leader_of(bootstrap: str, topic: str, partition: int = 0) -> int:
    return partitions(bootstrap, topic)[partition].leader


_PURGED = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)


class CountingProducer:
    """An idempotent acks=all confluent-kafka producer on a thread, producing "<prefix>-<n>"
    values ("v-<n>" by default) as fast as it is acknowledged (up to 200 unacknowledged),
    recording every acknowledgement (partition, offset, value) and every delivery error."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        extra: dict[str, Any] | None = None,
        prefix: bytes = b"v",
    ):
        self.topic = topic
        self.prefix = prefix
        self.acked: list[tuple[int, int | None, bytes]] = []  # None: assert_every_ack_read_once
        self.errors: list[Any] = []
        self.ack_times: list[float] = []
        self._stop = threading.Event()
        self._config = {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": 120_000,
            "retry.backoff.ms": 50,
            "topic.metadata.refresh.interval.ms": 1000,
            **(extra or {}),
        }
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._sent = 0
        self._lock = threading.Lock()

    def __enter__(self) -> CountingProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None and err.code() in _PURGED:
            return  # still unacknowledged when the flush at the end gave up: dropped
        with self._lock:
            if err is not None:
                self.errors.append(err)
            else:
                self.acked.append((msg.partition(), msg.offset(), msg.value()))
                self.ack_times.append(time.monotonic())

    def _run(self) -> None:
        producer = Producer(self._config)
        n = 0
        while not self._stop.is_set():
            if n - len(self.acked) - len(self.errors) < 200:
                try:
                    producer.produce(
                        self.topic, value=b"%s-%d" % (self.prefix, n), on_delivery=self._on_delivery
                    )
                    n += 1
                except BufferError:
                    pass
            producer.poll(0.001)
        self._sent = n
        self._remaining = producer.flush(150)
        close_producer(producer)

    def acks_after(self, t: float) -> int:
        with self._lock:
            return sum(1 for x in self.ack_times if x > t)

    def wait_for_acks_after(self, t: float, *, budget_s: float, what: str) -> float:
        """Seconds from `t` to the first acknowledgement after it."""
        eventually(lambda: self.acks_after(t) > 0, budget_s=budget_s, what=what)
        with self._lock:
            return min(x for x in self.ack_times if x > t) - t

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(180)


def read_all(bootstrap: str, topic: str, partition_ends: dict[int, int]) -> dict[int, list]:
    """partition -> [(offset, value)] from the start to the given end offsets."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    out: dict[int, list] = {p: [] for p in partition_ends}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in partition_ends])
        done = {p for p, end in partition_ends.items() if end == 0}
        deadline = time.monotonic() + 120
        while len(done) < len(partition_ends) and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == -191:  # _PARTITION_EOF
                    if msg.offset() >= partition_ends[msg.partition()]:
                        done.add(msg.partition())
                    continue
                raise KafkaException(msg.error())
            p = msg.partition()
            if msg.offset() < partition_ends[p]:
                out[p].append((msg.offset(), msg.value()))
            if msg.offset() + 1 >= partition_ends[p]:
                done.add(p)
        assert len(done) == len(partition_ends), f"read only {done} of {partition_ends}"
    finally:
        consumer.close()
    return out


def high_watermarks(bootstrap: str, topic: str, parts: Iterable[int]) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in parts
        }
    finally:
        consumer.close()


def assert_every_ack_read_once(
    acked: list[tuple[int, int | None, bytes]], read: dict[int, list]
) -> None:
    """Every acknowledged value is at its acknowledged offset, and appears only once.

    An idempotent librdkafka producer can report a delivery without an offset (None):
    3 of 665 once in test_network_partition, 2 under the nemesis in session 20, each value
    then on every replica once. A batch answered with an error that leaves it possibly
    appended (REQUEST_TIMED_OUT after its timeout_ms, NOT_ENOUGH_REPLICAS_AFTER_APPEND) is
    queued for a retry; when the next batch in flight, appended after it, then succeeds,
    librdkafka counts the first as delivered too ("implicitly acked by subsequent batch
    success", rd_kafka_handle_idempotent_Produce_success / rd_kafka_dr_implicit_ack) and
    never learns its offset. Kafka's broker answers both the same way (DelayedProduce
    expires with REQUEST_TIMED_OUT and the records stay in the log). Such a value is looked
    up in its partition: it must be there (and, as every acknowledged value, only once)."""
    at = {(p, o): v for p, records in read.items() for o, v in records}
    in_partition = {(p, v) for p, records in read.items() for _, v in records}
    missing = [
        (p, o, v)
        for p, o, v in acked
        if (at.get((p, o)) != v if o is not None else (p, v) not in in_partition)
    ]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged records lost: {missing[:5]}"
    values = [v for records in read.values() for _, v in records]
    acked_values = {v for _, _, v in acked}
    dupes = [v for v in values if v in acked_values]
    assert len(dupes) == len(acked_values), "an acknowledged value was read more than once"


def log_bytes(log_dir: Path, topic: str, partition: int) -> bytes:
    """A replica's record batches: its segment files concatenated in offset order."""
    d = log_dir / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))


def read_committed(
    bootstrap: str, topic: str, partitions: int, expected: set[bytes], budget_s: float = 40
) -> dict[int, list]:
    """partition -> values a read_committed consumer reads of `topic` from the start: until
    every expected value came and nothing more for 3 s."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"checker-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    out: dict[int, list] = {p: [] for p in range(partitions)}
    seen: set[bytes] = set()
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + budget_s
        last = time.monotonic()
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                if expected <= seen and time.monotonic() - last > 3:
                    break
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            out[msg.partition()].append(msg.value())
            seen.add(msg.value())
            last = time.monotonic()
    finally:
        consumer.close()
    return out
