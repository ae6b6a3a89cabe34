"""SaslAuthenticate (key 36) after authentication: the tokens of a re-authentication
(KIP-368). A failure answers SASL_AUTHENTICATION_FAILED and closes the connection."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.sasl_authenticate_response import (
    SaslAuthenticateResponse,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> SaslAuthenticateResponse:
    connection = request.connection
    sasl = getattr(connection, "sasl", None)
    if sasl is None:
        connection.close_when_idle()
        return SaslAuthenticateResponse(
            error_code=ErrorCode.ILLEGAL_SASL_STATE,
            error_message="SASL is not enabled on this listener",
        )
    response, close = sasl.authenticate_response(request.api_version, request.body.auth_bytes)
    if close:
        connection.close_when_idle()
    return response
