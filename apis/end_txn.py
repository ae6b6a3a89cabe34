"""EndTxn (key 26): commit or abort the producer's ongoing transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.apis.txn_errors import coordinator, for_version
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.end_txn_response import EndTxnResponse

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> EndTxnResponse:
    body = request.body
    txn = coordinator(broker)
    if txn is None:
        return EndTxnResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    error = txn.end_txn(
        body.transactional_id, body.producer_id, body.producer_epoch, bool(body.committed)
    )
    return EndTxnResponse(error_code=for_version(error, request.api_version, 2))
