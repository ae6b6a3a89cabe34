"""ElectLeaders (key 43): preferred (0) or unclean (1) leader election, on the controller
(Kafka's KafkaController.electLeaders, ZooKeeper era).

Admin clients send it to the controller; another broker answers NOT_CONTROLLER. A null
partition list means every partition, and then only the partitions an election changed
(or could not change) are reported, as Kafka does. The answer waits, up to timeout_ms,
until this broker's cache shows the new leaders.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.elect_leaders_response import (
    ElectLeadersResponse,
    PartitionResult,
    ReplicaElectionResult,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request

PREFERRED, UNCLEAN = 0, 1


def _response(results: dict[tuple[str, int], int], version: int) -> ElectLeadersResponse:
    by_topic: dict[str, list[PartitionResult]] = {}
    for (topic, partition), code in sorted(results.items()):
        by_topic.setdefault(topic, []).append(
            PartitionResult(
                partition_id=partition,
                error_code=code,
                error_message=None if code == ErrorCode.NONE else ErrorCode(code).name,
            )
        )
    return ElectLeadersResponse(
        error_code=ErrorCode.NONE,
        replica_election_results=[
            ReplicaElectionResult(topic=t, partition_result=r) for t, r in sorted(by_topic.items())
        ],
    )


async def handle(broker: Broker, request: Request) -> ElectLeadersResponse:
    body = request.body
    election = body.election_type if request.api_version >= 1 else PREFERRED
    everything = body.topic_partitions is None
    wanted = (
        [(t.name, p) for t in broker.metadata.topics.values() for p in t.partitions]
        if everything
        else [(t.topic, p) for t in body.topic_partitions for p in t.partitions]
    )
    elector = getattr(broker, "controller_elector", None)
    controller = elector.controller if elector is not None else None
    if controller is None:
        if broker.metadata.zk_mode:
            if request.api_version >= 1:
                return ElectLeadersResponse(error_code=ErrorCode.NOT_CONTROLLER)
            return _response(dict.fromkeys(wanted, ErrorCode.NOT_CONTROLLER), 0)
        # A lone broker leads every partition it has: nothing to elect.
        results = {
            tp: ErrorCode.ELECTION_NOT_NEEDED
            if tp[0] in broker.metadata.topics and tp[1] in broker.metadata.topics[tp[0]].partitions
            else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            for tp in wanted
        }
        if everything:
            results = {}
        return _response(results, request.api_version)
    if election not in (PREFERRED, UNCLEAN):
        return ElectLeadersResponse(error_code=ErrorCode.INVALID_REQUEST)
    await controller.ready.wait()
    results = await controller.elect_preferred(wanted, election == UNCLEAN)
    if results is None:
        return ElectLeadersResponse(error_code=ErrorCode.NOT_CONTROLLER)
    elected = {tp for tp, code in results.items() if code == ErrorCode.NONE}
    with trio.move_on_after(max(body.timeout_ms, 0) / 1000):
        while not all(_known_leader(broker, tp, controller) for tp in elected):
            await trio.sleep(0.02)
    if everything:
        results = {tp: c for tp, c in results.items() if c != ErrorCode.ELECTION_NOT_NEEDED}
    return _response(results, request.api_version)


def _known_leader(broker: Broker, tp: tuple[str, int], controller) -> bool:
    topic = broker.metadata.topics.get(tp[0])
    state = controller.ctx.states.get(tp)
    cached = topic.partitions.get(tp[1]) if topic is not None else None
    return state is None or (cached is not None and cached.leader_epoch >= state.leader_epoch)
