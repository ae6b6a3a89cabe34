"""Replication, replica side: the test is the controller (znodes + LeaderAndIsr), real
brokers replicate, real clients produce with acks=all and consume."""

from __future__ import annotations

import asyncio
import socket

import pytest
from replication_helpers import (
    NO_CONTROLLED_SHUTDOWN,
    ControllerStub,
    _topic_data,
    eventually,
    list_offset,
    produce,
    segment_bytes,
    take_controller,
    values_by_offset,
)

from trio_broker.errors import ErrorCode
from trio_broker.log.checkpoints import read_offset_checkpoint
from trio_broker.testing import KafkaCluster

OVERRIDES = NO_CONTROLLED_SHUTDOWN | {
    "auto.create.topics.enable": "false",
    "replica.high.watermark.checkpoint.interval.ms": "300",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "num.replica.fetchers": "2",
}


@pytest.fixture
def cluster(zookeeper, tmp_path, zk_view):
    # The test is the controller: it holds /controller before any broker starts.
    take_controller(zk_view)
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=3, overrides=OVERRIDES) as c:
        yield c


def test_leader_and_isr_then_acks_all_from_three_clients_replicates_byte_for_byte(cluster, zk_view):
    ctl = ControllerStub(cluster, zk_view)
    ctl.create_topic("rep", {0: [1, 2, 3], 1: [2, 3, 1]}, {"min.insync.replicas": "2"})
    answers = ctl.send([("rep", 0), ("rep", 1)])
    for node, answer in answers.items():
        assert answer.error_code == 0, node
        assert [p.error_code for t in answer.topics for p in t.partition_errors] == [0, 0]

    # The replicas' logs exist with the topic id, and a follower refuses produce.
    for node in (1, 2, 3):
        assert (cluster.brokers[node].log_dir / "rep-0" / "partition.metadata").exists()
    refused = produce(cluster.brokers[2].bootstrap, "rep", 0, [b"x"], version=10)
    assert refused.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (refused.current_leader.leader_id, refused.current_leader.leader_epoch) == (1, 0)

    import confluent_kafka
    import kafka

    sent: dict[int, set[bytes]] = {0: set(), 1: set()}
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5}
    )
    delivered = []
    for i in range(300):
        value = f"ck-{i}".encode()
        sent[i % 2].add(value)
        producer.produce(
            "rep", value, partition=i % 2, on_delivery=lambda e, m: delivered.append(e)
        )
    assert producer.flush(60) == 0
    assert delivered == [None] * 300

    kp = kafka.KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    futures = []
    for i in range(100):
        value = f"kp-{i}".encode()
        sent[i % 2].add(value)
        futures.append(kp.send("rep", value, partition=i % 2))
    for f in futures:
        f.get(timeout=60)
    kp.close()

    async def aio() -> None:
        from aiokafka import AIOKafkaProducer

        p = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
        await p.start()
        try:
            for i in range(100):
                value = f"aio-{i}".encode()
                sent[i % 2].add(value)
                await p.send_and_wait("rep", value, partition=i % 2)
        finally:
            await p.stop()

    asyncio.run(aio())

    leaders = {0: 1, 1: 2}
    for p, leader in leaders.items():
        hw = list_offset(cluster.brokers[leader].bootstrap, "rep", p).offset
        assert hw == len(sent[p]) == 250
        leader_bytes = segment_bytes(cluster.brokers[leader].log_dir, "rep", p)
        assert set(values_by_offset(leader_bytes).values()) == sent[p]
        # Every follower's segments hold the leader's batches, byte for byte.
        for node in (1, 2, 3):
            eventually(
                lambda n=node, p=p, b=leader_bytes: (
                    segment_bytes(cluster.brokers[n].log_dir, "rep", p) == b
                ),
                budget_s=20,
                what=f"replica {node} of rep-{p}",
            )
        # The leader's HW is in replication-offset-checkpoint.
        eventually(
            lambda leader=leader, p=p, hw=hw: (
                read_offset_checkpoint(
                    cluster.brokers[leader].log_dir / "replication-offset-checkpoint"
                ).get(("rep", p))
                == hw
            ),
            budget_s=10,
            what="HW checkpoint",
        )

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "g",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition("rep", p, 0) for p in (0, 1)])
    got: dict[int, set[bytes]] = {0: set(), 1: set()}

    def consumed() -> bool:
        for m in consumer.consume(100, timeout=0.5):
            if m.error() is None:
                got[m.partition()].add(m.value())
        return got == sent

    eventually(consumed, budget_s=30, what="consumed everything")
    consumer.close()
    producer.flush(1)

    # kafka-python and aiokafka read the same, from the leaders.
    kc = kafka.KafkaConsumer(
        bootstrap_servers=cluster.bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000
    )
    kc.assign([kafka.TopicPartition("rep", p) for p in (0, 1)])
    kc.seek_to_beginning()
    by_kafka_python: dict[int, set[bytes]] = {0: set(), 1: set()}
    for m in kc:
        by_kafka_python[m.partition].add(m.value)
    kc.close()
    assert by_kafka_python == sent

    async def aio_consume() -> dict[int, set[bytes]]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        c = AIOKafkaConsumer(
            bootstrap_servers=cluster.bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await c.start()
        out: dict[int, set[bytes]] = {0: set(), 1: set()}
        try:
            c.assign([TopicPartition("rep", p) for p in (0, 1)])

            async def read_all() -> None:
                while out != sent:
                    batches = await c.getmany(timeout_ms=500)
                    for tp, messages in batches.items():
                        out[tp.partition].update(m.value for m in messages)

            await asyncio.wait_for(read_all(), 30)
        finally:
            await c.stop()
        return out

    assert asyncio.run(aio_consume()) == sent


def test_stale_controller_epoch_and_fenced_leader_epoch(cluster, zk_view):
    ctl = ControllerStub(cluster, zk_view)
    ctl.create_topic("fence", {0: [1, 2]})
    ctl.send([("fence", 0)])
    stale = ctl.send([("fence", 0)], to=[1], controller_epoch=ctl.epoch - 1, update_metadata=False)[
        1
    ]
    assert stale.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    ctl.elect("fence", 0, 2, [1, 2])
    ctl.send([("fence", 0)])
    ctl.states[("fence", 0)]["leader_epoch"] = 0
    old = ctl.send([("fence", 0)], to=[2], update_metadata=False)[2]
    assert [p.error_code for t in old.topics for p in t.partition_errors] == [
        ErrorCode.FENCED_LEADER_EPOCH
    ]


def test_acks_all_times_out_while_an_isr_follower_is_silent(cluster, zk_view):
    ctl = ControllerStub(cluster, zk_view)
    ctl.create_topic("slow", {0: [1, 3]})
    ctl.send([("slow", 0)])
    assert produce(cluster.brokers[1].bootstrap, "slow", 0, [b"a"]).error_code == 0
    # Broker 3 stops; with replica.lag.time.max.ms at its 30 s default it stays in the ISR
    # for now, so the HW cannot pass the next batch within the produce's timeout_ms.
    cluster.brokers[3].stop()
    answer = produce(cluster.brokers[1].bootstrap, "slow", 0, [b"b"], timeout_ms=500)
    assert answer.error_code == ErrorCode.REQUEST_TIMED_OUT
    assert answer.base_offset == 1  # appended, not acknowledged
    assert list_offset(cluster.brokers[1].bootstrap, "slow", 0).offset == 1
    assert ctl.state_znode("slow", 0)[0].isr == (1, 3)


def test_a_waiting_acks_all_produce_survives_a_new_epoch_of_the_same_leader(cluster, zk_view):
    import concurrent.futures

    ctl = ControllerStub(cluster, zk_view)
    ctl.create_topic("bump", {0: [1, 3]})
    ctl.send([("bump", 0)])
    assert produce(cluster.brokers[1].bootstrap, "bump", 0, [b"a"]).error_code == 0
    cluster.brokers[3].stop()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(
            produce, cluster.brokers[1].bootstrap, "bump", 0, [b"b"], timeout_ms=20000
        )
        eventually(
            lambda: (
                list_offset(cluster.brokers[1].bootstrap, "bump", 0, -1).offset == 1
                and not waiting.done()
            ),
            budget_s=10,
            what="the produce waits for broker 3",
        )
        # The controller drops the dead follower from the ISR with a new leader epoch
        # (as Kafka's does): broker 1 stays the leader, and the produce completes.
        ctl.elect("bump", 0, 1, [1])
        ctl.send([("bump", 0)], to=[1])
        answer = waiting.result(timeout=15)
    assert (answer.error_code, answer.base_offset) == (0, 1)
    assert list_offset(cluster.brokers[1].bootstrap, "bump", 0).offset == 2


def test_only_update_metadata_fills_the_metadata_cache(cluster, zk_view):
    from clustertest_helpers import metadata

    ctl = ControllerStub(cluster, zk_view)
    ctl.create_topic("cache", {0: [1], 1: [2]})
    # LeaderAndIsr for partition 0 alone, no UpdateMetadata yet: broker 1 leads it (its
    # replica manager says so) but its metadata cache does not know the topic, so Metadata
    # does not answer it with one partition of two.
    ctl.send([("cache", 0)], update_metadata=False)
    answer = metadata(cluster.brokers[1].bootstrap)
    assert "cache" not in [t.name for t in answer.topics]
    done = produce(cluster.brokers[1].bootstrap, "cache", 0, [b"early"])
    assert (done.error_code, done.base_offset) == (0, 0)
    assert list_offset(cluster.brokers[1].bootstrap, "cache", 0).offset == 1
    refused = produce(cluster.brokers[2].bootstrap, "cache", 1, [b"x"])
    assert refused.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    # The controller's UpdateMetadata names the whole topic, on every broker.
    ctl.send([("cache", 1)])
    for node in (1, 2, 3):
        topics = {t.name: t for t in metadata(cluster.brokers[node].bootstrap).topics}
        partitions = sorted((p.partition_index, p.leader_id) for p in topics["cache"].partitions)
        assert partitions == [(0, 1), (1, 2)], node


def test_pipelined_produces_to_a_leader_answer_as_if_appended_one_by_one(cluster, zk_view):
    # One send of many produces to the leader: consecutive acks=0/1 ones to the partition it
    # leads are appended as one write (apis/produce.py handle_batch_now). Every answer must
    # be what appending each alone gives, in request order; acks=all among them waits for
    # the ISR as ever; the followers must hold the leader's batches byte for byte.
    from wire import encode_request, read_response

    from trio_broker.protocol._generated.produce_request import ProduceRequest
    from trio_broker.protocol.record_codec import build_batch

    ctl = ControllerStub(cluster, zk_view)
    ctl.create_topic("piped", {0: [1, 2, 3], 1: [2, 3, 1]}, {"min.insync.replicas": "2"})
    answers = ctl.send([("piped", 0), ("piped", 1)])
    assert all(a.error_code == 0 for a in answers.values())
    ts = 1_700_000_000_000

    def batch(*values: bytes, **idempotent: int) -> bytes:
        return build_batch([(b"k", v, (), ts) for v in values], **idempotent)

    corrupt = bytearray(batch(b"bad"))
    corrupt[-1] ^= 0xFF  # the CRC no longer matches
    i0 = batch(b"i0", producer_id=7000, producer_epoch=0, base_sequence=0)
    sends = [  # (partition, acks, batch)
        (0, 1, batch(b"a0")),
        (0, 1, batch(b"b0", b"b1", b"b2")),
        (0, 1, bytes(corrupt)),
        (0, 1, batch(b"c0", b"c1")),
        (0, 0, batch(b"z0")),  # no answer
        (0, 1, i0),
        (0, 1, i0),  # resent: a duplicate
        (0, -1, batch(b"d0")),  # answered once the ISR has it
        (0, 1, batch(b"i1", producer_id=7000, producer_epoch=0, base_sequence=1)),
        (0, 1, batch(b"i2", b"i3", producer_id=7000, producer_epoch=0, base_sequence=2)),
        (0, 1, batch(b"i9", producer_id=7000, producer_epoch=0, base_sequence=9)),
        (1, 1, batch(b"elsewhere")),  # broker 2 leads piped-1
        (0, 1, batch(b"f0")),
    ]
    frames = [
        encode_request(
            ProduceRequest(
                acks=acks,
                timeout_ms=30000,
                topic_data=[_topic_data("piped", partition, records)],
            ),
            9,
            400 + i,
        )
        for i, (partition, acks, records) in enumerate(sends)
    ]
    host, port = cluster.brokers[1].bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(b"".join(frames))
        replies = [read_response(sock, 0, 9) for _ in range(len(sends) - 1)]
    assert [cid for cid, _ in replies] == [400 + i for i in range(len(sends)) if i != 4]
    parts = [body.responses[0].partition_responses[0] for _, body in replies]
    assert [(p.error_code, p.base_offset) for p in parts] == [
        (0, 0),
        (0, 1),
        (ErrorCode.CORRUPT_MESSAGE, -1),
        (0, 4),
        (0, 7),  # z0 took offset 6
        (0, 7),  # the duplicate: the first one's offset, nothing appended
        (0, 8),
        (0, 9),
        (0, 10),
        (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1),
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1),
        (0, 12),
    ]
    expected = [b"a0", b"b0", b"b1", b"b2", b"c0", b"c1", b"z0", b"i0", b"d0", b"i1", b"i2"]
    expected += [b"i3", b"f0"]
    eventually(
        lambda: list_offset(cluster.brokers[1].bootstrap, "piped", 0).offset == 13,
        budget_s=20,
        what="the high watermark at the log end",
    )
    leader_bytes = segment_bytes(cluster.brokers[1].log_dir, "piped", 0)
    values = values_by_offset(leader_bytes)
    assert [values[offset] for offset in sorted(values)] == expected
    assert sorted(values) == list(range(13))
    for node in (2, 3):
        eventually(
            lambda n=node: segment_bytes(cluster.brokers[n].log_dir, "piped", 0) == leader_bytes,
            budget_s=20,
            what=f"replica {node} of piped-0",
        )


def test_pipelined_acks_all_produces_wait_for_the_isr_together(cluster, zk_view):
    # Consecutive acks=all produces read together are appended as one write too, each
    # answered (in request order) once the ISR has its last record, or with its error; an
    # acks=1 one among them is answered at once, in its place. With an ISR follower silent,
    # every one of them times out, in order, appended and not acknowledged.
    from wire import encode_request, read_response

    from trio_broker.protocol._generated.produce_request import ProduceRequest
    from trio_broker.protocol.record_codec import build_batch

    ctl = ControllerStub(cluster, zk_view)
    ctl.create_topic("pipedall", {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
    assert ctl.send([("pipedall", 0)])[1].error_code == 0
    ts = 1_700_000_000_000

    def batch(*values: bytes, **idempotent: int) -> bytes:
        return build_batch([(b"k", v, (), ts) for v in values], **idempotent)

    def send_together(sends: list[tuple[int, bytes]], first_cid: int, timeout_ms: int) -> list:
        frames = [
            encode_request(
                ProduceRequest(
                    acks=acks,
                    timeout_ms=timeout_ms,
                    topic_data=[_topic_data("pipedall", 0, records)],
                ),
                9,
                first_cid + i,
            )
            for i, (acks, records) in enumerate(sends)
        ]
        host, port = cluster.brokers[1].bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=60) as sock:
            sock.sendall(b"".join(frames))
            replies = [read_response(sock, 0, 9) for _ in sends]
        assert [cid for cid, _ in replies] == [first_cid + i for i in range(len(sends))]
        parts = [body.responses[0].partition_responses[0] for _, body in replies]
        return [(p.error_code, p.base_offset) for p in parts]

    corrupt = bytearray(batch(b"bad"))
    corrupt[-1] ^= 0xFF  # the CRC no longer matches
    i0 = batch(b"i0", producer_id=7100, producer_epoch=0, base_sequence=0)
    answers = send_together(
        [
            (-1, batch(b"a0")),
            (-1, batch(b"b0", b"b1")),
            (-1, bytes(corrupt)),
            (-1, batch(b"c0")),
            (1, batch(b"x0")),  # answered at once, between two acks=all groups
            (-1, batch(b"d0")),
            (-1, i0),
            (-1, i0),  # resent: a duplicate
            (-1, batch(b"i1", producer_id=7100, producer_epoch=0, base_sequence=1)),
        ],
        500,
        30000,
    )
    assert answers == [
        (0, 0),
        (0, 1),
        (ErrorCode.CORRUPT_MESSAGE, -1),
        (0, 3),
        (0, 4),
        (0, 5),
        (0, 6),
        (0, 6),  # the duplicate: the first one's offset, nothing appended
        (0, 7),
    ]
    # Answered only once the ISR had them: the HW is past every acknowledged record.
    assert list_offset(cluster.brokers[1].bootstrap, "pipedall", 0).offset == 8
    leader_bytes = segment_bytes(cluster.brokers[1].log_dir, "pipedall", 0)
    values = values_by_offset(leader_bytes)
    assert [values[o] for o in range(8)] == [
        b"a0", b"b0", b"b1", b"c0", b"x0", b"d0", b"i0", b"i1"
    ]  # fmt: skip
    for node in (2, 3):
        eventually(
            lambda n=node: segment_bytes(cluster.brokers[n].log_dir, "pipedall", 0) == leader_bytes,
            budget_s=20,
            what=f"replica {node} of pipedall-0",
        )

    # Broker 3 stops; with replica.lag.time.max.ms at its 30 s default it stays in the ISR
    # for now, so the HW cannot pass what follows within the produces' timeout_ms.
    cluster.brokers[3].stop()
    answers = send_together(
        [(-1, batch(b"e0")), (-1, batch(b"e1", b"e2")), (-1, batch(b"e3"))], 600, 500
    )
    assert answers == [
        (ErrorCode.REQUEST_TIMED_OUT, 8),  # appended, not acknowledged
        (ErrorCode.REQUEST_TIMED_OUT, 9),
        (ErrorCode.REQUEST_TIMED_OUT, 11),
    ]
    assert list_offset(cluster.brokers[1].bootstrap, "pipedall", 0).offset == 8
