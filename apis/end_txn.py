"""EndTxn (key 26): commit or abort the producer's ongoing transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trio_broker.apis.txn_errors import after_state_write, coordinator, for_version
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.end_txn_response import EndTxnResponse

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> Any:
    body = request.body
    txn = coordinator(broker)
    if txn is None:
        return EndTxnResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    error = txn.end_txn(
        body.transactional_id, body.producer_id, body.producer_epoch, bool(body.committed)
    )
    if error:
        return EndTxnResponse(error_code=for_version(error, request.api_version, 2))
    # A cluster: answered once the Prepare (or Complete) record is in the ISR.
    return after_state_write(
        broker,
        request,
        [body.transactional_id],
        lambda codes: EndTxnResponse(error_code=codes[body.transactional_id]),
    )
