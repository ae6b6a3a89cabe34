"""Shared by the transactional APIs: the coordinator, and error codes as each version knows them.

PRODUCER_FENCED (KIP-588) is answered only to versions that know it; older ones get
INVALID_PRODUCER_EPOCH, as Kafka's KafkaApis does: InitProducerId from v4,
AddPartitionsToTxn, AddOffsetsToTxn and EndTxn from v2.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from trio_broker.errors import ErrorCode

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.cluster.transactions.transaction_coordinator import TransactionCoordinator
    from trio_broker.server.requests import Request

__all__ = ["after_state_write", "coordinator", "for_version"]


def for_version(code: int, api_version: int, fenced_from: int) -> int:
    if code == ErrorCode.PRODUCER_FENCED and api_version < fenced_from:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


def coordinator(broker: Broker) -> TransactionCoordinator | None:
    """The broker's transaction coordinator (None for a broker built without one)."""
    return getattr(broker, "transaction_coordinator", None)


def after_state_write(
    broker: Broker,
    request: Request,
    transactional_ids: Iterable[str],
    answer: Callable[[dict[str, ErrorCode]], Any],
) -> Any:
    """`answer({transactional id: code})` once the coordinator's writes for these ids are
    in the ISR of their `__transaction_state` partitions (Kafka appends them with acks=-1):
    NONE, or the append's failure as a coordinator error (NOT_COORDINATOR,
    COORDINATOR_NOT_AVAILABLE). On one broker, at once with NONE. Returns the response or
    DELAYED."""
    ids = list(dict.fromkeys(transactional_ids))
    if getattr(broker, "replica_manager", None) is None or not ids:
        return answer(dict.fromkeys(ids, ErrorCode.NONE))
    from trio_broker.cluster.replication.isr_wait import (
        map_for_coordinator,
        respond_when_replicated,
    )
    from trio_broker.cluster.transactions.records import TRANSACTION_STATE_TOPIC

    store = broker.transaction_coordinator.store
    where = {t: (TRANSACTION_STATE_TOPIC, store.partition_for(t)) for t in ids}

    def decided(codes: dict[tuple[str, int], ErrorCode]) -> Any:
        return answer({t: map_for_coordinator(codes[tp]) for t, tp in where.items()})

    return respond_when_replicated(
        broker, request, where.values(), broker.config.request_timeout_ms, decided
    )
