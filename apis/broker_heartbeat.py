"""BrokerHeartbeat (key 63): a broker of the cluster tells the controller it is alive.

KRaft's request to its controller quorum, here sent to the controller broker of a
ZooKeeper cluster (cluster/replication/heartbeats.py sends it; the controller's
cluster/controller/fencing.py fences a broker whose heartbeats stop). Between brokers
only: served but not listed in ApiVersions. NOT_CONTROLLER on any broker but the
controller; STALE_BROKER_EPOCH for a heartbeat of an earlier registration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.broker_heartbeat_response import BrokerHeartbeatResponse

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> BrokerHeartbeatResponse:
    body = request.body
    elector = getattr(broker, "controller_elector", None)
    controller = elector.controller if elector is not None else None
    if controller is None or not controller.ready.is_set():
        return BrokerHeartbeatResponse(error_code=ErrorCode.NOT_CONTROLLER, is_fenced=True)
    error, fenced = controller.fencing.heartbeat(body.broker_id, body.broker_epoch)
    return BrokerHeartbeatResponse(error_code=error, is_caught_up=not fenced, is_fenced=fenced)
