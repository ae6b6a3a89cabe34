"""TxnOffsetCommit (key 28): offsets committed inside a transaction, applied on its commit.

In a cluster the answer waits for the ISR of the group's `__consumer_offsets` partition,
as OffsetCommit does (Kafka appends both with acks=-1)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> Any:
    coordinator = broker.group_coordinator
    response = coordinator.offsets.txn_commit_offsets(request.body, api_version=request.api_version)
    if getattr(broker, "replica_manager", None) is None:
        return response  # one broker: the append is committed at once
    accepted = [p for t in response.topics for p in t.partitions if p.error_code == 0]
    if not accepted:
        return response
    from trio_broker.cluster.replication.isr_wait import (
        map_for_coordinator,
        respond_when_replicated,
    )

    tp = ("__consumer_offsets", coordinator.store.partition_for(request.body.group_id))

    def answer(codes: dict[tuple[str, int], Any]) -> Any:
        code = map_for_coordinator(codes[tp])
        if code:
            for p in accepted:
                p.error_code = code
        return response

    return respond_when_replicated(
        broker, request, [tp], broker.config.offsets_commit_timeout_ms, answer
    )
