"""Transaction verification by a partition leader that is not the coordinator (KIP-890):
three thread brokers, real ZooKeeper, confluent-kafka and raw requests.

The leader of the data partition asks the transactional id's coordinator (AddPartitionsToTxn
v4 verify_only) before a producer's first transactional batch there: a partition that was
never added to the transaction, or a fenced epoch, is refused with Kafka's error code and
nothing is appended; once added, the same batch is appended, and the transaction's markers
end it as usual.
"""

from __future__ import annotations

import socket
import time

from clustertest_helpers import all_see, eventually
from confluent_kafka import Consumer, Producer, TopicPartition
from failover_helpers import create_topic, partitions, wait_for_leaders
from wire import roundtrip

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.add_partitions_to_txn_request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from trio_broker.protocol._generated.end_txn_request import EndTxnRequest
from trio_broker.protocol._generated.init_producer_id_request import InitProducerIdRequest
from trio_broker.protocol._generated.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from trio_broker.protocol.record_codec import build_batch
from trio_broker.testing import KafkaCluster

TOPIC = "verified"


def _marks(bootstrap: str, isolation: str) -> list[int]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "marks", "isolation.level": isolation}
    )
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10, cached=False)[1]
            for p in range(2)
        ]
    finally:
        consumer.close()


def _read_committed(bootstrap: str, want: int) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    out: list[tuple[int, bytes]] = []
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(2)])
        deadline = time.monotonic() + 20
        while len(out) < want and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append((msg.partition(), msg.value()))
        assert consumer.poll(1) is None
    finally:
        consumer.close()
    return sorted(out)


def test_leader_verifies_with_the_remote_coordinator(zookeeper, tmp_path):
    overrides = {
        "transaction.state.log.num.partitions": "1",
        "transaction.state.log.replication.factor": "3",
    }
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=3, overrides=overrides) as cluster:
        bootstrap = cluster.bootstrap
        all_see(cluster.brokers)
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "verified-1"})
        producer.init_transactions(30)
        coordinator = partitions(bootstrap, "__transaction_state")[0].leader
        other = min(set(cluster.brokers) - {coordinator})
        # Partition 0 led by a broker that is not the coordinator, 1 by the coordinator.
        create_topic(bootstrap, TOPIC, replica_assignment=[[other], [coordinator]])
        wait_for_leaders(bootstrap, TOPIC, 2)
        eventually(
            lambda: len(producer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions) == 2,
            budget_s=20,
            what="the producer sees the partitions",
        )

        # A real client: both partitions added, verified, committed.
        producer.begin_transaction()
        producer.produce(TOPIC, b"client-0", partition=0)
        producer.produce(TOPIC, b"client-1", partition=1)
        producer.commit_transaction(30)
        assert _read_committed(bootstrap, 2) == [(0, b"client-0"), (1, b"client-1")]
        before = _marks(bootstrap, "read_uncommitted")

        leader = cluster.brokers[other]
        coord = cluster.brokers[coordinator]
        with (
            socket.create_connection((coord.host, coord.port), timeout=10) as to_coordinator,
            socket.create_connection((leader.host, leader.port), timeout=10) as to_leader,
        ):
            for _bump in range(2):  # epoch 1: epoch 0 is a zombie's
                init = roundtrip(
                    to_coordinator,
                    InitProducerIdRequest(
                        transactional_id="raw-txn", transaction_timeout_ms=30000, producer_id=-1
                    ),
                    4,
                )
                assert init.error_code == ErrorCode.NONE
            pid, epoch = init.producer_id, init.producer_epoch
            assert epoch == 1

            def produce(value: bytes, producer_epoch: int) -> tuple[int, int]:
                batch = build_batch(
                    [(None, value, (), int(time.time() * 1000))],
                    producer_id=pid,
                    producer_epoch=producer_epoch,
                    base_sequence=0,
                    is_transactional=True,
                )
                data = TopicProduceData(
                    name=TOPIC, partition_data=[PartitionProduceData(index=0, records=batch)]
                )
                request = ProduceRequest(
                    transactional_id="raw-txn", acks=-1, timeout_ms=5000, topic_data=[data]
                )
                answer = roundtrip(to_leader, request, 9).responses[0].partition_responses[0]
                return answer.error_code, answer.base_offset

            # Never added: the leader asks the coordinator and refuses it.
            assert produce(b"sneaky", epoch)[0] == ErrorCode.INVALID_TXN_STATE
            assert _marks(bootstrap, "read_uncommitted") == before  # nothing appended

            added = roundtrip(
                to_coordinator,
                AddPartitionsToTxnRequest(
                    v3_and_below_transactional_id="raw-txn",
                    v3_and_below_producer_id=pid,
                    v3_and_below_producer_epoch=epoch,
                    v3_and_below_topics=[AddPartitionsToTxnTopic(name=TOPIC, partitions=[0])],
                ),
                3,
            )
            assert (
                added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
                == 0
            )
            # An older epoch of the same producer: fenced, still nothing appended.
            assert produce(b"zombie", 0)[0] == ErrorCode.INVALID_PRODUCER_EPOCH
            assert _marks(bootstrap, "read_uncommitted") == before
            # Added: verified and appended where the log ended.
            assert produce(b"aborted", epoch) == (ErrorCode.NONE, before[0])
            # Open: the LSO holds at it.
            assert _marks(bootstrap, "read_committed")[0] == before[0]
            ended = roundtrip(
                to_coordinator,
                EndTxnRequest(
                    transactional_id="raw-txn",
                    producer_id=pid,
                    producer_epoch=epoch,
                    committed=False,
                ),
                3,
            )
            assert ended.error_code == ErrorCode.NONE
        # The abort marker reached the leader: the LSO moves on, the record is never read.
        eventually(
            lambda: _marks(bootstrap, "read_committed") == _marks(bootstrap, "read_uncommitted"),
            budget_s=20,
            what="the LSO at the high watermark",
        )
        assert _read_committed(bootstrap, 2) == [(0, b"client-0"), (1, b"client-1")]
