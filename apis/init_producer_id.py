"""InitProducerId (key 22): producer ids for idempotent producers.

Ids come from `ProducerIdManager`, in blocks persisted before use, so no id is handed out
twice across restarts. A producer that presents its current id and epoch (KIP-360) gets
the epoch bumped instead of a new id. Transactional ids need the transaction
coordinator, which this broker does not have yet: they are refused with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, so clients fail clearly rather than hang.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.init_producer_id_response import InitProducerIdResponse

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request

_MAX_EPOCH = 32767


async def handle(broker: Broker, request: Request) -> InitProducerIdResponse:
    body = request.body
    if body.transactional_id is not None:
        return InitProducerIdResponse(
            error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            producer_id=-1,
            producer_epoch=-1,
        )
    if body.producer_id >= 0 and 0 <= body.producer_epoch < _MAX_EPOCH - 1:
        return InitProducerIdResponse(
            error_code=ErrorCode.NONE,
            producer_id=body.producer_id,
            producer_epoch=body.producer_epoch + 1,
        )
    return InitProducerIdResponse(
        error_code=ErrorCode.NONE, producer_id=broker.producer_ids.next_id(), producer_epoch=0
    )
