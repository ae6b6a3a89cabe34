"""ShareAcknowledge (key 79): a share group member's acknowledgements without a fetch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> Any:
    manager = broker.group_coordinator.share_partitions
    response = manager.acknowledge(request)
    await manager.flush(request.body)  # a cluster: the acknowledgements written first
    return response
