"""DeleteAcls (key 31): remove the bindings matching each filter and return them; needs
ALTER on the cluster."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.delete_acls_response import (
    DeleteAclsFilterResult,
    DeleteAclsMatchingAcl,
    DeleteAclsResponse,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> DeleteAclsResponse:
    from trio_broker.security.acl import AclFilter, Op

    filters = request.body.filters
    authorizer = getattr(broker, "authorizer", None)
    if authorizer is None or not authorizer.authorize_cluster(request, Op.ALTER):
        code = (
            ErrorCode.SECURITY_DISABLED
            if authorizer is None
            else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        )
        message = "No Authorizer is configured." if authorizer is None else None
        return DeleteAclsResponse(
            filter_results=[
                DeleteAclsFilterResult(error_code=code, error_message=message) for _ in filters
            ]
        )
    results = []
    removed = set()
    for f in filters:
        flt = AclFilter(
            resource_type=f.resource_type_filter,
            resource_name=f.resource_name_filter,
            pattern_type=f.pattern_type_filter,
            principal=f.principal_filter,
            host=f.host_filter,
            operation=f.operation,
            permission=f.permission_type,
        )
        why = flt.invalid()
        if why is not None:
            results.append(
                DeleteAclsFilterResult(error_code=ErrorCode.INVALID_REQUEST, error_message=why)
            )
            continue
        matched = authorizer.store.matching(flt)
        removed.update(matched)
        results.append(
            DeleteAclsFilterResult(
                error_code=ErrorCode.NONE,
                error_message=None,
                matching_acls=[
                    DeleteAclsMatchingAcl(
                        error_code=ErrorCode.NONE,
                        error_message=None,
                        resource_type=a.resource_type,
                        resource_name=a.resource_name,
                        pattern_type=a.pattern_type,
                        principal=a.principal,
                        host=a.host,
                        operation=a.operation,
                        permission_type=a.permission,
                    )
                    for a in matched
                ],
            )
        )
    if removed:
        if authorizer.store.zk is not None:
            await authorizer.store.zk.remove(removed)  # a cluster's are in ZooKeeper
        else:
            authorizer.store.remove(removed)
    return DeleteAclsResponse(filter_results=results)
