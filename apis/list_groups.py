"""ListGroups (key 16), with state (v4+) and type (v5+) filters."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> Any:
    return broker.group_coordinator.offsets.list_groups(
        request.body, api_version=request.api_version
    )
