"""DescribeAcls (key 29): the ACL bindings matching a filter, grouped by resource
pattern; needs DESCRIBE on the cluster."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.describe_acls_response import (
    AclDescription,
    DescribeAclsResource,
    DescribeAclsResponse,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> DescribeAclsResponse:
    from trio_broker.security.acl import AclFilter, Op

    authorizer = getattr(broker, "authorizer", None)
    if authorizer is None:
        return DescribeAclsResponse(
            error_code=ErrorCode.SECURITY_DISABLED, error_message="No Authorizer is configured."
        )
    if not authorizer.authorize_cluster(request, Op.DESCRIBE):
        return DescribeAclsResponse(
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            error_message="Cluster authorization failed.",
        )
    b = request.body
    flt = AclFilter(
        resource_type=b.resource_type_filter,
        resource_name=b.resource_name_filter,
        pattern_type=b.pattern_type_filter,
        principal=b.principal_filter,
        host=b.host_filter,
        operation=b.operation,
        permission=b.permission_type,
    )
    why = flt.invalid()
    if why is not None:
        return DescribeAclsResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=why)
    resources: dict[tuple[int, str, int], list[AclDescription]] = {}
    for acl in authorizer.store.matching(flt):
        key = (acl.resource_type, acl.resource_name, acl.pattern_type)
        resources.setdefault(key, []).append(
            AclDescription(
                principal=acl.principal,
                host=acl.host,
                operation=acl.operation,
                permission_type=acl.permission,
            )
        )
    return DescribeAclsResponse(
        error_code=ErrorCode.NONE,
        error_message=None,
        resources=[
            DescribeAclsResource(resource_type=t, resource_name=n, pattern_type=p, acls=acls)
            for (t, n, p), acls in resources.items()
        ],
    )
