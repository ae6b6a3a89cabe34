"""DeleteShareGroupState (key 86): share-partitions' state deleted at their share
coordinator (cluster/groups/share/state_coordinator.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> Any:
    return await broker.group_coordinator.share_state_coordinator.delete(request.body)
