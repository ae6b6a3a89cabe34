"""An abandoned transaction is aborted after its timeout; the transactional APIs answer bad
input with Kafka's error codes and leave the log alone."""

from __future__ import annotations

import socket

from confluent_kafka import Producer
from txntest_helpers import consume_all, create_topic, wait_for
from wire import roundtrip

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.add_partitions_to_txn_request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
)
from trio_broker.protocol._generated.describe_transactions_request import (
    DescribeTransactionsRequest,
)
from trio_broker.protocol._generated.end_txn_request import EndTxnRequest
from trio_broker.protocol._generated.find_coordinator_request import FindCoordinatorRequest
from trio_broker.protocol._generated.init_producer_id_request import InitProducerIdRequest
from trio_broker.protocol._generated.list_transactions_request import ListTransactionsRequest
from trio_broker.protocol._generated.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from trio_broker.protocol._generated.write_txn_markers_request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from trio_broker.protocol.record_codec import build_batch

FAST_TIMEOUTS = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100",
    "transaction.max.timeout.ms": "60000",
}


def _connect(broker) -> socket.socket:
    return socket.create_connection((broker.host, broker.port), timeout=10)


def _describe(sock: socket.socket, txn_id: str):
    (state,) = roundtrip(
        sock, DescribeTransactionsRequest(transactional_ids=[txn_id]), 0
    ).transaction_states
    return state


def test_abandoned_transaction_is_aborted_after_its_timeout(kafka_broker_factory):
    broker = kafka_broker_factory(FAST_TIMEOUTS)
    create_topic(broker.bootstrap, "abandoned", 1)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": "walks-away",
            "transaction.timeout.ms": "1000",
            "message.timeout.ms": "1000",
        }
    )
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce("abandoned", value=b"never committed", partition=0)
    producer.flush(10)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce("abandoned", value=b"later", partition=0)
    plain.flush(10)
    with _connect(broker) as sock:
        before = _describe(sock, "walks-away")
        assert before.transaction_state == "Ongoing"
        assert before.topics[0].topic == "abandoned"

        wait_for(
            lambda: _describe(sock, "walks-away").transaction_state == "CompleteAbort",
            what="the timed-out transaction's abort",
        )
        after = _describe(sock, "walks-away")
        # Aborted under a bumped epoch: the producer that walked away is fenced.
        assert (after.producer_id, after.producer_epoch) == (
            before.producer_id,
            before.producer_epoch + 1,
        )
        listed = roundtrip(sock, ListTransactionsRequest(state_filters=["CompleteAbort"]), 1)
        assert [t.transactional_id for t in listed.transaction_states] == ["walks-away"]
    # read_committed consumers move past it: the later record is visible, the aborted not.
    values = [v for _, _, v in consume_all(broker.bootstrap, "abandoned", 1, "read_committed")]
    assert values == [b"later"]


def test_bad_transactional_requests_get_kafka_error_codes(kafka_broker_factory):
    broker = kafka_broker_factory(FAST_TIMEOUTS)
    create_topic(broker.bootstrap, "target", 1)
    log_dir = broker.log_dir / "target-0"
    with _connect(broker) as sock:
        found = roundtrip(sock, FindCoordinatorRequest(key="txn-a", key_type=1), 3)
        assert (found.error_code, found.node_id) == (ErrorCode.NONE, 1)

        too_long = roundtrip(
            sock, InitProducerIdRequest(transactional_id="txn-a", transaction_timeout_ms=60001), 4
        )
        assert too_long.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        init = roundtrip(
            sock,
            InitProducerIdRequest(
                transactional_id="txn-a", transaction_timeout_ms=10000, producer_id=-1
            ),
            4,
        )
        assert init.error_code == ErrorCode.NONE
        pid, epoch = init.producer_id, init.producer_epoch
        before = sorted(p.name for p in log_dir.iterdir())
        size_before = (log_dir / "00000000000000000000.log").stat().st_size

        def end(version: int, **fields) -> int:
            body = {"transactional_id": "txn-a", "producer_id": pid, "producer_epoch": epoch}
            body.update(fields)
            return roundtrip(sock, EndTxnRequest(committed=True, **body), version).error_code

        # EndTxn without a transaction, with a wrong epoch (old and new versions), a wrong id.
        assert end(3) == ErrorCode.INVALID_TXN_STATE
        assert end(3, producer_epoch=epoch + 5) == ErrorCode.PRODUCER_FENCED
        assert end(1, producer_epoch=epoch + 5) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert end(3, producer_id=pid + 100) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert end(3, transactional_id="never-seen") == ErrorCode.INVALID_PRODUCER_ID_MAPPING

        # AddPartitionsToTxn: an unknown partition fails, the others are not attempted.
        added = roundtrip(
            sock,
            AddPartitionsToTxnRequest(
                v3_and_below_transactional_id="txn-a",
                v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[
                    AddPartitionsToTxnTopic(name="target", partitions=[0]),
                    AddPartitionsToTxnTopic(name="missing", partitions=[0]),
                ],
            ),
            3,
        )
        codes = {
            (t.name, p.partition_index): p.partition_error_code
            for t in added.results_by_topic_v3_and_below
            for p in t.results_by_partition
        }
        assert codes == {
            ("target", 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
            ("missing", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        assert _describe(sock, "txn-a").transaction_state == "Empty"

        # Transactional batches that are not part of an ongoing transaction.
        def produce(txn_id, producer_id) -> int:
            batch = build_batch(
                [(None, b"sneaky", (), 0)],
                producer_id=producer_id,
                producer_epoch=epoch,
                base_sequence=0,
                is_transactional=True,
            )
            data = TopicProduceData(
                name="target", partition_data=[PartitionProduceData(index=0, records=batch)]
            )
            request = ProduceRequest(
                transactional_id=txn_id, acks=-1, timeout_ms=5000, topic_data=[data]
            )
            return roundtrip(sock, request, 9).responses[0].partition_responses[0].error_code

        assert produce("txn-a", pid) == ErrorCode.INVALID_TXN_STATE  # partition never added
        assert produce("txn-a", pid + 1) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert produce(None, pid) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

        # WriteTxnMarkers for an unknown partition.
        markers = roundtrip(
            sock,
            WriteTxnMarkersRequest(
                markers=[
                    WritableTxnMarker(
                        producer_id=pid,
                        producer_epoch=epoch,
                        transaction_result=True,
                        topics=[WritableTxnMarkerTopic(name="missing", partition_indexes=[3])],
                        coordinator_epoch=0,
                    )
                ]
            ),
            1,
        )
        assert markers.markers[0].topics[0].partitions[0].error_code == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
        unknown = _describe(sock, "nobody")
        assert unknown.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        # Nothing on disk changed for the data partition.
        assert sorted(p.name for p in log_dir.iterdir()) == before
        assert (log_dir / "00000000000000000000.log").stat().st_size == size_before


def test_add_partitions_v4_batched_and_verify_only(kafka_broker_factory):
    broker = kafka_broker_factory(FAST_TIMEOUTS)
    create_topic(broker.bootstrap, "two", 2)
    with _connect(broker) as sock:
        ids = {}
        for txn_id in ("one", "other"):
            init = roundtrip(
                sock, InitProducerIdRequest(transactional_id=txn_id, transaction_timeout_ms=9000), 4
            )
            ids[txn_id] = (init.producer_id, init.producer_epoch)

        def entry(txn_id, partitions, verify_only, epoch_shift=0):
            pid, epoch = ids[txn_id]
            return AddPartitionsToTxnTransaction(
                transactional_id=txn_id,
                producer_id=pid,
                producer_epoch=epoch + epoch_shift,
                verify_only=verify_only,
                topics=[AddPartitionsToTxnTopic(name="two", partitions=partitions)],
            )

        def send(*transactions):
            answer = roundtrip(sock, AddPartitionsToTxnRequest(transactions=list(transactions)), 4)
            assert answer.error_code == ErrorCode.NONE
            return {
                (r.transactional_id, p.partition_index): p.partition_error_code
                for r in answer.results_by_transaction
                for t in r.topic_results
                for p in t.results_by_partition
            }

        # Two transactions in one request: one adds, the other (a fenced epoch) fails.
        assert send(entry("one", [0], False), entry("other", [1], False, epoch_shift=-1)) == {
            ("one", 0): ErrorCode.NONE,
            ("other", 1): ErrorCode.PRODUCER_FENCED,
        }
        # verify_only: which partitions are in the ongoing transaction; nothing is added.
        assert send(entry("one", [0, 1], True), entry("other", [1], True)) == {
            ("one", 0): ErrorCode.NONE,
            ("one", 1): ErrorCode.INVALID_TXN_STATE,
            ("other", 1): ErrorCode.INVALID_TXN_STATE,
        }
        assert _describe(sock, "one").topics[0].partitions == [0]
        assert _describe(sock, "other").transaction_state == "Empty"
