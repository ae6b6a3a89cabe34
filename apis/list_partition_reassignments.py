"""ListPartitionReassignments (key 46): the ongoing reassignments, from the controller
(cluster/controller/reassignment.py); NOT_CONTROLLER elsewhere."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.apis.alter_partition_reassignments import controller_of
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.list_partition_reassignments_response import (
    ListPartitionReassignmentsResponse,
    OngoingPartitionReassignment,
    OngoingTopicReassignment,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> ListPartitionReassignmentsResponse:
    from trio_broker.cluster.controller.reassignment import list_reassignments

    body = request.body
    controller = controller_of(broker)
    if controller is None:
        return ListPartitionReassignmentsResponse(
            error_code=ErrorCode.NOT_CONTROLLER, error_message="This broker is not the controller."
        )
    await controller.ready.wait()
    wanted = (
        None
        if body.topics is None
        else [(t.name, p) for t in body.topics for p in t.partition_indexes]
    )
    ongoing = list_reassignments(controller, wanted)
    by_topic: dict[str, list[OngoingPartitionReassignment]] = {}
    for (topic, partition), (replicas, adding, removing) in sorted(ongoing.items()):
        by_topic.setdefault(topic, []).append(
            OngoingPartitionReassignment(
                partition_index=partition,
                replicas=list(replicas),
                adding_replicas=list(adding),
                removing_replicas=list(removing),
            )
        )
    return ListPartitionReassignmentsResponse(
        error_code=ErrorCode.NONE,
        error_message=None,
        topics=[OngoingTopicReassignment(name=t, partitions=ps) for t, ps in by_topic.items()],
    )
