"""Error codes of the transactional APIs as each request version knows them.

PRODUCER_FENCED (KIP-588) is answered only to versions that know it; older ones get
INVALID_PRODUCER_EPOCH, as Kafka's KafkaApis does: InitProducerId from v4,
AddPartitionsToTxn, AddOffsetsToTxn and EndTxn from v2.
"""

from __future__ import annotations

from trio_broker.errors import ErrorCode

__all__ = ["for_version"]


def for_version(code: int, api_version: int, fenced_from: int) -> int:
    if code == ErrorCode.PRODUCER_FENCED and api_version < fenced_from:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


def coordinator(broker):  # noqa: ANN001, ANN201 - the broker's TransactionCoordinator or None
    return getattr(broker, "transaction_coordinator", None)
