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

The round trip is not made in a handler task: the Produce request is answered later
(DELAYED) from a task of the replica manager's, which verifies, appends and answers, as
Kafka's AddPartitionsToTxnManager calls back into the append. Between the answer and the
append other requests ran, so `TxnGuard` (the producer's
state in the partition when verification started) is checked again before appending: a
marker written meanwhile ends the transaction that was verified, and the batch is refused
as retriable, to be verified again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from trio_broker.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request

logger = logging.getLogger(__name__)

__all__ = ["txn_guard", "verify_then_append", "verify_with_coordinator"]

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
    from trio_broker.cluster.transactions.records import TRANSACTION_STATE_TOPIC

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


def _to_verify(
    broker: Broker, body: Any
) -> tuple[dict[tuple[int, int], list[TopicPartition]], dict[TopicPartition, tuple | None]]:
    """The partitions of a Produce request whose transactional batch only the remote
    coordinator can vouch for, by (producer id, epoch), and the producer's state in each
    now. Not those where the producer's transaction is already open, nor those this
    broker coordinates (checked when appending), nor what append_partition refuses anyway."""
    from trio_broker.protocol.records import HEADER_SIZE, InvalidRecords, read_header

    txn = getattr(broker, "transaction_coordinator", None)
    asks: dict[tuple[int, int], list[TopicPartition]] = {}
    guards: dict[TopicPartition, tuple | None] = {}
    if txn is None:
        return asks, guards
    replicas = broker.replica_manager
    for topic in body.topic_data:
        for p in topic.partition_data:
            leader = replicas.leader_partition(topic.name, p.index)
            records = p.records
            if leader is None or records is None or len(records) < HEADER_SIZE:
                continue
            try:
                header = read_header(records)
            except InvalidRecords:
                continue
            pid, tp = header.producer_id, (topic.name, p.index)
            if not header.is_transactional or pid in leader.log.producer_state.ongoing:
                continue
            if (
                txn.verify_produce(body.transactional_id, pid, header.producer_epoch, tp)
                is not None
            ):
                continue  # coordinated here
            guards[tp] = txn_guard(leader.log, pid)
            asks.setdefault((pid, header.producer_epoch), []).append(tp)
    return asks, guards


def verify_then_append(
    broker: Broker, request: Request, append: Callable[[dict | None], Any]
) -> bool:
    """When some partition of the Produce `request` needs the remote coordinator: start a
    task that asks it, then calls `append(verified)` ({partition: (code, guard)}) and
    answers the request with what that returns; True (the caller returns DELAYED). False
    when nothing needs asking (or no task can be started): the caller appends now."""
    asks, guards = _to_verify(broker, request.body)
    replicas = broker.replica_manager
    if not asks or getattr(replicas, "_nursery", None) is None:
        return False
    replicas.spawn(_verify_and_append, broker, request, asks, guards, append)
    return True


async def _verify_and_append(
    broker: Broker,
    request: Request,
    asks: dict[tuple[int, int], list[TopicPartition]],
    guards: dict[TopicPartition, tuple | None],
    append: Callable[[dict | None], Any],
) -> None:
    from trio_broker.server.requests import DELAYED

    body = request.body
    verified: dict[TopicPartition, tuple[ErrorCode, tuple | None]] = {}
    try:
        for (pid, epoch), tps in asks.items():
            codes = await verify_with_coordinator(broker, body.transactional_id, pid, epoch, tps)
            verified.update({tp: (code, guards[tp]) for tp, code in codes.items()})
    except Exception:
        # A bug must not take the replica manager down: the producer retries.
        logger.exception("verifying the transaction of %s failed", body.transactional_id)
        verified = {tp: (ErrorCode.NOT_ENOUGH_REPLICAS, None) for tp in guards}
    try:
        response = append(verified)
    except Exception:
        logger.exception("[conn %s] produce after verification failed", request.connection.id)
        request.connection.close()
        return
    if response is not DELAYED:
        await request.respond(response)
