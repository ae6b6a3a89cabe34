"""Waiting for the ISR after a leader's own appends (Kafka's appendRecords with acks=-1) in
a cluster: the transaction coordinator's `__transaction_state` writes and the markers a
WriteTxnMarkers request (or the local coordinator) appends.

Both shapes park in the replica manager's produce purgatory, like an acks=all produce
(`delayed_produce.DelayedProduce` decides each partition): `respond_when_replicated` for a
request that must not hold a handler task (the answer goes through `request.respond`), and
`replicated` for the coordinator's own tasks, which may await. Each waits until the high
watermark of every named partition reaches that partition's log end offset as it is when
called, so callers call right after their append, with no checkpoint in between.

Codes per partition: NONE; NOT_LEADER_OR_FOLLOWER (leadership lost or never held);
NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR shrank below min.insync.replicas meanwhile);
REQUEST_TIMED_OUT. Only used with a replica manager (`zookeeper.connect`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import trio

from trio_broker.cluster.replication.delayed_produce import DelayedProduce, _Waiting
from trio_broker.cluster.replication.purgatory import DelayedOperation
from trio_broker.errors import ErrorCode
from trio_broker.server.requests import DELAYED

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request

__all__ = ["map_for_coordinator", "replicated", "respond_when_replicated"]

TopicPartition = tuple[str, int]


def _delayed(broker: Broker, partitions: Iterable[TopicPartition]) -> DelayedProduce:
    from trio_broker.protocol._generated.produce_response import PartitionProduceResponse

    rm = broker.replica_manager
    waiting = []
    for topic, partition in dict.fromkeys(partitions):
        slot = PartitionProduceResponse(index=partition)
        part = rm.leader_partition(topic, partition)
        if part is None:
            slot.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            waiting.append(_Waiting(topic, partition, 0, -1, slot, done=True))
        else:
            required = part.log.log_end_offset
            waiting.append(_Waiting(topic, partition, required, part.leader_generation, slot))
    return DelayedProduce(broker=broker, request=None, response=None, waiting=waiting)


def _codes(delayed: DelayedProduce) -> dict[TopicPartition, ErrorCode]:
    return {
        (w.topic, w.partition): ErrorCode(w.answer.error_code)
        if w.done
        else ErrorCode.REQUEST_TIMED_OUT
        for w in delayed.waiting
    }


def _park(
    broker: Broker, delayed: DelayedProduce, timeout_ms: int, complete: Callable[[], Any]
) -> None:
    broker.replica_manager.produce_purgatory.park(
        DelayedOperation(
            keys=tuple((w.topic, w.partition) for w in delayed.waiting),
            deadline=trio.current_time() + max(timeout_ms, 0) / 1000,
            try_complete=delayed.try_complete,
            complete=complete,
        )
    )


async def replicated(
    broker: Broker, partitions: Iterable[TopicPartition], timeout_ms: int
) -> dict[TopicPartition, ErrorCode]:
    """Wait until the ISR of each partition has this leader's log end (as it is now)."""
    delayed = _delayed(broker, partitions)
    if not delayed.try_complete():
        decided = trio.Event()

        async def complete() -> None:
            delayed.try_complete()
            decided.set()

        _park(broker, delayed, timeout_ms, complete)
        await decided.wait()
    return _codes(delayed)


def respond_when_replicated(
    broker: Broker,
    request: Request,
    partitions: Iterable[TopicPartition],
    timeout_ms: int,
    answer: Callable[[dict[TopicPartition, ErrorCode]], Any],
) -> Any:
    """`answer(codes)` now, or DELAYED with `request` answered once decided."""
    delayed = _delayed(broker, partitions)
    if delayed.try_complete():
        return answer(_codes(delayed))

    async def complete() -> None:
        delayed.try_complete()
        await request.respond(answer(_codes(delayed)))

    _park(broker, delayed, timeout_ms, complete)
    return DELAYED


def map_for_coordinator(code: ErrorCode) -> ErrorCode:
    """A coordinator's failed append as its client sees it (Kafka's TransactionStateManager
    and GroupMetadataManager): leadership gone is NOT_COORDINATOR, the rest retriable."""
    if code == ErrorCode.NONE:
        return code
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    return ErrorCode.COORDINATOR_NOT_AVAILABLE
