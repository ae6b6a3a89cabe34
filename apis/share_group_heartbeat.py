"""ShareGroupHeartbeat (key 76): a KIP-932 share group member's membership request."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trio_broker.apis.join_group import client_host

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> Any:
    return broker.group_coordinator.share.heartbeat(
        request.body, client_id=request.parsed.client_id or "", client_host=client_host(request)
    )
