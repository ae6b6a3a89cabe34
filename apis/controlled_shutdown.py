"""ControlledShutdown (key 7): a broker about to stop asks the controller to move its
leaderships away first (Kafka's KafkaController.controlledShutdown).

Served by the controller only (NOT_CONTROLLER elsewhere, and on a lone broker). The answer
lists the partitions the broker still leads: empty means every leadership moved (or it
had none with other replicas) and it may stop; the broker retries otherwise.
BROKER_NOT_AVAILABLE: the controller could not decide (it cannot reach ZooKeeper, or it
is being deposed).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.controlled_shutdown_response import (
    ControlledShutdownResponse,
    RemainingPartition,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request

logger = logging.getLogger(__name__)


async def handle(broker: Broker, request: Request) -> ControlledShutdownResponse:
    body = request.body
    elector = getattr(broker, "controller_elector", None)
    controller = elector.controller if elector is not None else None
    if controller is None:
        return ControlledShutdownResponse(error_code=ErrorCode.NOT_CONTROLLER)
    await controller.ready.wait()
    # Kafka's check: a request from an earlier registration of that broker is stale.
    node = controller.ctx.live_brokers.get(body.broker_id)
    if body.broker_epoch != -1 and node is not None and body.broker_epoch < node.epoch:
        return ControlledShutdownResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
    if not controller.zk.connected:
        # Leaderships move only by writes to ZooKeeper: say so at once rather than hold
        # the request until it times out, so that a broker stopping while ZooKeeper is
        # down gives up after its retries instead of after four request timeouts.
        logger.warning(
            "controlled shutdown of broker %d refused: ZooKeeper is unreachable", body.broker_id
        )
        return ControlledShutdownResponse(error_code=ErrorCode.BROKER_NOT_AVAILABLE)
    remaining = await controller.controlled_shutdown(body.broker_id)
    if remaining is None:
        return ControlledShutdownResponse(error_code=ErrorCode.BROKER_NOT_AVAILABLE)
    return ControlledShutdownResponse(
        error_code=ErrorCode.NONE,
        remaining_partitions=[
            RemainingPartition(topic_name=t, partition_index=p) for t, p in remaining
        ],
    )
