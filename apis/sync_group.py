"""SyncGroup (key 14): followers wait, parked, for the leader's assignment."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> Any:
    coordinator = broker.group_coordinator
    return coordinator.call(
        request,
        lambda reply: coordinator.sync_group(
            request.body, api_version=request.api_version, reply=reply
        ),
    )
