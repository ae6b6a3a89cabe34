"""DelayedProduce: an acks=all produce waits in the produce purgatory until the ISR has it.

After the append, each partition of the request whose high watermark has not passed the
appended batch waits (Kafka's DelayedProduce). The answer goes when every such partition
is decided: the HW passed it (NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank
below min.insync.replicas meanwhile), leadership was lost (NOT_LEADER_OR_FOLLOWER), or
timeout_ms ended (REQUEST_TIMED_OUT). The produce purgatory is woken under the partition's
key by high watermark moves, ISR changes and leadership changes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from trio_broker.cluster.replication.purgatory import DelayedOperation
from trio_broker.errors import ErrorCode
from trio_broker.server.requests import DELAYED

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request

__all__ = ["DelayedProduce", "after_replication", "finish_produce", "moved_leader_endpoints"]


@attrs.define
class _Waiting:
    topic: str
    partition: int
    required_offset: int  # the HW must reach this
    leader_generation: int  # Partition.leader_generation at the append
    answer: Any  # PartitionProduceResponse, filled in when decided
    done: bool = False


@attrs.define
class DelayedProduce:
    broker: Broker
    request: Request
    response: Any
    waiting: list[_Waiting]

    def try_complete(self) -> bool:
        rm = self.broker.replica_manager
        all_done = True
        for w in self.waiting:
            if w.done:
                continue
            part = rm.partitions.get((w.topic, w.partition))
            if part is None or not part.is_leader or part.leader_generation != w.leader_generation:
                _not_leader(self.broker, w)
            elif part.log.high_watermark >= w.required_offset:
                w.done = True
                # The maximal ISR, as the HW: every replica of it has the record.
                if len(part.maximal_isr) < _min_isr(self.broker, w.topic):
                    w.answer.error_code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                    w.answer.error_message = (
                        f"The ISR {part.isr} of {w.topic}-{w.partition} shrank below "
                        "min.insync.replicas after the append"
                    )
            else:
                all_done = False
        return all_done

    async def complete(self) -> None:
        self.try_complete()
        for w in self.waiting:
            if not w.done:
                w.done = True
                w.answer.error_code = ErrorCode.REQUEST_TIMED_OUT
                w.answer.error_message = "the in-sync replicas did not all have it in time"
        add_node_endpoints(self.broker, self.request, self.response)
        await self.request.respond(self.response)


def _not_leader(broker: Broker, w: _Waiting) -> None:
    w.done = True
    w.answer.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
    leader, epoch = broker.replica_manager.leader_of(w.topic, w.partition)
    w.answer.current_leader.leader_id = leader
    w.answer.current_leader.leader_epoch = epoch


def _min_isr(broker: Broker, topic: str) -> int:
    state = broker.metadata.topics.get(topic)
    if state is not None:
        text = state.configs.get("min.insync.replicas")
    else:  # before UpdateMetadata named the topic: the configs LeaderAndIsr read
        text = broker.replica_manager.topic_configs.get(topic, {}).get("min.insync.replicas")
    return int(text) if text is not None else broker.config.min_insync_replicas


def moved_leader_endpoints(
    broker: Broker,
    answers: Iterable[Any],
    endpoint_class: Any,
    errors: tuple[int, ...] = (ErrorCode.NOT_LEADER_OR_FOLLOWER,),
) -> list[Any]:
    """KIP-951 (Produce v10+, Fetch v16+): the endpoints of the leaders that partition
    answers with one of `errors` name (Produce: NOT_LEADER_OR_FOLLOWER; Fetch: that and
    FENCED_LEADER_EPOCH), so that clients need no Metadata round."""
    leaders = {
        a.current_leader.leader_id
        for a in answers
        if a.error_code in errors and a.current_leader.leader_id >= 0
    }
    out = []
    for node_id in sorted(leaders):
        node = broker.metadata.brokers.get(node_id)
        if node is not None:
            out.append(
                endpoint_class(node_id=node_id, host=node.host, port=node.port, rack=node.rack)
            )
    return out


def add_node_endpoints(broker: Broker, request: Request, response: Any) -> None:
    """Produce v10+: the endpoints of the leaders named in NOT_LEADER_OR_FOLLOWER answers."""
    if request.api_version < 10:
        return
    from trio_broker.protocol._generated.produce_response import NodeEndpoint

    answers = (p for t in response.responses for p in t.partition_responses)
    if endpoints := moved_leader_endpoints(broker, answers, NodeEndpoint):
        response.node_endpoints = endpoints


def finish_produce(
    broker: Broker, request: Request, response: Any, pending: list[tuple], timeout_ms: int
) -> Any:
    """The response now, or DELAYED with the request parked until the ISR has it."""
    if not pending:
        add_node_endpoints(broker, request, response)
        return response
    delayed = DelayedProduce(
        broker=broker,
        request=request,
        response=response,
        waiting=[_Waiting(t, p, offset, epoch, answer) for t, p, offset, epoch, answer in pending],
    )
    if delayed.try_complete():
        add_node_endpoints(broker, request, response)
        return response
    broker.replica_manager.produce_purgatory.park(
        DelayedOperation(
            keys=tuple((w.topic, w.partition) for w in delayed.waiting),
            deadline=trio.current_time() + max(timeout_ms, 0) / 1000,
            try_complete=delayed.try_complete,
            complete=delayed.complete,
        )
    )
    return DELAYED


def after_replication(
    broker: Broker,
    request: Request,
    topic: str,
    partition: int,
    timeout_ms: int,
    answer: Any,
) -> Any:
    """The coordinators' acks=-1 appends (Kafka's appendRecords with requiredAcks -1):
    `answer(code)` builds the response once the ISR has this leader's log end of
    `topic-partition` as it is now, with NONE, NOT_LEADER_OR_FOLLOWER,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND or REQUEST_TIMED_OUT. Returns that response, or
    DELAYED while the request waits in the produce purgatory."""
    rm = broker.replica_manager
    part = rm.leader_partition(topic, partition)
    if part is None:
        return answer(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    from trio_broker.protocol._generated.produce_response import PartitionProduceResponse

    slot = PartitionProduceResponse(index=partition)
    delayed = DelayedProduce(
        broker=broker,
        request=request,
        response=None,
        waiting=[_Waiting(topic, partition, part.log.log_end_offset, part.leader_generation, slot)],
    )
    if delayed.try_complete():
        return answer(ErrorCode(slot.error_code))

    async def complete() -> None:
        delayed.try_complete()
        w = delayed.waiting[0]
        code = ErrorCode(w.answer.error_code) if w.done else ErrorCode.REQUEST_TIMED_OUT
        await request.respond(answer(code))

    rm.produce_purgatory.park(
        DelayedOperation(
            keys=((topic, partition),),
            deadline=trio.current_time() + timeout_ms / 1000,
            try_complete=delayed.try_complete,
            complete=complete,
        )
    )
    return DELAYED
