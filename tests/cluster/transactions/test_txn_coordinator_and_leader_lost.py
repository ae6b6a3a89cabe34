"""A decided commit whose marker cannot land, then its coordinator killed (real ZooKeeper,
four broker processes, confluent-kafka).

The commit is decided (PrepareCommit in the ISR of `__transaction_state`, commit_transaction
returned) while the leader of one of its partitions is frozen (SIGSTOP), so that partition's
marker cannot be written; then the coordinator's broker is killed (kill -9). The new leader
of the state partition loads PrepareCommit, answers the producer CONCURRENT_TRANSACTIONS
meanwhile, sends the markers again to each partition's current leader (the frozen broker's
partition gets a new leader once its ZooKeeper session expires) and completes the commit;
the producer carries on and a read_committed consumer reads every committed record once.

Why this once hung (about 1 run in 3): after the kill, librdkafka sends FindCoordinator to
one broker it holds a live connection to, chosen at random, and sends no other query until
that one is answered. When it picked the frozen broker (its TCP connection stays up) the
query waited socket.timeout.ms (60 s by default), longer than the transaction's records
may wait, whatever the brokers did. The producer here sets socket.timeout.ms to 10 s, as a
user who expects frozen brokers would.
"""

from __future__ import annotations

import struct
import time

from clustertest_helpers import FAST_SESSION, all_see, eventually, metadata
from confluent_kafka import Producer
from failover_helpers import create_topic, partitions, read_committed, wait_for_leaders
from replication_helpers import segment_bytes

from trio_broker.protocol.record_codec import iter_records
from trio_broker.protocol.records import iter_batches
from trio_broker.testing import KafkaCluster

TOPIC = "ledger"
PARTITIONS = 4
TXN_ID = "ledger-writer"


def test_markers_pending_when_the_coordinator_dies_are_sent_by_the_new_one(zookeeper, tmp_path):
    overrides = {
        **FAST_SESSION,
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.num.partitions": "1",
        "transaction.state.log.min.isr": "2",
        "request.timeout.ms": "3000",
    }
    with KafkaCluster(
        zookeeper, base_dir=tmp_path, size=4, overrides=overrides, processes=True
    ) as cluster:
        bootstrap = cluster.bootstrap
        all_see(cluster.brokers)  # every broker registered: RF 3 can be placed
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": TXN_ID,
                "transaction.timeout.ms": 60000,
                # Not 30 s on a request to the frozen broker before trying its successor.
                "request.timeout.ms": 5000,
                # librdkafka asks one broker at a time for the coordinator, and none other
                # until that one answers: the frozen broker (its connection stays up) would
                # hold the query for the default 60 s, past transaction.timeout.ms.
                "socket.timeout.ms": 10000,
                "retry.backoff.ms": 50,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        producer.init_transactions(60)
        state = partitions(bootstrap, "__transaction_state")[0]
        coordinator = state.leader
        # The broker outside the state partition's replicas: frozen, it leaves the
        # coordinator's own writes alone.
        (frozen,) = set(cluster.brokers) - set(state.replicas)
        others = sorted(set(state.replicas) - {coordinator})
        # Partition 0 led by the coordinator, 1 by the broker to freeze, 2 and 3 by the
        # others; the survivors can lead all of them with an ISR of two.
        create_topic(
            bootstrap,
            TOPIC,
            replica_assignment=[
                [coordinator, *others],
                [frozen, *others],
                [others[0], others[1], coordinator],
                [others[1], others[0], coordinator],
            ],
            config={"min.insync.replicas": "2"},
        )
        wait_for_leaders(bootstrap, TOPIC, PARTITIONS, isr_size=3)
        eventually(
            lambda: (
                len(producer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions) == PARTITIONS
            ),
            budget_s=20,
            what="the producer sees the partitions",
        )

        def records(k: int) -> list[tuple[int, bytes]]:
            return [(p, b"t%05d-p%d-%d" % (k, p, i)) for i in range(3) for p in range(PARTITIONS)]

        def produce(values: list[tuple[int, bytes]]) -> None:
            producer.begin_transaction()
            failed: list = []
            for p, value in values:
                producer.produce(
                    TOPIC, value, partition=p, on_delivery=lambda e, m: e and failed.append(e)
                )
            assert producer.flush(60) == 0
            assert not failed, failed[:3]

        committed = records(0)
        produce(committed)
        producer.commit_transaction(30)
        produce(records(1))
        producer.abort_transaction(30)

        decided = records(2)
        produce(decided)
        cluster.brokers[frozen].pause()
        try:
            producer.commit_transaction(30)  # PrepareCommit is in the ISR
            cluster.brokers[coordinator].kill()  # the marker for partition 1 never went out
            committed += decided

            # The producer finds the new coordinator and goes on.
            started = time.monotonic()
            produce(records(3))
            producer.commit_transaction(60)
            took = time.monotonic() - started
            committed += records(3)
            produce(records(4))
            producer.abort_transaction(60)

            survivors = [cluster.brokers[n] for n in others]
            new = partitions(survivors[0].bootstrap, "__transaction_state")[0].leader
            assert new in others
            assert any(
                f"completing transaction of {TXN_ID}" in line for line in cluster.brokers[new].lines
            ), "the new coordinator found no prepared transaction"

            expected = {v for _, v in committed}
            read = read_committed(
                ",".join(b.bootstrap for b in survivors), TOPIC, PARTITIONS, expected
            )
            values = [v for records in read.values() for v in records]
            assert set(values) == expected
            assert len(values) == len(expected)
            for p in range(PARTITIONS):
                assert read[p] == sorted(v for q, v in committed if q == p)
            # The new coordinator writes in its own epoch (the leader epoch of the state
            # partition), not the one its metadata cache still had when it took over: its
            # records carry it, and so do its markers (their coordinator epoch).
            (state_now,) = [
                p
                for t in metadata(survivors[0].bootstrap).topics
                if t.name == "__transaction_state"
                for p in t.partitions
            ]
            epoch = state_now.leader_epoch
            assert epoch >= 1
            state_log = segment_bytes(cluster.brokers[new].log_dir, "__transaction_state", 0)
            assert [h.partition_leader_epoch for _, h in iter_batches(state_log)][-3:] == [
                epoch
            ] * 3  # its last records
            data = segment_bytes(cluster.brokers[new].log_dir, TOPIC, 1)
            markers = [
                struct.unpack_from(">hi", record.value)[1]  # version, coordinator epoch
                for pos, h in iter_batches(data)
                if h.is_control
                for record in iter_records(data[pos : pos + h.size])
            ]
            assert markers == [0, 0, epoch, epoch, epoch], markers
            print(f"the next transaction committed {took:.1f} s after the kill")
        finally:
            cluster.brokers[frozen].resume()
