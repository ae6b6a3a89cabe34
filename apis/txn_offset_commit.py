"""TxnOffsetCommit (key 28): offsets committed inside a transaction, applied on its commit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> Any:
    return broker.group_coordinator.offsets.txn_commit_offsets(
        request.body, api_version=request.api_version
    )
