"""ReadShareGroupState (key 84): a share-partition's state, from its share coordinator."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> Any:
    return broker.group_coordinator.share_state_coordinator.read(request.body)
