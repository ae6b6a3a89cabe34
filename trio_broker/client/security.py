"""The client's side of SSL, SASL_PLAINTEXT and SASL_SSL (Kafka's security.protocol).

Imported only when a connection's protocol is not PLAINTEXT: a plaintext client never
loads this module, the SASL code or the broker's TLS helpers (test_client_security.py). `NetworkClient` calls `tls_stream` right after the TCP
connect (SSL, SASL_SSL), then, once ApiVersions is negotiated, `authenticate` runs
SaslHandshake v1 and SaslAuthenticate (PLAIN, or SCRAM-SHA-256/512 per RFC 5802 and
RFC 7677) before any other request, as Kafka's SaslClientAuthenticator does.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import logging
import os
import random
import secrets
import ssl
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from trio_broker.client.errors import (
    KafkaConnectionError,
    SaslAuthenticationFailedError,
    SslAuthenticationError,
)
from trio_broker.errors import KafkaError
from trio_broker.security.sasl import SCRAM_HASHES, AuthenticationFailed, _attributes

# receive_into: what the reader calls instead of sock.recv_into on a TLS connection.
from trio_broker.security.tls import normalize_pem, receive_into

if TYPE_CHECKING:
    from trio_broker.client.config import ClientConfig
    from trio_broker.client.connection import BrokerConnection

log = logging.getLogger(__name__)

__all__ = [
    "PlainClient",
    "ScramClient",
    "authenticate",
    "reauthenticate",
    "receive_into",
    "client_context",
    "tls_stream",
]

# --- TLS ---------------------------------------------------------------------------------


def client_context(config: ClientConfig) -> ssl.SSLContext:
    """The SSLContext for `config`: its trust store (default: the system's CAs), its client
    certificate if any, hostname checking as ssl.endpoint.identification.algorithm says.
    Built once per config."""
    if config.ssl_context is not None:
        return config.ssl_context
    return _context(config)


@functools.lru_cache(maxsize=64)
def _context(config: ClientConfig) -> ssl.SSLContext:
    ctx = ssl.create_default_context(purpose=ssl.Purpose.SERVER_AUTH)
    try:
        if config.ssl_cafile or config.ssl_cadata:
            ctx.load_verify_locations(
                cafile=config.ssl_cafile,
                cadata=normalize_pem(config.ssl_cadata) if config.ssl_cadata else None,
            )
        if config.ssl_certfile:
            ctx.load_cert_chain(
                config.ssl_certfile, config.ssl_keyfile, password=config.ssl_password
            )
        elif config.ssl_keystore_key and config.ssl_keystore_certificate_chain:
            # OpenSSL loads keys from files only: a private temporary file, gone at once.
            with tempfile.TemporaryDirectory(prefix="trio-broker-client-tls-") as tmp:
                path = Path(tmp) / "keystore.pem"
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(normalize_pem(config.ssl_keystore_key))
                    f.write(normalize_pem(config.ssl_keystore_certificate_chain))
                ctx.load_cert_chain(path, password=config.ssl_password)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ValueError(f"cannot load the client's TLS keys or trust store: {exc}") from None
    ctx.check_hostname = config.ssl_check_hostname
    return ctx


async def tls_stream(
    stream: trio.SocketStream, config: ClientConfig, host: str, port: int
) -> trio.SSLStream[trio.SocketStream]:
    """`stream` inside TLS, handshake done; SslAuthenticationError if it fails."""
    ctx = client_context(config)
    tls = trio.SSLStream(stream, ctx, server_hostname=host)
    try:
        await tls.do_handshake()
    except trio.BrokenResourceError as exc:
        await trio.aclose_forcefully(tls)
        cause = exc.__cause__
        if isinstance(cause, ssl.SSLCertVerificationError):
            raise SslAuthenticationError(
                f"{host}:{port} presented a certificate this client does not trust "
                f"({cause.verify_message}); set ssl.ca.location (ssl_cafile) to its CA"
                + (
                    ", or check that the name matches (ssl.endpoint.identification.algorithm)"
                    if "match" in (cause.verify_message or "").lower()
                    else ""
                )
            ) from None
        if isinstance(cause, ssl.SSLError):
            raise SslAuthenticationError(f"{host}:{port}: {cause.reason or cause}") from None
        raise KafkaConnectionError(f"TLS handshake with {host}:{port} failed: {cause}") from None
    return tls


# --- SASL --------------------------------------------------------------------------------


class PlainClient:
    """RFC 4616: one message, `NUL user NUL password`."""

    def __init__(self, username: str, password: str) -> None:
        self._token = b"\x00" + username.encode() + b"\x00" + password.encode()
        self.complete = False

    def step(self, challenge: bytes | None) -> bytes | None:
        if self.complete:
            return None
        self.complete = True
        return self._token


def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    """RFC 5802's client: client-first, then client-final from the server-first message;
    checks the server-final signature (the broker proves it knows the credential)."""

    def __init__(
        self, mechanism: str, username: str, password: str, nonce: str | None = None
    ) -> None:
        self._hash = SCRAM_HASHES[mechanism]
        self._password = password.encode()
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._first_bare = f"n={_saslname(username)},r={self._nonce}"
        self._state = "first"
        self.complete = False

    def step(self, challenge: bytes | None) -> bytes | None:
        if self._state == "first":
            self._state = "final"
            return f"n,,{self._first_bare}".encode()
        if self._state == "final":
            return self._final(challenge or b"")
        if self._state == "verify":
            self._verify(challenge or b"")
            return None
        raise AuthenticationFailed("unexpected SCRAM challenge after completion")

    def _final(self, server_first_b: bytes) -> bytes:
        server_first = server_first_b.decode()
        fields = _attributes(server_first)
        nonce, salt_b64, iterations = fields.get("r", ""), fields.get("s"), fields.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise AuthenticationFailed("SCRAM server-first message: bad nonce")
        if salt_b64 is None or not iterations.isdigit() or int(iterations) < 4096:
            raise AuthenticationFailed("SCRAM server-first message: bad salt or iterations")
        name = self._hash
        salted = hashlib.pbkdf2_hmac(
            name, self._password, base64.b64decode(salt_b64), int(iterations)
        )
        client_key = hmac.digest(salted, b"Client Key", name)
        stored_key = hashlib.new(name, client_key).digest()
        final_bare = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self._first_bare},{server_first},{final_bare}".encode()
        signature = hmac.digest(stored_key, auth_message, name)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.digest(salted, b"Server Key", name)
        self._server_signature = hmac.digest(server_key, auth_message, name)
        self._state = "verify"
        return f"{final_bare},p={base64.b64encode(proof).decode()}".encode()

    def _verify(self, server_final: bytes) -> None:
        fields = _attributes(server_final.decode(errors="replace"))
        if "e" in fields:
            raise AuthenticationFailed(f"SCRAM server error: {fields['e']}")
        expected = base64.b64encode(self._server_signature).decode()
        if not hmac.compare_digest(fields.get("v", ""), expected):
            raise AuthenticationFailed("SCRAM server signature does not verify")
        self._state = "done"
        self.complete = True


async def authenticate(connection: BrokerConnection, config: ClientConfig) -> int:
    """SaslHandshake v1, then SaslAuthenticate until the mechanism completes; returns the
    session's lifetime in ms (the broker's connections.max.reauth.ms; 0: no limit)."""
    from trio_broker.protocol._generated.sasl_authenticate_request import (
        SaslAuthenticateRequest,
    )
    from trio_broker.protocol._generated.sasl_handshake_request import SaslHandshakeRequest

    mechanism = config.sasl_mechanism
    where = f"{connection.address[0]}:{connection.address[1]}"
    if config.sasl_username is None or config.sasl_password is None:
        raise SaslAuthenticationFailedError(
            f"security.protocol {config.security_protocol} needs sasl.username and sasl.password"
        )
    response = await connection.send(SaslHandshakeRequest(mechanism=mechanism), 1)
    if response.error_code:
        raise SaslAuthenticationFailedError(
            f"{where} does not offer SASL mechanism {mechanism} "
            f"(it offers {', '.join(response.mechanisms) or 'none'})",
            response.error_code,
        )
    if mechanism == "PLAIN":
        client: Any = PlainClient(config.sasl_username, config.sasl_password)
    else:
        client = ScramClient(mechanism, config.sasl_username, config.sasl_password)
    version = connection.version_for(SaslAuthenticateRequest.API_KEY)
    challenge: bytes | None = None
    lifetime_ms = 0
    try:
        while True:
            token = client.step(challenge)
            if token is None:
                break
            response = await connection.send(SaslAuthenticateRequest(auth_bytes=token), version)
            if response.error_code:
                raise SaslAuthenticationFailedError(
                    f"{where} refused {mechanism} for user {config.sasl_username!r}: "
                    f"{response.error_message or 'no reason given'}",
                    response.error_code,
                )
            challenge = bytes(response.auth_bytes)
            lifetime_ms = response.session_lifetime_ms
            if client.complete:
                break
    except AuthenticationFailed as exc:
        raise SaslAuthenticationFailedError(f"{where}, {mechanism}: {exc}") from None
    except KafkaConnectionError as exc:
        raise SaslAuthenticationFailedError(
            f"{where} closed the connection during {mechanism} authentication "
            f"of user {config.sasl_username!r}: {exc}"
        ) from None
    return lifetime_ms


async def reauthenticate(
    connection: BrokerConnection, config: ClientConfig, lifetime_ms: int
) -> None:
    """KIP-368: authenticate again on the same connection before the broker's session
    ends (at 85-95% of its lifetime, as Kafka's client), for as long as the connection
    lives; the requests in flight meanwhile carry on. A failure closes the connection."""
    while lifetime_ms > 0:
        await trio.sleep(lifetime_ms / 1000 * random.uniform(0.85, 0.95))
        try:
            lifetime_ms = await authenticate(connection, config)
        except KafkaError as exc:
            log.info("re-authentication with %s failed: %s", connection.address, exc)
            connection.close()
            return
        log.debug("re-authenticated with %s", connection.address)
