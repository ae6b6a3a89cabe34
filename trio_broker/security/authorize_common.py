"""What the per-API authorization checks share: resource and error shorthands, the
shapes of a check, and the helpers that take denied resources out of a request and put
their errors into the response (security/authorize_apis.py has the table)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated import response_class
from trio_broker.security.acl import CLUSTER_NAME, Op, Resource
from trio_broker.server.requests import DELAYED

if TYPE_CHECKING:
    from trio_broker.security.authorizer import Authorizer
    from trio_broker.server.requests import Request

T, G, C, X = Resource.TOPIC, Resource.GROUP, Resource.CLUSTER, Resource.TRANSACTIONAL_ID
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

Dispatch = Callable[[Any, "Request"], Awaitable[Any]]
Check = Callable[["Authorizer", Any, "Request", Dispatch], Awaitable[Any]]


def error_response(request: Request, code: int, **fields: Any) -> Any:
    """A response of the request's API carrying only a top-level error code."""
    return response_class(request.api_key)(error_code=code, **fields)


def cluster_check(op: int, code: int = CLUSTER_DENIED) -> Check:
    async def check(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
        if not az.allows(request, op, C, CLUSTER_NAME):
            return error_response(request, code)
        return await dispatch(broker, request)

    return check


def group_check(op: int) -> Check:
    async def check(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
        if not az.allows(request, op, G, request.body.group_id):
            return error_response(request, GROUP_DENIED)
        return await dispatch(broker, request)

    return check


def txn_check(op: int = Op.WRITE) -> Check:
    async def check(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
        if not az.allows(request, op, X, request.body.transactional_id):
            return error_response(request, TXN_DENIED)
        return await dispatch(broker, request)

    return check


def split_denied(
    request: Request, az: Authorizer, items: list[Any], op: int, name: Any
) -> list[Any]:
    """Remove the items naming resources the principal may not `op`; return those."""
    allowed, denied = [], []
    for item in items:
        (allowed if az.allows(request, op, T, name(item)) else denied).append(item)
    items[:] = allowed
    return denied


async def then_add(
    broker: Any, request: Request, dispatch: Dispatch, field: str, extra: list[Any]
) -> Any:
    response = await dispatch(broker, request)
    if extra and response is not None and response is not DELAYED:
        getattr(response, field).extend(extra)
    return response


# --- what a principal may do, as the bit fields Metadata/DescribeCluster/DescribeGroups carry


_TOPIC_OPS = (
    Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.DESCRIBE_CONFIGS,
    Op.ALTER_CONFIGS,
)  # fmt: skip


GROUP_OPS = (Op.READ, Op.DESCRIBE, Op.DELETE)


_CLUSTER_OPS = (
    Op.CREATE, Op.ALTER, Op.DESCRIBE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
    Op.IDEMPOTENT_WRITE,
)  # fmt: skip


def operations(
    az: Authorizer, request: Request, rtype: int, name: str, ops: tuple[int, ...]
) -> int:
    return sum(1 << op for op in ops if az.allows(request, op, rtype, name))


def fill_operations(az: Authorizer, request: Request, response: Any) -> None:
    """Replace what the handler reported (everything, as with no authorizer) by what this
    principal may do, wherever the request asked for it."""
    body = request.body
    if getattr(body, "include_cluster_authorized_operations", False):
        # Kafka: none at all unless the principal may describe the cluster.
        if not az.allows(request, Op.DESCRIBE, C, CLUSTER_NAME):
            response.cluster_authorized_operations = 0
        else:
            response.cluster_authorized_operations = operations(
                az, request, C, CLUSTER_NAME, _CLUSTER_OPS
            )
    if getattr(body, "include_topic_authorized_operations", False):
        for t in response.topics:
            if t.error_code == ErrorCode.NONE and t.name:
                t.topic_authorized_operations = operations(az, request, T, t.name, _TOPIC_OPS)
