"""DescribeUserScramCredentials (key 50): which users have which SCRAM mechanisms, with
their iteration counts (never salts or keys)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.describe_user_scram_credentials_response import (
    CredentialInfo,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request

_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}


async def handle(broker: Broker, request: Request) -> DescribeUserScramCredentialsResponse:
    authorizer = getattr(broker, "authorizer", None)
    if authorizer is not None and not authorizer.authorize_cluster(request, "DESCRIBE"):
        return DescribeUserScramCredentialsResponse(
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None
        )
    store = broker.security_state().scram
    wanted = request.body.users
    if not wanted:  # null or empty: every user with a credential
        names = sorted(store.users)
        explicit = False
    else:
        names = [u.name for u in wanted]
        explicit = True
    counts = Counter(names)
    results = []
    for name in dict.fromkeys(names):
        if counts[name] > 1:
            results.append(
                DescribeUserScramCredentialsResult(
                    user=name,
                    error_code=ErrorCode.DUPLICATE_RESOURCE,
                    error_message=f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}",
                )
            )
            continue
        mechanisms = store.users.get(name)
        if not mechanisms:
            if explicit:
                results.append(
                    DescribeUserScramCredentialsResult(
                        user=name,
                        error_code=ErrorCode.RESOURCE_NOT_FOUND,
                        error_message=f"Attempt to describe a user credential that does not exist: {name}",
                    )
                )
            continue
        results.append(
            DescribeUserScramCredentialsResult(
                user=name,
                error_code=ErrorCode.NONE,
                error_message=None,
                credential_infos=[
                    CredentialInfo(mechanism=_TYPES[m], iterations=c.iterations)
                    for m, c in sorted(mechanisms.items())
                ],
            )
        )
    return DescribeUserScramCredentialsResponse(
        error_code=ErrorCode.NONE, error_message=None, results=results
    )
