"""InitProducerId (key 22): producer ids for idempotent and transactional producers.

Ids come from `ProducerIdManager`, in blocks persisted before use, so no id is handed out
twice across restarts. An idempotent producer that presents its current id and epoch
(KIP-360) gets the epoch bumped instead of a new id. A transactional id is served by the
transaction coordinator: the id's producer id with a bumped epoch, fencing older ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trio_broker.apis.txn_errors import after_state_write, coordinator, for_version
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.init_producer_id_response import InitProducerIdResponse

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request

_MAX_EPOCH = 32767


async def handle(broker: Broker, request: Request) -> Any:
    body = request.body
    version = request.api_version
    if body.transactional_id is not None:
        txn = coordinator(broker)
        if txn is None:
            return InitProducerIdResponse(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, producer_id=-1, producer_epoch=-1
            )
        expected_id = body.producer_id if version >= 3 else -1
        expected_epoch = body.producer_epoch if version >= 3 else -1
        error, pid, epoch = txn.init_producer_id(
            body.transactional_id, body.transaction_timeout_ms, expected_id, expected_epoch
        )
        if error:
            return InitProducerIdResponse(
                error_code=for_version(error, version, 4), producer_id=pid, producer_epoch=epoch
            )

        def answer(codes: dict[str, ErrorCode]) -> InitProducerIdResponse:
            code = codes[body.transactional_id]
            if code:
                return InitProducerIdResponse(error_code=code, producer_id=-1, producer_epoch=-1)
            return InitProducerIdResponse(
                error_code=ErrorCode.NONE, producer_id=pid, producer_epoch=epoch
            )

        return after_state_write(broker, request, [body.transactional_id], answer)
    if body.producer_id >= 0 and 0 <= body.producer_epoch < _MAX_EPOCH - 1:
        return InitProducerIdResponse(
            error_code=ErrorCode.NONE,
            producer_id=body.producer_id,
            producer_epoch=body.producer_epoch + 1,
        )
    return InitProducerIdResponse(
        error_code=ErrorCode.NONE, producer_id=broker.producer_ids.next_id(), producer_epoch=0
    )
