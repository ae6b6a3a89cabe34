"""JoinGroup (key 11): parked in the coordinator until the rebalance completes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


def client_host(request: Request) -> str:
    # Kafka reports the client's address as InetAddress.toString does: "/127.0.0.1".
    peer = getattr(request.connection, "peer", "?")
    return "/" + peer.rsplit(":", 1)[0]


async def handle(broker: Broker, request: Request) -> Any:
    coordinator = broker.group_coordinator
    return coordinator.call(
        request,
        lambda reply: coordinator.join_group(
            request.body,
            api_version=request.api_version,
            client_id=request.parsed.client_id or "",
            client_host=client_host(request),
            reply=reply,
        ),
    )
