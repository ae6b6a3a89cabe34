"""Producer ids in a cluster: blocks of ids taken from ZooKeeper's /latest_producer_id_block
(Kafka's ZkProducerIdManager), so that no two brokers ever hand out the same id.

`next_id()` stays synchronous, as the lone broker's ProducerIdManager is (its callers
are the InitProducerId handler and the transaction coordinator): ids come from the block
in hand, and the next block is fetched in the background once 90% of the current one is
used (Kafka's RPCProducerIdManager prefetches the same way). With no id in hand (the first
block not fetched yet, or ZooKeeper slow), `next_id` raises COORDINATOR_LOAD_IN_PROGRESS,
which clients retry.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from trio_broker.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from trio_broker.cluster.zookeeper import zk_data
    from trio_broker.cluster.zookeeper.session import ZooKeeperSession

logger = logging.getLogger(__name__)

__all__ = ["ZkProducerIdManager"]

_PREFETCH_AT = 0.9


class ZkProducerIdManager:
    def __init__(self, broker_id: int, zk: ZooKeeperSession) -> None:
        self.broker_id = broker_id
        self.zk = zk
        self._block: zk_data.ProducerIdBlock | None = None
        self._next = 0
        self._prefetched: zk_data.ProducerIdBlock | None = None
        self._wanted = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        from trio_broker.cluster.zookeeper.admin_zk_client import allocate_producer_ids

        task_status.started()
        self._wanted.set()  # the first block, at once
        while True:
            await self._wanted.wait()
            self._wanted = trio.Event()
            if self._prefetched is None:
                self._prefetched = await allocate_producer_ids(self.zk, self.broker_id)
            if self._block is None:
                self._take_prefetched()
                self._wanted.set()  # and the one after it, ready for when this runs out

    def _take_prefetched(self) -> bool:
        if self._prefetched is None:
            return False
        self._block, self._prefetched = self._prefetched, None
        self._next = self._block.block_start
        return True

    def next_id(self) -> int:
        if (self._block is None or self._next > self._block.block_end) and not (
            self._take_prefetched()
        ):
            self._wanted.set()
            raise KafkaError(
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "waiting for a block of producer ids"
            )
        assert self._block is not None
        pid = self._next
        self._next += 1
        used = self._next - self._block.block_start
        size = self._block.block_end - self._block.block_start + 1
        if self._prefetched is None and used >= size * _PREFETCH_AT:
            self._wanted.set()
        return pid
