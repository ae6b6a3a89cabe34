"""DeleteRecords (key 21): move a partition's log start offset forward.

Offset -1 means the high watermark; an offset beyond it (or below -1) is
OFFSET_OUT_OF_RANGE. Segments wholly below the new start are removed, and the answer is
the partition's new low watermark (its log start offset), as Kafka's leader answers it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.apis.partition_lookup import leader_log
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.delete_records_response import (
    DeleteRecordsPartitionResult,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


def _delete(
    broker: Broker, topic: str, partition: int, offset: int
) -> DeleteRecordsPartitionResult:
    try:
        _, log = leader_log(broker, topic, partition)
        low_watermark = log.delete_records_before(offset)
    except KafkaError as exc:
        return DeleteRecordsPartitionResult(
            partition_index=partition, low_watermark=-1, error_code=exc.code
        )
    return DeleteRecordsPartitionResult(
        partition_index=partition, low_watermark=low_watermark, error_code=ErrorCode.NONE
    )


async def handle(broker: Broker, request: Request) -> DeleteRecordsResponse:
    return DeleteRecordsResponse(
        topics=[
            DeleteRecordsTopicResult(
                name=t.name,
                partitions=[
                    _delete(broker, t.name, p.partition_index, p.offset) for p in t.partitions
                ],
            )
            for t in request.body.topics
        ]
    )
