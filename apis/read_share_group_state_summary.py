"""ReadShareGroupStateSummary (key 87): share-partitions' state epochs and start offsets,
from their share coordinator (cluster/groups/share/state_coordinator.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> Any:
    return broker.group_coordinator.share_state_coordinator.read_summary(request.body)
