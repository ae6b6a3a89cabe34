"""Kafka's broker epochs (KIP-380): the czxid of a broker's registration znode.

The controller puts the target broker's epoch in every LeaderAndIsr, UpdateMetadata and
StopReplica (cluster/controller/channel_manager.py). A broker restarted quickly registers anew
with a larger czxid; a request the controller built for its previous life, still on its
way, carries the old epoch and is refused with STALE_BROKER_EPOCH instead of applying
stale leaderships or deletions. -1 (older request versions, a lone broker) is never stale.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["is_stale"]


def is_stale(broker: Any, request_epoch: int, what: str) -> bool:
    current = broker.broker_epoch
    if request_epoch == -1 or request_epoch >= current:
        return False
    logger.info(
        "%s with broker epoch %d, older than this broker's %d: refused (STALE_BROKER_EPOCH)",
        what,
        request_epoch,
        current,
    )
    return True
