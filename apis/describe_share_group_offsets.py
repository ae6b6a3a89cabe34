"""DescribeShareGroupOffsets (key 90): a share group's share-partition start offsets."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> Any:
    return await broker.group_coordinator.share_offsets.describe(request.body)
