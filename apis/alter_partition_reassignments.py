"""AlterPartitionReassignments (key 45) and ListPartitionReassignments (key 46), on the
controller (cluster/controller/reassignment.py); another broker, or a lone one, answers
NOT_CONTROLLER, as Kafka's do (admin clients send both to the controller).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.alter_partition_reassignments_response import (
    AlterPartitionReassignmentsResponse,
    ReassignablePartitionResponse,
    ReassignableTopicResponse,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


def controller_of(broker: Broker):
    elector = getattr(broker, "controller_elector", None)
    return elector.controller if elector is not None else None


async def handle(broker: Broker, request: Request) -> AlterPartitionReassignmentsResponse:
    body = request.body
    controller = controller_of(broker)
    if controller is None:
        return AlterPartitionReassignmentsResponse(
            error_code=ErrorCode.NOT_CONTROLLER, error_message="This broker is not the controller."
        )
    wanted = {(t.name, p.partition_index): p.replicas for t in body.topics for p in t.partitions}
    await controller.ready.wait()
    results = await controller.reassign(wanted)
    if results is None:
        return AlterPartitionReassignmentsResponse(error_code=ErrorCode.NOT_CONTROLLER)
    by_topic: dict[str, list[ReassignablePartitionResponse]] = {}
    for (topic, partition), (code, message) in results.items():
        by_topic.setdefault(topic, []).append(
            ReassignablePartitionResponse(
                partition_index=partition,
                error_code=code,
                error_message=message if code else None,
            )
        )
    return AlterPartitionReassignmentsResponse(
        error_code=ErrorCode.NONE,
        error_message=None,
        responses=[
            ReassignableTopicResponse(name=t, partitions=ps) for t, ps in sorted(by_topic.items())
        ],
    )
