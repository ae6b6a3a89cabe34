"""A broker with SASL PLAIN users and ACLs on, shared by the ACL and security-command
tests (imported by name: tests have no packages)."""

from __future__ import annotations

import socket
from typing import Any

from wire import request_of, roundtrip

__all__ = ["JAAS", "USERS", "Raw", "start"]

USERS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required " + " ".join(
    f'user_{u}="{p}"' for u, p in USERS.items()
)


def start(factory: Any, **extra: str) -> Any:
    """A SASL_PLAINTEXT broker with the PLAIN USERS, ACLs on, admin a super user."""
    props = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
    }
    props.update(extra)
    return factory(props)


class Raw:
    """One SASL PLAIN connection as `user`, sending requests of our codec numbered in turn:
    `raw(api_key, version, **fields)` returns the decoded response."""

    def __init__(self, broker: Any, user: str) -> None:
        self.sock = socket.create_connection((broker.host, broker.port), timeout=30)
        self.n = 0
        assert self(17, 1, mechanism="PLAIN").error_code == 0
        token = f"\0{user}\0{USERS[user]}".encode()
        assert self(36, 2, auth_bytes=token).error_code == 0

    def __call__(self, api_key: int, version: int, **fields: Any) -> Any:
        self.n += 1
        return roundtrip(self.sock, request_of(api_key, **fields), version, self.n)
