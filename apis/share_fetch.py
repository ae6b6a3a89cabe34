"""ShareFetch (key 78): acknowledge, then acquire records for a share group member; the
answer may wait in the fetch purgatory (cluster/groups/share/share_fetch.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> Any:
    manager = broker.group_coordinator.share_partitions
    await manager.prepare(request.body)  # a cluster: the share-partitions' state read
    response = manager.fetch(request)
    await manager.flush(request.body)  # a cluster: its acknowledgements written
    return response
