"""DescribeProducers (key 61): the active producers of partitions led here, from their
producer state: epoch, last sequence and timestamp, coordinator epoch, and the first
offset of an open transaction (what `kafka-transactions.sh find-hanging` looks at)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.apis.partition_lookup import leader_log
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.describe_producers_response import (
    DescribeProducersResponse,
    PartitionResponse,
    ProducerState,
    TopicResponse,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


def _partition(broker: Broker, topic: str, index: int) -> PartitionResponse:
    try:
        _, log = leader_log(broker, topic, index)
    except KafkaError as exc:
        return PartitionResponse(partition_index=index, error_code=exc.code)
    producers = [
        ProducerState(
            producer_id=entry.producer_id,
            producer_epoch=entry.producer_epoch,
            last_sequence=entry.last_seq,
            last_timestamp=entry.last_timestamp,
            coordinator_epoch=entry.coordinator_epoch,
            current_txn_start_offset=entry.current_txn_first_offset,
        )
        for entry in log.producer_state.producers.values()
    ]
    return PartitionResponse(
        partition_index=index, error_code=ErrorCode.NONE, active_producers=producers
    )


async def handle(broker: Broker, request: Request) -> DescribeProducersResponse:
    return DescribeProducersResponse(
        topics=[
            TopicResponse(
                name=t.name,
                partitions=[_partition(broker, t.name, i) for i in t.partition_indexes],
            )
            for t in request.body.topics
        ]
    )
