"""AlterUserScramCredentials (key 51): create, replace and delete SCRAM credentials.

The client sends the salted password (PBKDF2 done on its side); the broker keeps only
the salt, StoredKey, ServerKey and iteration count, and persists them at once."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.alter_user_scram_credentials_response import (
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request

# Kafka's ScramMechanism type bytes, and its bounds on iterations.
MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384


async def handle(broker: Broker, request: Request) -> AlterUserScramCredentialsResponse:
    from trio_broker.security.sasl import scram_credential

    body = request.body
    authorizer = getattr(broker, "authorizer", None)
    users = [d.name for d in body.deletions] + [u.name for u in body.upsertions]
    if authorizer is not None and not authorizer.authorize_cluster(request, "ALTER"):
        return AlterUserScramCredentialsResponse(
            results=[
                AlterUserScramCredentialsResult(
                    user=u, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None
                )
                for u in dict.fromkeys(users)
            ]
        )
    store = broker.security_state().scram
    results: dict[str, tuple[int, str | None]] = {}
    # A user named twice for the same mechanism in one request is refused outright.
    seen = Counter(
        [(d.name, d.mechanism) for d in body.deletions]
        + [(u.name, u.mechanism) for u in body.upsertions]
    )
    for (user, _), count in seen.items():
        if count > 1:
            results[user] = (
                ErrorCode.DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request",
            )
    changed: set[str] = set()
    for d in body.deletions:
        if d.name in results:
            continue
        mechanism = MECHANISMS.get(d.mechanism)
        if not d.name:
            results[d.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mechanism is None:
            results[d.name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif not store.delete(d.name, mechanism):
            results[d.name] = (
                ErrorCode.RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist",
            )
        else:
            changed.add(d.name)
    for u in body.upsertions:
        if u.name in results:
            continue
        mechanism = MECHANISMS.get(u.mechanism)
        if not u.name:
            results[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mechanism is None:
            results[u.name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif not MIN_ITERATIONS <= u.iterations <= MAX_ITERATIONS:
            results[u.name] = (
                ErrorCode.UNACCEPTABLE_CREDENTIAL,
                f"Iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}",
            )
        elif not u.salt or not u.salted_password:
            results[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and password required")
        else:
            store.upsert(
                u.name,
                mechanism,
                scram_credential(mechanism, u.salted_password, u.salt, u.iterations),
            )
            changed.add(u.name)
    if changed:
        if store.zk is not None:
            await store.zk.write(changed)  # a cluster's are in ZooKeeper
        else:
            store.save()
    return AlterUserScramCredentialsResponse(
        results=[
            AlterUserScramCredentialsResult(
                user=user,
                error_code=results.get(user, (ErrorCode.NONE, None))[0],
                error_message=results.get(user, (ErrorCode.NONE, None))[1],
            )
            for user in dict.fromkeys(users)
        ]
    )
