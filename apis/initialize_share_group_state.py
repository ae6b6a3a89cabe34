"""InitializeShareGroupState (key 83): share-partitions start over at a state epoch and a
start offset, at their share coordinator (cluster/groups/share/state_coordinator.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> Any:
    return await broker.group_coordinator.share_state_coordinator.initialize(request.body)
