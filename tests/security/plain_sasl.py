"""A broker with SASL PLAIN users and ACLs on, shared by the ACL and security-command
tests (imported by name: tests have no packages)."""

from __future__ import annotations

from typing import Any

__all__ = ["JAAS", "USERS", "start"]

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
