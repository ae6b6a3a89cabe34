"""CreateAcls (key 30): add ACL bindings; needs ALTER on the cluster. Without an
authorizer Kafka answers SECURITY_DISABLED, and so does this broker."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.create_acls_response import (
    AclCreationResult,
    CreateAclsResponse,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> CreateAclsResponse:
    from trio_broker.security.acl import AclBinding, Op, validate_binding

    creations = request.body.creations
    authorizer = getattr(broker, "authorizer", None)
    if authorizer is None or not authorizer.authorize_cluster(request, Op.ALTER):
        code = (
            ErrorCode.SECURITY_DISABLED
            if authorizer is None
            else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        )
        message = "No Authorizer is configured." if authorizer is None else None
        return CreateAclsResponse(
            results=[AclCreationResult(error_code=code, error_message=message) for _ in creations]
        )
    results = []
    valid = []
    for c in creations:
        binding = AclBinding(
            resource_type=c.resource_type,
            resource_name=c.resource_name,
            pattern_type=c.resource_pattern_type,
            principal=c.principal,
            host=c.host,
            operation=c.operation,
            permission=c.permission_type,
        )
        why = validate_binding(binding)
        if why is None:
            valid.append(binding)
            results.append(AclCreationResult(error_code=ErrorCode.NONE, error_message=None))
        else:
            results.append(
                AclCreationResult(error_code=ErrorCode.INVALID_REQUEST, error_message=why)
            )
    if valid:
        if authorizer.store.zk is not None:
            await authorizer.store.zk.add(valid)  # a cluster's are in ZooKeeper
        else:
            authorizer.store.add(valid)
    return CreateAclsResponse(results=results)
