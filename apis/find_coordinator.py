"""FindCoordinator (key 10): this broker coordinates every group (a cluster of one).

v4+ asks for several keys at once (KIP-699). Transactional ids (key type 1) are answered
by the transaction coordinator's broker (this one), creating `__transaction_state` on
first use as Kafka does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.apis.endpoints import node_on_listener
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.find_coordinator_response import (
    Coordinator,
    FindCoordinatorResponse,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request

GROUP, TRANSACTION = 0, 1


def _find(broker: Broker, key: str, key_type: int, listener: str) -> Coordinator:
    node = broker.metadata.brokers.get(broker.node_id)
    if node is not None:
        node = node_on_listener(broker, node, listener)
    error = ErrorCode.NONE
    if key_type == GROUP:
        coordinator = broker.group_coordinator
        try:
            coordinator.store.ensure_topic()
        except KafkaError as exc:
            # Kafka answers COORDINATOR_NOT_AVAILABLE when the offsets topic cannot be
            # created; a full disk (KAFKA_STORAGE_ERROR) is one way that happens.
            error = (
                ErrorCode.COORDINATOR_NOT_AVAILABLE
                if exc.code == ErrorCode.KAFKA_STORAGE_ERROR
                else exc.code
            )
        if not error and not key:
            error = ErrorCode.INVALID_REQUEST
    elif key_type == TRANSACTION and getattr(broker, "transaction_coordinator", None) is not None:
        try:
            broker.transaction_coordinator.store.ensure_topic()
        except KafkaError as exc:
            error = exc.code
        if not error and not key:
            error = ErrorCode.INVALID_REQUEST
    else:
        error = (
            ErrorCode.COORDINATOR_NOT_AVAILABLE
            if key_type == TRANSACTION
            else ErrorCode.INVALID_REQUEST
        )
    if error or node is None:
        return Coordinator(
            key=key,
            node_id=-1,
            host="",
            port=-1,
            error_code=error or ErrorCode.COORDINATOR_NOT_AVAILABLE,
            error_message=None,
        )
    return Coordinator(
        key=key, node_id=node.node_id, host=node.host, port=node.port, error_message=None
    )


async def handle(broker: Broker, request: Request) -> FindCoordinatorResponse:
    body = request.body
    listener = request.connection.listener
    if request.api_version >= 4:
        return FindCoordinatorResponse(
            coordinators=[
                _find(broker, key, body.key_type, listener) for key in body.coordinator_keys
            ]
        )
    found = _find(broker, body.key, body.key_type if request.api_version >= 1 else GROUP, listener)
    return FindCoordinatorResponse(
        error_code=found.error_code,
        error_message=None,
        node_id=found.node_id,
        host=found.host,
        port=found.port,
    )
