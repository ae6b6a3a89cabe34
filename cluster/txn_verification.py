"""Transaction verification by a partition leader that is not the coordinator (KIP-890).

Before a producer's first transactional batch of a transaction is appended to a partition,
the leader makes sure the partition is part of that producer's ongoing transaction, so a
batch that arrives late (after its transaction was aborted) or from a producer that never
added the partition cannot open a transaction no coordinator will ever end (a "hanging"
transaction that holds the LSO back for good). When this broker coordinates the
transactional id it looks itself (`TransactionCoordinator.verify_produce`); otherwise it
asks the coordinator, the leader of the id's `__transaction_state` partition, with
AddPartitionsToTxn v4 `verify_only` (Kafka's AddPartitionsToTxnManager), through the
transaction marker channel's inter-broker client.

What the producer gets back is what Kafka's ReplicaManager answers: INVALID_TXN_STATE
(not in the transaction), INVALID_PRODUCER_EPOCH (fenced), INVALID_PRODUCER_ID_MAPPING,
and NOT_ENOUGH_REPLICAS (retriable, no metadata refresh) when the coordinator could not
answer (moving, loading, busy with the previous transaction, unreachable).

Between the answer and the append the handler awaited, so `TxnGuard` (the producer's
state in the partition when verification started) is checked again before appending: a
marker written meanwhile ends the transaction that was verified, and the batch is refused
as retriable, to be verified again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from trio_broker.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from trio_broker.broker import Broker

logger = logging.getLogger(__name__)

__all__ = ["txn_guard", "verify_with_coordinator"]

TopicPartition = tuple[str, int]

# Coordinator answers that mean "not now" (Kafka turns them into NOT_ENOUGH_REPLICAS so
# that every client retries the produce).
_RETRY_LATER = frozenset(
    {
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.REQUEST_TIMED_OUT,
    }
)


def txn_guard(log: Any, producer_id: int) -> tuple | None:
    """The producer's state in `log` as a marker changes it (epoch, coordinator epoch,
    timestamp of its last batch or marker); None when the partition has never seen it."""
    entry = log.producer_state.last_entry(producer_id)
    if entry is None:
        return None
    return (entry.producer_epoch, entry.coordinator_epoch, entry.last_timestamp)


def _for_producer(code: ErrorCode) -> ErrorCode:
    if code == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code in _RETRY_LATER:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    return code


def _coordinator_node(broker: Broker, transactional_id: str) -> int | None:
    from trio_broker.cluster.transaction_records import TRANSACTION_STATE_TOPIC

    coordinator = broker.transaction_coordinator
    topic = broker.metadata.topics.get(TRANSACTION_STATE_TOPIC)
    state = (
        topic.partitions.get(coordinator.store.partition_for(transactional_id)) if topic else None
    )
    if state is None or state.leader < 0 or state.leader not in broker.metadata.brokers:
        return None
    return state.leader


async def verify_with_coordinator(
    broker: Broker,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[TopicPartition],
) -> dict[TopicPartition, ErrorCode]:
    """Ask the remote coordinator whether `partitions` are in the producer's ongoing
    transaction; the code per partition, as the producer should get it."""
    from trio_broker.protocol._generated.add_partitions_to_txn_request import (
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnTopic,
        AddPartitionsToTxnTransaction,
    )

    wanted = list(dict.fromkeys(partitions))
    markers = broker.transaction_coordinator.markers
    node = _coordinator_node(broker, transactional_id)
    if node is None or markers is None:
        return dict.fromkeys(wanted, ErrorCode.NOT_ENOUGH_REPLICAS)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in wanted:
        by_topic.setdefault(topic, []).append(partition)
    request = AddPartitionsToTxnRequest(
        transactions=[
            AddPartitionsToTxnTransaction(
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                verify_only=True,
                topics=[
                    AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()
                ],
            )
        ]
    )
    try:
        response = await markers.send_to_broker(node, request, min_version=4)
    except KafkaError as exc:
        logger.info(
            "verifying the transaction of %s with coordinator %d failed: %s",
            transactional_id,
            node,
            exc,
        )
        return dict.fromkeys(wanted, ErrorCode.NOT_ENOUGH_REPLICAS)
    if response is None:
        return dict.fromkeys(wanted, ErrorCode.NOT_ENOUGH_REPLICAS)
    if response.error_code:
        return dict.fromkeys(wanted, _for_producer(ErrorCode(response.error_code)))
    codes: dict[TopicPartition, ErrorCode] = {}
    for result in response.results_by_transaction:
        if result.transactional_id != transactional_id:
            continue
        for topic in result.topic_results:
            for p in topic.results_by_partition:
                codes[(topic.name, p.partition_index)] = _for_producer(
                    ErrorCode(p.partition_error_code)
                )
    return {tp: codes.get(tp, ErrorCode.NOT_ENOUGH_REPLICAS) for tp in wanted}
