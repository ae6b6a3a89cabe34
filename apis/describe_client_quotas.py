"""DescribeClientQuotas (key 48): the quota entities matching a filter, with their values."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.describe_client_quotas_response import (
    DescribeClientQuotasResponse,
    EntityData,
    EntryData,
    ValueData,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request

_EXACT, _DEFAULT, _SPECIFIED = 0, 1, 2


async def handle(broker: Broker, request: Request) -> DescribeClientQuotasResponse:
    body = request.body
    authorizer = broker.authorizer
    if authorizer is not None and not authorizer.authorize_cluster(request, "DESCRIBE_CONFIGS"):
        return DescribeClientQuotasResponse(
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            error_message="Cluster authorization failed.",
            entries=None,
        )
    types = [c.entity_type for c in body.components]
    if len(set(types)) != len(types):
        return DescribeClientQuotasResponse(
            error_code=ErrorCode.INVALID_REQUEST,
            error_message="Duplicate entity type in filter",
            entries=None,
        )
    if any(c.match_type not in (_EXACT, _DEFAULT, _SPECIFIED) for c in body.components):
        return DescribeClientQuotasResponse(
            error_code=ErrorCode.INVALID_REQUEST, error_message="Bad match type", entries=None
        )
    quotas = broker.client_quotas
    entries = []
    for entity, values in sorted(
        (quotas.entities if quotas is not None else {}).items(), key=lambda kv: str(kv[0])
    ):
        names = dict(entity)
        if body.strict and set(names) != set(types):
            continue
        ok = True
        for c in body.components:
            if c.entity_type not in names:
                ok = False
            elif c.match_type == _EXACT:
                ok = names[c.entity_type] == c.match
            elif c.match_type == _DEFAULT:
                ok = names[c.entity_type] is None
            else:
                ok = names[c.entity_type] is not None
            if not ok:
                break
        if ok:
            entries.append(
                EntryData(
                    entity=[EntityData(entity_type=t, entity_name=n) for t, n in entity],
                    values=[ValueData(key=k, value=v) for k, v in sorted(values.items())],
                )
            )
    return DescribeClientQuotasResponse(
        error_code=ErrorCode.NONE, error_message=None, entries=entries
    )
