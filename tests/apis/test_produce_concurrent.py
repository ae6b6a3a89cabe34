"""Eight producers at once on eight partitions: every partition's offsets stay contiguous
from 0, each producer's records stay in the order it sent them, and what was acknowledged
is exactly what comes back (issue 12's guard on the produce path's concurrency)."""

import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PRODUCERS = 8
PARTITIONS = 8
PER_PRODUCER = 3000


def _produce(bootstrap: str, topic: str, index: int, acked: list) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 2,
            "batch.num.messages": 50,  # many small requests, interleaving with the others'
            "enable.idempotence": True,
        }
    )

    def on_delivery(err, msg):
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.value()))

    for seq in range(PER_PRODUCER):
        producer.produce(
            topic,
            value=b"%d:%06d" % (index, seq),
            partition=seq % PARTITIONS,
            on_delivery=on_delivery,
        )
        if seq % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def test_eight_producers_keep_each_partition_contiguous_and_in_order(kafka_broker):
    topic = "concurrent"
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(15)

    acked: list[list] = [[] for _ in range(PRODUCERS)]
    threads = [
        threading.Thread(target=_produce, args=(kafka_broker.bootstrap, topic, i, acked[i]))
        for i in range(PRODUCERS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(len(a) == PER_PRODUCER for a in acked), [len(a) for a in acked]

    per_partition = PRODUCERS * PER_PRODUCER // PARTITIONS
    consumer = Consumer(
        {"bootstrap.servers": kafka_broker.bootstrap, "group.id": "concurrent-check"}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    while sum(map(len, got.values())) < PRODUCERS * PER_PRODUCER:
        assert time.monotonic() < deadline, {p: len(v) for p, v in got.items()}
        for msg in consumer.consume(1000, 0.5):
            assert msg.error() is None, msg.error()
            got[msg.partition()].append((msg.offset(), msg.value()))
    consumer.close()

    for partition, records in got.items():
        # Offsets 0..n-1 with no gap and no repeat.
        assert [offset for offset, _ in records] == list(range(per_partition)), partition
        # Each producer's records in this partition in the order it sent them.
        for index in range(PRODUCERS):
            seqs = [int(v.split(b":")[1]) for _, v in records if v.startswith(b"%d:" % index)]
            assert seqs == sorted(seqs) and len(seqs) == PER_PRODUCER // PARTITIONS
    # What was acknowledged is what is there, at the offsets the acknowledgements named.
    stored = {(p, offset): value for p, records in got.items() for offset, value in records}
    for a in acked:
        for partition, offset, value in a:
            assert stored[(partition, offset)] == value
