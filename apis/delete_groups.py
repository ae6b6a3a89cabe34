"""DeleteGroups (key 42): only empty groups can go, and their offsets go with them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> Any:
    return broker.group_coordinator.offsets.delete_groups(request.body)
