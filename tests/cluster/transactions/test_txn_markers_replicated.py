"""Transactions' acks=-1 appends in a cluster (thread brokers, real ZooKeeper): WriteTxnMarkers
is answered by the leader only, once every in-sync replica has the marker; the coordinator
answers once every replica of its __transaction_state partition has its record."""

from __future__ import annotations

from clustertest_helpers import all_see, eventually
from failover_helpers import create_topic, leader_of, wait_for_leaders
from replication_helpers import raw, segment_bytes
from wire import request_of

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.add_partitions_to_txn_request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from trio_broker.protocol._generated.write_txn_markers_request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from trio_broker.protocol.records import iter_batches
from trio_broker.testing import KafkaCluster


def _markers(commit: bool, partitions: list[int]) -> WriteTxnMarkersRequest:
    return WriteTxnMarkersRequest(
        markers=[
            WritableTxnMarker(
                producer_id=4242,
                producer_epoch=0,
                transaction_result=commit,
                topics=[WritableTxnMarkerTopic(name="marked", partition_indexes=partitions)],
                coordinator_epoch=7,
            )
        ]
    )


def _codes(response) -> dict[int, int]:
    (marker,) = response.markers
    return {p.partition_index: p.error_code for t in marker.topics for p in t.partitions}


def _control_batches(data: bytes) -> list[tuple[int, int]]:
    """(base offset, producer id) of the control batches in a partition's segments."""
    return [(h.base_offset, h.producer_id) for _, h in iter_batches(data) if h.is_control]


def test_write_txn_markers_answers_once_every_replica_has_the_marker(zookeeper, tmp_path):
    overrides = {"replica.fetch.wait.max.ms": "500", "transaction.state.log.num.partitions": "1"}
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=3, overrides=overrides) as cluster:
        bootstrap = cluster.bootstrap
        all_see(cluster.brokers)  # every broker registered: RF 3 can be placed
        create_topic(bootstrap, "marked", 1, 3, config={"min.insync.replicas": "2"})
        wait_for_leaders(bootstrap, "marked", 1, isr_size=3)
        leader = leader_of(bootstrap, "marked")
        follower = next(n for n in cluster.brokers if n != leader)

        answer = raw(cluster.brokers[follower].bootstrap, _markers(True, [0]), 1)
        assert _codes(answer) == {0: ErrorCode.NOT_LEADER_OR_FOLLOWER}
        assert _control_batches(segment_bytes(cluster.brokers[follower].log_dir, "marked", 0)) == []

        for round_, commit in enumerate((True, False)):
            answer = raw(cluster.brokers[leader].bootstrap, _markers(commit, [0, 9]), 1)
            assert _codes(answer) == {0: ErrorCode.NONE, 9: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
            # Answered: every replica already holds the marker, byte for byte.
            logs = {n: segment_bytes(b.log_dir, "marked", 0) for n, b in cluster.brokers.items()}
            expected = [(offset, 4242) for offset in range(round_ + 1)]
            for node, data in logs.items():
                assert _control_batches(data) == expected, node
            assert len(set(logs.values())) == 1


def test_coordinator_answers_once_every_replica_has_its_state_record(zookeeper, tmp_path):
    """InitProducerId, AddPartitionsToTxn and EndTxn are answered once the records they
    wrote to __transaction_state are on every in-sync replica (Kafka's acks=-1 append)."""
    overrides = {
        "replica.fetch.wait.max.ms": "500",
        "transaction.state.log.num.partitions": "1",
        "transaction.state.log.replication.factor": "3",
    }
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=3, overrides=overrides) as cluster:
        bootstrap = cluster.bootstrap
        all_see(cluster.brokers)  # every broker registered: RF 3 can be placed
        create_topic(bootstrap, "marked", 1, 3)
        wait_for_leaders(bootstrap, "marked", 1, isr_size=3)

        def find() -> int | None:
            found = raw(bootstrap.split(",")[0], request_of(10, key="tx", key_type=1), 3)
            return found.node_id if found.error_code == 0 and found.node_id > 0 else None

        coordinator = cluster.brokers[eventually(find, budget_s=30, what="a coordinator")]
        wait_for_leaders(bootstrap, "__transaction_state", 1, isr_size=3)

        def batches() -> dict[int, int]:
            return {
                n: len(list(iter_batches(segment_bytes(b.log_dir, "__transaction_state", 0))))
                for n, b in cluster.brokers.items()
            }

        def init_producer_id():
            init = raw(
                coordinator.bootstrap,
                request_of(22, transactional_id="tx", transaction_timeout_ms=60000),
                2,
            )
            if init.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                return None
            assert init.error_code == ErrorCode.NONE
            return init

        init = eventually(init_producer_id, budget_s=20, what="InitProducerId")
        assert set(batches().values()) == {1}  # Empty, on every replica
        add = raw(
            coordinator.bootstrap,
            AddPartitionsToTxnRequest(
                v3_and_below_transactional_id="tx",
                v3_and_below_producer_id=init.producer_id,
                v3_and_below_producer_epoch=init.producer_epoch,
                v3_and_below_topics=[AddPartitionsToTxnTopic(name="marked", partitions=[0])],
            ),
            3,
        )
        codes = [
            p.partition_error_code
            for t in add.results_by_topic_v3_and_below
            for p in t.results_by_partition
        ]
        assert codes == [ErrorCode.NONE]
        assert set(batches().values()) == {2}  # Ongoing
        end = raw(
            coordinator.bootstrap,
            request_of(
                26,
                transactional_id="tx",
                producer_id=init.producer_id,
                producer_epoch=init.producer_epoch,
                committed=True,
            ),
            3,
        )
        assert end.error_code == ErrorCode.NONE
        # PrepareCommit everywhere; CompleteCommit follows once the marker is in.
        assert min(batches().values()) >= 3
        eventually(lambda: set(batches().values()) == {4}, budget_s=20, what="CompleteCommit")
        assert all(
            _control_batches(segment_bytes(b.log_dir, "marked", 0)) == [(0, init.producer_id)]
            for b in cluster.brokers.values()
        )
