"""DeleteGroups (key 42): only empty groups can go, and their offsets go with them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trio_broker.protocol._generated.delete_groups_response import DeletableGroupResult

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> Any:
    coordinator = broker.group_coordinator
    # A cluster: an empty share group's state at the share coordinators goes first (Kafka
    # deletes it before the group); a group whose state cannot go stays.
    failed = await coordinator.share_partitions.delete_groups_state(request.body.groups_names)
    if not failed:
        return coordinator.offsets.delete_groups(request.body)
    names = request.body.groups_names
    request.body.groups_names = [g for g in names if g not in failed]
    response = coordinator.offsets.delete_groups(request.body)
    response.results.extend(
        DeletableGroupResult(group_id=g, error_code=code) for g, code in failed.items()
    )
    return response
