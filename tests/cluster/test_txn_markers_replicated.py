"""WriteTxnMarkers in a cluster (thread brokers, real ZooKeeper): answered by the leader
only, and only once every in-sync replica has the marker (acks=-1)."""

from __future__ import annotations

from failover_helpers import create_topic, leader_of, wait_for_leaders
from replication_helpers import raw, segment_bytes

from trio_broker.errors import ErrorCode
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
