"""A SCRAM client over the raw wire (SaslHandshake v1 + SaslAuthenticate v2), for tests."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import socket

from wire import request_of, roundtrip


def scram_login(address: tuple[str, int], mechanism: str, user: str, password: str) -> int:
    """Authenticate on a new connection; the error code of the last step (0: success)."""
    name = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    with socket.create_connection(address, timeout=10) as sock:
        assert roundtrip(sock, request_of(17, mechanism=mechanism), 1).error_code == 0
        nonce = secrets.token_urlsafe(18)
        first_bare = f"n={user},r={nonce}"
        answer = roundtrip(sock, request_of(36, auth_bytes=f"n,,{first_bare}".encode()), 2, 2)
        if answer.error_code:
            return answer.error_code
        server_first = answer.auth_bytes.decode()
        fields = dict(p.split("=", 1) for p in server_first.split(","))
        salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
        salted = hashlib.pbkdf2_hmac(name, password.encode(), salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", name)
        stored_key = hashlib.new(name, client_key).digest()
        final_bare = f"c=biws,r={fields['r']}"
        auth_message = f"{first_bare},{server_first},{final_bare}".encode()
        signature = hmac.digest(stored_key, auth_message, name)
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True)))
        final = f"{final_bare},p={proof.decode()}".encode()
        answer = roundtrip(sock, request_of(36, auth_bytes=final), 2, 3)
        if answer.error_code == 0:
            # The server's signature proves it knows the credential too.
            server_key = hmac.digest(salted, b"Server Key", name)
            expected = hmac.digest(server_key, auth_message, name)
            assert answer.auth_bytes == b"v=" + base64.b64encode(expected)
        return answer.error_code
