"""A connection on an SSL, SASL_PLAINTEXT or SASL_SSL listener.

It is a server Connection whose I/O goes through a trio.SSLStream (TLS), and/or whose
first requests must authenticate (SASL). Authentication runs before the ordinary request
loop, in this connection's own task: until it succeeds only ApiVersions, SaslHandshake
and SaslAuthenticate are answered (anything else closes the connection, as Kafka does),
so the request loop and the handlers never see an unauthenticated client and pay
nothing per request for SASL. Re-authentication (KIP-368) arrives later as ordinary
requests and goes to the same SaslSession through apis/sasl_*.py.
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING, Any

import trio

from trio_broker.errors import ErrorCode
from trio_broker.protocol.framing import InvalidFrame
from trio_broker.protocol.quirks import InvalidRequest, encode_response, parse_request
from trio_broker.security import tls
from trio_broker.security.principal_rules import NoMatchingRule
from trio_broker.security.sasl import AuthenticationFailed, PlainServer, ScramServer
from trio_broker.server.connection import Connection

if TYPE_CHECKING:
    from trio_broker.security.listener import ListenerSecurity

logger = logging.getLogger(__name__)

__all__ = ["SaslSession", "SecureConnection"]

_HANDSHAKE_TIMEOUT_S = 10.0
# Kafka's sasl.server.max.receive.size: the largest frame a client may send before it
# has authenticated (a stranger must not make the broker hold 100 MB for it).
_MAX_UNAUTHENTICATED_FRAME = 524288
_API_VERSIONS, _SASL_HANDSHAKE, _SASL_AUTHENTICATE = 18, 17, 36
_SIZE = struct.Struct(">i")


class _Parsed:
    """What the ApiVersions handler reads of a request."""

    def __init__(self, parsed: Any) -> None:
        self.parsed = parsed


class SaslSession:
    """One connection's SASL state: handshake, then tokens until the mechanism completes."""

    def __init__(self, security: ListenerSecurity, connection: SecureConnection) -> None:
        self._security = security
        self._connection = connection
        self.server: Any = None
        self.raw_tokens = False  # SaslHandshake v0: tokens follow unframed by Kafka headers
        self.authenticated = False

    def handshake(self, version: int, mechanism: str) -> tuple[Any, bool]:
        """The SaslHandshakeResponse, and whether to close after it."""
        from trio_broker.protocol._generated.sasl_handshake_response import SaslHandshakeResponse

        offered = list(self._security.mechanisms)
        if self.server is not None and not self.server.complete:
            return SaslHandshakeResponse(
                error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=offered
            ), True
        if mechanism not in offered:
            logger.info(
                "[conn %s] SASL mechanism %r not enabled (offered %s); closing",
                self._connection.id,
                mechanism,
                ", ".join(offered),
            )
            return SaslHandshakeResponse(
                error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=offered
            ), True
        if self.authenticated and mechanism != self._mechanism:
            # KIP-368: re-authentication keeps the mechanism.
            return SaslHandshakeResponse(
                error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=offered
            ), True
        self._mechanism = mechanism
        if mechanism == "PLAIN":
            self.server = PlainServer(self._security.plain_users)
        else:
            self.server = ScramServer(mechanism, self._security.state.scram.lookup)
        self.raw_tokens = version == 0 and not self.authenticated
        return SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=offered), False

    def authenticate(self, token: bytes) -> bytes:
        """One token through the mechanism; raises AuthenticationFailed."""
        server = self.server
        if server is None or server.complete:
            raise AuthenticationFailed("SaslAuthenticate without a SaslHandshake first")
        challenge = server.step(token)
        if server.complete:
            principal = f"User:{server.username}"
            if self.authenticated and principal != self._connection.principal:
                raise AuthenticationFailed("re-authentication as a different principal")
            self.authenticated = True
            self._connection.authenticated_as(principal)
        return challenge

    def authenticate_response(self, version: int, token: bytes) -> tuple[Any, bool]:
        """The SaslAuthenticateResponse, and whether to close after it."""
        from trio_broker.protocol._generated.sasl_authenticate_response import (
            SaslAuthenticateResponse,
        )

        try:
            challenge = self.authenticate(token)
        except AuthenticationFailed as exc:
            self._connection.log_failed(str(exc))
            return SaslAuthenticateResponse(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(exc)
            ), True
        lifetime = self._security.reauth_ms if self.server.complete else 0
        return SaslAuthenticateResponse(
            error_code=ErrorCode.NONE,
            error_message=None,
            auth_bytes=challenge,
            session_lifetime_ms=lifetime,
        ), False


class SecureConnection(Connection):
    def __init__(
        self, stream: trio.SocketStream, *args: Any, security: ListenerSecurity, **kw: Any
    ):
        super().__init__(stream, *args, **kw)
        self.security = security
        self.principal = "User:ANONYMOUS"
        self.sasl: SaslSession | None = SaslSession(security, self) if security.sasl else None
        if security.ssl_context is not None:
            self.stream = trio.SSLStream(stream, security.ssl_context, server_side=True)
            self.io = self.stream
            self._receive_into = tls.receive_into  # type: ignore[method-assign,assignment]
            self._send_bytes = tls.send_bytes  # type: ignore[method-assign,assignment]
            self._send_response = tls.send_response  # type: ignore[method-assign,assignment]
            # (_queued still asks the raw socket: its ciphertext is a fair estimate of the
            # frame bytes to come, which is all the frame reader uses it for.)

    def authenticated_as(self, principal: str) -> None:
        self.principal = principal
        logger.debug("[conn %s] authenticated as %s", self.id, principal)
        if self.security.reauth_ms > 0:
            # connections.max.reauth.ms: the session ends then unless re-authenticated.
            self.scope.deadline = trio.current_time() + self.security.reauth_ms / 1000

    def log_failed(self, why: str) -> None:
        logger.info(
            "[conn %s] failed authentication from %s on %s: %s; closing",
            self.id,
            self.peer,
            self.listener,
            why,
        )

    async def _serve(self, requests: trio.MemorySendChannel[Any]) -> None:
        if self.security.ssl_context is not None:
            with trio.move_on_after(_HANDSHAKE_TIMEOUT_S) as timeout:
                try:
                    await self.stream.do_handshake()
                except trio.BrokenResourceError as exc:
                    logger.info(
                        "[conn %s] TLS handshake with %s on %s failed: %s",
                        self.id,
                        self.peer,
                        self.listener,
                        exc.__cause__ or exc,
                    )
                    return
            if timeout.cancelled_caught:
                logger.info("[conn %s] TLS handshake with %s timed out", self.id, self.peer)
                return
            try:
                cert_principal = tls.principal_of(self.stream, self.security.principal_rules)
            except NoMatchingRule as exc:
                logger.info("[conn %s] %s: %s; closing", self.id, self.peer, exc)
                return
            if cert_principal is not None:
                self.principal = cert_principal
        if self.sasl is not None and not await self._authenticate():
            return
        await super()._serve(requests)

    async def _authenticate(self) -> bool:
        """Run the SASL exchange; False when the connection is to be closed."""
        sasl = self.sasl
        assert sasl is not None
        limit = self.reader.max_frame_bytes
        self.reader.max_frame_bytes = min(limit, _MAX_UNAUTHENTICATED_FRAME)
        try:
            return await self._exchange(sasl)
        finally:
            self.reader.max_frame_bytes = limit

    async def _exchange(self, sasl: SaslSession) -> bool:
        while not sasl.authenticated:
            frame = await self._next_frame()
            if frame is None:
                if sasl.server is not None:
                    logger.info("[conn %s] %s left mid-authentication", self.id, self.peer)
                return False
            try:
                if sasl.raw_tokens:
                    # After SaslHandshake v0 a token is a bare size-prefixed frame.
                    token = bytes(frame)
                    self.reader.frame_done()
                    try:
                        challenge = sasl.authenticate(token)
                    except AuthenticationFailed as exc:
                        self.log_failed(str(exc))
                        return False
                    await self._send_bytes(self.io, _SIZE.pack(len(challenge)) + challenge)
                    continue
                try:
                    parsed = parse_request(frame, self.supported)
                except (InvalidFrame, InvalidRequest) as exc:
                    self._log_bad("bad request before authentication", exc)
                    return False
                finally:
                    self.reader.frame_done()
                self.client_id = parsed.client_id
                key = parsed.api_key
                close = False
                if key == _API_VERSIONS:
                    response = await self.security.api_versions(None, _Parsed(parsed))
                elif key == _SASL_HANDSHAKE:
                    response, close = sasl.handshake(parsed.api_version, parsed.body.mechanism)
                elif key == _SASL_AUTHENTICATE:
                    response, close = sasl.authenticate_response(
                        parsed.api_version, parsed.body.auth_bytes
                    )
                else:
                    logger.info(
                        "[conn %s] api %d from %s before SASL authentication; closing",
                        self.id,
                        key,
                        self.peer,
                    )
                    return False
                version = 0 if parsed.unsupported_version else parsed.api_version
                buf, _ = encode_response(key, version, parsed.correlation_id, response)
                await self._send_bytes(self.io, buf)
                if close:
                    return False
            except InvalidFrame as exc:
                self._log_bad("bad frame before authentication", exc)
                return False
        self.last_active = trio.current_time()
        return True
