"""SaslHandshake (key 17) after authentication: the start of a re-authentication
(KIP-368). The first authentication of a SASL connection is answered by the connection
itself (security/connection.py); on a listener without SASL this is ILLEGAL_SASL_STATE."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.sasl_handshake_response import SaslHandshakeResponse

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> SaslHandshakeResponse:
    connection = request.connection
    sasl = getattr(connection, "sasl", None)
    if sasl is None:
        connection.close_when_idle()
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    response, close = sasl.handshake(request.api_version, request.body.mechanism)
    if close:
        connection.close_when_idle()
    return response
