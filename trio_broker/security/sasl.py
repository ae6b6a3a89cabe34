"""SASL mechanisms as sans-IO servers: tokens in, challenges out.

PLAIN (RFC 4616) checks a password against the listener's JAAS users. SCRAM-SHA-256 and
SCRAM-SHA-512 (RFC 5802, RFC 7677) check a proof against a stored credential: the broker
never sees or keeps a password, only the salt, StoredKey, ServerKey and iteration count.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable

import attrs

__all__ = [
    "AuthenticationFailed",
    "PlainServer",
    "ScramCredential",
    "ScramServer",
    "parse_jaas_users",
    "scram_credential",
]

SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class AuthenticationFailed(Exception):
    """Bad credentials or a malformed exchange: answer SASL_AUTHENTICATION_FAILED, close."""


_JAAS_USER = re.compile(r'user_([^\s=]+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_jaas_users(jaas: str) -> dict[str, str]:
    """The `user_<name>="<password>"` entries of a PlainLoginModule JAAS config."""
    return {m.group(1): re.sub(r"\\(.)", r"\1", m.group(2)) for m in _JAAS_USER.finditer(jaas)}


class PlainServer:
    """RFC 4616: one message `[authzid] NUL authcid NUL passwd`, no challenge."""

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.complete = False
        self.username: str | None = None

    def step(self, token: bytes) -> bytes:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, user_b, password_b = parts
        try:
            user = user_b.decode()
            password_b.decode()  # must be UTF-8 too
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if authzid and authzid.decode(errors="replace") != user:
            raise AuthenticationFailed("Authentication failed: authorization id differs")
        expected = self._users.get(user)
        # Compared in constant time, and a missing user compared too: no timing oracle.
        ok = hmac.compare_digest(
            (expected if expected is not None else secrets.token_hex(8)).encode(), password_b
        )
        if expected is None or not ok:
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        self.complete = True
        self.username = user
        return b""


@attrs.frozen(kw_only=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        """Kafka's form, as in ZooKeeper's /config/users/<user>."""
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        fields = dict(p.split("=", 1) for p in text.split(","))
        d = base64.b64decode
        return cls(
            salt=d(fields["salt"]),
            stored_key=d(fields["stored_key"]),
            server_key=d(fields["server_key"]),
            iterations=int(fields["iterations"]),
        )


def scram_credential(
    mechanism: str, salted_password: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """What the broker keeps of a password that the client already salted and hashed."""
    name = SCRAM_HASHES[mechanism]
    client_key = hmac.digest(salted_password, b"Client Key", name)
    return ScramCredential(
        salt=salt,
        stored_key=hashlib.new(name, client_key).digest(),
        server_key=hmac.digest(salted_password, b"Server Key", name),
        iterations=iterations,
    )


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthenticationFailed(f"Invalid SCRAM message: bad attribute {part[:20]!r}")
        out.setdefault(part[0], part[2:])
    return out


def _saslname(text: str) -> str:
    if re.search(r"=(?!2C|3D)", text):
        raise AuthenticationFailed("Invalid SCRAM username")
    return text.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """RFC 5802's server: client-first -> server-first, client-final -> server-final."""

    def __init__(
        self, mechanism: str, lookup: Callable[[str, str], ScramCredential | None]
    ) -> None:
        self.mechanism = mechanism
        self._hash = SCRAM_HASHES[mechanism]
        self._lookup = lookup
        self._state = "first"
        self.complete = False
        self.username: str | None = None

    def step(self, token: bytes) -> bytes:
        try:
            message = token.decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SCRAM message: not UTF-8") from None
        if self._state == "first":
            return self._first(message)
        if self._state == "final":
            return self._final(message)
        raise AuthenticationFailed("Unexpected SCRAM message after completion")

    def _first(self, message: str) -> bytes:
        # gs2-header: "n," or "y," (no channel binding), then an optional "a=authzid".
        m = re.fullmatch(r"([ny]),(a=[^,]*)?,(.*)", message, re.S)
        if not m:
            raise AuthenticationFailed("Invalid SCRAM client-first message")
        self._gs2 = message[: len(message) - len(m.group(3))]
        self._client_first_bare = m.group(3)
        attrs_ = _attributes(self._client_first_bare)
        if "n" not in attrs_ or "r" not in attrs_ or not attrs_["r"]:
            raise AuthenticationFailed("Invalid SCRAM client-first message")
        user = _saslname(attrs_["n"])
        authzid = m.group(2)
        if authzid and _saslname(authzid[2:]) != user:
            raise AuthenticationFailed("Authentication failed: authorization id differs")
        credential = self._lookup(user, self.mechanism)
        if credential is None:
            raise AuthenticationFailed("Authentication failed: Invalid user credentials")
        self._credential = credential
        self.username = user
        self._nonce = attrs_["r"] + secrets.token_urlsafe(24)
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self._state = "final"
        return self._server_first.encode()

    def _final(self, message: str) -> bytes:
        head, sep, proof_b64 = message.rpartition(",p=")
        if not sep:
            raise AuthenticationFailed("Invalid SCRAM client-final message: no proof")
        attrs_ = _attributes(head)
        if attrs_.get("r") != self._nonce:
            raise AuthenticationFailed("Invalid SCRAM client-final message: nonce mismatch")
        if attrs_.get("c") != base64.b64encode(self._gs2.encode()).decode():
            raise AuthenticationFailed("Invalid SCRAM client-final message: channel binding")
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            raise AuthenticationFailed("Invalid SCRAM client proof") from None
        auth_message = f"{self._client_first_bare},{self._server_first},{head}".encode()
        cred = self._credential
        signature = hmac.digest(cred.stored_key, auth_message, self._hash)
        if len(proof) != len(signature):
            raise AuthenticationFailed("Authentication failed: Invalid user credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), cred.stored_key):
            raise AuthenticationFailed("Authentication failed: Invalid user credentials")
        self._state = "done"
        self.complete = True
        server_signature = hmac.digest(cred.server_key, auth_message, self._hash)
        return b"v=" + base64.b64encode(server_signature)
