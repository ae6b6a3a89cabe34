"""Crashes: kill -9 in the middle of a transaction, and a coordinator that wrote
PrepareCommit but died before the markers. After the restart read_committed consumers see
exactly the committed transactions, the .txnindex is rebuilt, and the LSO moves on."""

from __future__ import annotations

import socket

import attrs
from confluent_kafka import Consumer, Producer, TopicPartition
from txntest_helpers import consume_all, create_topic, read_txn_index
from wire import roundtrip

from trio_broker.broker import Broker
from trio_broker.cluster.transaction_markers import write_marker
from trio_broker.cluster.transaction_metadata import TransactionState
from trio_broker.config import BrokerConfig
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.describe_producers_request import (
    DescribeProducersRequest,
    TopicRequest,
)
from trio_broker.protocol._generated.describe_transactions_request import (
    DescribeTransactionsRequest,
)
from trio_broker.testing import BrokerProcess, BrokerThread

SMALL = {
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
}


def _state(host: str, port: int, txn_id: str):
    with socket.create_connection((host, port), timeout=10) as sock:
        request = DescribeTransactionsRequest(transactional_ids=[txn_id])
        return roundtrip(sock, request, 0).transaction_states[0]


def test_kill_9_mid_transaction(tmp_path):
    overrides = {"log.dirs": str(tmp_path), **SMALL}
    broker = BrokerProcess(overrides)
    try:
        create_topic(broker.bootstrap, "crashy", 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "crash-1"})
        producer.init_transactions(15)
        producer.begin_transaction()
        producer.produce("crashy", value=b"committed", partition=0)
        producer.commit_transaction(15)
        producer.begin_transaction()
        producer.produce("crashy", value=b"aborted", partition=0)
        producer.flush(15)
        producer.abort_transaction(15)
        producer.begin_transaction()
        producer.produce("crashy", value=b"open when killed", partition=0)
        producer.flush(15)
        index = tmp_path / "crashy-0" / "00000000000000000000.txnindex"
        written = index.read_bytes()
        assert read_txn_index(index) == [(0, read_txn_index(index)[0][1], 2, 3, 4)]
    finally:
        broker.kill()
    index.unlink()  # recovery must rebuild it from the segment

    broker = BrokerProcess(overrides)
    try:
        assert index.read_bytes() == written
        # The open transaction is still open: read_committed stops at its first offset.
        plain = Producer({"bootstrap.servers": broker.bootstrap})
        plain.produce("crashy", value=b"after restart", partition=0)
        plain.flush(10)
        seen = consume_all(broker.bootstrap, "crashy", 1, "read_committed")
        assert [v for _, _, v in seen] == [b"committed"]
        host, port = broker.bootstrap.split(":")
        assert _state(host, int(port), "crash-1").transaction_state == "Ongoing"
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            request = DescribeProducersRequest(
                topics=[TopicRequest(name="crashy", partition_indexes=[0])]
            )
            (part,) = roundtrip(sock, request, 0).topics[0].partitions
        # The open transaction, restored by recovery, starts at offset 4.
        assert [p.current_txn_start_offset for p in part.active_producers] == [4]

        # The producer comes back: InitProducerId aborts the transaction left open.
        again = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "crash-1"})
        again.init_transactions(15)
        seen = consume_all(broker.bootstrap, "crashy", 1, "read_committed")
        assert [v for _, _, v in seen] == [b"committed", b"after restart"]
        entries = read_txn_index(index)
        assert [(first, last) for _, _, first, last, _ in entries] == [(2, 3), (4, 6)]
        everything = consume_all(broker.bootstrap, "crashy", 1, "read_uncommitted")
        assert len(everything) == 4
    finally:
        broker.kill()


def test_prepare_commit_with_missing_markers_completes_after_restart(tmp_path):
    config = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path), **SMALL}
    with BrokerThread(config) as broker:
        create_topic(broker.bootstrap, "decided", 2)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "dies"})
        producer.init_transactions(15)
        producer.begin_transaction()
        for i in range(4):
            producer.produce("decided", value=b"%d" % i, partition=i % 2)
        producer.flush(15)
        # Offsets committed in the transaction: pending until its marker.
        group = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-decided"})
        producer.send_offsets_to_transaction(
            [TopicPartition("decided", 0, 42)], group.consumer_group_metadata(), 15
        )
        group.close()
    assert consume_all_offline_state(tmp_path, "dies") == TransactionState.ONGOING

    # What the coordinator writes first when EndTxn(commit) arrives, then the crash: the
    # PrepareCommit record is in __transaction_state, a marker in one partition only.
    offline = Broker(BrokerConfig.from_properties(config))
    try:
        store = offline.transaction_coordinator.store
        partition = store.partition_for("dies")
        store.loaded.add(partition)
        meta = store.read_partition(partition)["dies"]
        prepared = attrs.evolve(meta, partitions=set(meta.partitions))
        prepared.transition_to(TransactionState.PREPARE_COMMIT, meta.txn_last_update_timestamp_ms)
        store.append(prepared)
        # ... and the crash came between the two data partitions' markers.
        code = write_marker(
            offline,
            "decided",
            0,
            producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
            coordinator_epoch=0,
            commit=True,
        )
        assert code == ErrorCode.NONE
    finally:
        offline.log_manager.close()

    with BrokerThread(config) as broker:
        # Loading __transaction_state finishes the commit: markers, then CompleteCommit.
        assert _state(broker.host, broker.port, "dies").transaction_state == "CompleteCommit"
        seen = consume_all(broker.bootstrap, "decided", 2, "read_committed")
        assert sorted(v for _, _, v in seen) == [b"0", b"1", b"2", b"3"]
        # The pending offsets were reloaded from __consumer_offsets and applied by the marker.
        reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-decided"})
        try:
            (committed,) = reader.committed([TopicPartition("decided", 0)], timeout=10)
        finally:
            reader.close()
        assert committed.offset == 42
        for p in (0, 1):
            assert not (tmp_path / f"decided-{p}" / "00000000000000000000.txnindex").exists()


def consume_all_offline_state(log_dir, txn_id: str) -> TransactionState:
    """The state of `txn_id` as the stopped broker's __transaction_state holds it."""
    offline = Broker(
        BrokerConfig.from_properties(
            {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(log_dir), **SMALL}
        )
    )
    try:
        store = offline.transaction_coordinator.store
        return store.read_partition(store.partition_for(txn_id))[txn_id].state
    finally:
        offline.log_manager.close()
