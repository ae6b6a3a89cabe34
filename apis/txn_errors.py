"""Shared by the transactional APIs: the coordinator, and error codes as each version knows them.

PRODUCER_FENCED (KIP-588) is answered only to versions that know it; older ones get
INVALID_PRODUCER_EPOCH, as Kafka's KafkaApis does: InitProducerId from v4,
AddPartitionsToTxn, AddOffsetsToTxn and EndTxn from v2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.cluster.transaction_coordinator import TransactionCoordinator

__all__ = ["coordinator", "for_version"]


def for_version(code: int, api_version: int, fenced_from: int) -> int:
    if code == ErrorCode.PRODUCER_FENCED and api_version < fenced_from:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


def coordinator(broker: Broker) -> TransactionCoordinator | None:
    """The broker's transaction coordinator (None for a broker built without one)."""
    return getattr(broker, "transaction_coordinator", None)
