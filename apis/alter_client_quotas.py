"""AlterClientQuotas (key 49): set or remove quota values on user / client-id entities
(a null name is the default entity). The first quota ever set loads the quota code."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.alter_client_quotas_response import (
    AlterClientQuotasResponse,
    EntityData,
    EntryData,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


def _invalid(entry: object) -> str | None:
    from trio_broker.security.client_quotas import IP, QUOTA_KEYS

    types = [e.entity_type for e in entry.entity]  # type: ignore[attr-defined]
    if not types:
        return "Invalid empty client quota entity"
    if len(set(types)) != len(types):
        return "Duplicate entity type in client quota entity"
    if any(t not in QUOTA_KEYS for t in types):
        return f"Unexpected entity type in {types}"
    if IP in types:
        return "Quotas on IP addresses are not supported"
    allowed = set.intersection(*(QUOTA_KEYS[t] for t in types))
    for op in entry.ops:  # type: ignore[attr-defined]
        if op.key not in allowed:
            return f"Invalid configuration key {op.key}"
        if not op.remove and op.value <= 0:
            return f"Quota {op.key} must be positive, got {op.value}"
    return None


async def handle(broker: Broker, request: Request) -> AlterClientQuotasResponse:
    from trio_broker.security.client_quotas import install

    body = request.body

    def result(entry: object, code: int, message: str | None) -> EntryData:
        return EntryData(
            error_code=code,
            error_message=message,
            entity=[
                EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                for e in entry.entity  # type: ignore[attr-defined]
            ],
        )

    authorizer = broker.authorizer
    if authorizer is not None and not authorizer.authorize_cluster(request, "ALTER_CONFIGS"):
        return AlterClientQuotasResponse(
            entries=[
                result(e, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
                for e in body.entries
            ]
        )
    quotas = install(broker)
    entries = []
    changed = []
    for entry in body.entries:
        why = _invalid(entry)
        if why is not None:
            entries.append(result(entry, ErrorCode.INVALID_REQUEST, why))
            continue
        if not body.validate_only:
            entity = tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity))
            quotas.alter(entity, [(op.key, None if op.remove else op.value) for op in entry.ops])
            changed.append(entity)
        entries.append(result(entry, ErrorCode.NONE, None))
    if quotas.zk is not None:
        for entity in changed:
            await quotas.zk.write(entity)  # a cluster's are in ZooKeeper
    elif changed:
        quotas.save()
    return AlterClientQuotasResponse(entries=entries)
