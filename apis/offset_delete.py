"""OffsetDelete (key 47): offsets of topics the group does not subscribe to."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> Any:
    return broker.group_coordinator.offsets.delete_offsets(request.body)
