"""LeaderAndIsr (key 4): the controller makes this broker a leader or a follower.

Only a broker of a ZooKeeper cluster has replicas to manage (cluster/replication/replica_manager.py);
a lone broker is its own controller and answers INVALID_REQUEST.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.leader_and_isr_response import LeaderAndIsrResponse

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> Any:
    manager = getattr(broker, "replica_manager", None)
    if manager is None:
        return LeaderAndIsrResponse(error_code=ErrorCode.INVALID_REQUEST)
    from trio_broker.cluster.zookeeper.broker_epoch import is_stale

    if is_stale(broker, request.body.broker_epoch, "LeaderAndIsr"):
        return LeaderAndIsrResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
    return await manager.become_leader_or_follower(request.body, request.api_version)
