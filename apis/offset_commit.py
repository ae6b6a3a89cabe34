"""OffsetCommit (key 8)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> Any:
    coordinator = broker.group_coordinator
    if getattr(broker, "replica_manager", None) is None:
        # One broker: the append is committed at once.
        return coordinator.offsets.commit_offsets(request.body, api_version=request.api_version)
    response, install = coordinator.offsets.prepare_commit(
        request.body, api_version=request.api_version
    )
    accepted = [p for t in response.topics for p in t.partitions if p.error_code == 0]
    if not accepted:
        return response
    # A cluster: answered once the ISR has the commit, as Kafka's acks=-1 append.
    from trio_broker.cluster.replication.delayed_produce import after_replication
    from trio_broker.errors import ErrorCode

    def answer(code: ErrorCode) -> Any:
        if not code:
            install()  # OffsetFetch sees the offsets once they are committed
        else:
            # Kafka's GroupMetadataManager maps the append's error for the client.
            mapped = (
                ErrorCode.NOT_COORDINATOR
                if code == ErrorCode.NOT_LEADER_OR_FOLLOWER
                else ErrorCode.COORDINATOR_NOT_AVAILABLE
            )
            for p in accepted:
                p.error_code = mapped
        return response

    return after_replication(
        broker,
        request,
        "__consumer_offsets",
        coordinator.store.partition_for(request.body.group_id),
        broker.config.offsets_commit_timeout_ms,
        answer,
    )
