"""Topic administration through ZooKeeper, on any broker of a cluster (Kafka's AdminZkClient).

A broker that receives CreateTopics, CreatePartitions or DeleteTopics does not make logs:
it writes what Kafka writes and the controller (cluster/controller/kafka_controller.py) reacts to it.

    create_topic       /config/topics/<t> first, then /brokers/topics/<t> (the assignment);
                       the controller's watch on /brokers/topics sees the new topic
    add_partitions     /brokers/topics/<t> rewritten at the version read, with the new
                       partitions' replicas; the controller's watch on the topic sees them
    mark_for_deletion  /admin/delete_topics/<t>; the controller deletes the topic
    allocate_producer_ids  the next block of /latest_producer_id_block, by a conditional write

The assignment itself is cluster/replica_assignment.py, over the live brokers.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

from trio_broker.cluster.zookeeper import zk_data
from trio_broker.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from trio_broker.cluster.zookeeper.session import ZooKeeperSession

logger = logging.getLogger(__name__)

__all__ = [
    "PRODUCER_ID_BLOCK_SIZE",
    "add_partitions",
    "allocate_producer_ids",
    "create_topic",
    "delete_recursive",
    "mark_for_deletion",
    "read_assignment",
    "read_topic_config",
]

PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


async def create_topic(
    zk: ZooKeeperSession,
    name: str,
    assignment: Mapping[int, tuple[int, ...]],
    configs: Mapping[str, str],
    topic_id: uuid.UUID | None = None,
) -> uuid.UUID:
    """Kafka's createTopicWithAssignment: the config znode, then the topic znode. Raises
    KafkaError(TOPIC_ALREADY_EXISTS) when /brokers/topics/<name> exists."""
    from kazoo.exceptions import NodeExistsError

    if await zk.exists(zk_data.topic_path(name)) is not None:
        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    topic_id = topic_id or uuid.uuid4()
    config_data = zk_data.encode_topic_config(dict(configs))
    try:
        await zk.create(zk_data.topic_config_path(name), config_data, makepath=True)
    except NodeExistsError:
        # Left by a creation that failed half way (or a topic being deleted): Kafka
        # overwrites the config of a topic that does not exist yet.
        await zk.set(zk_data.topic_config_path(name), config_data)
    data = zk_data.TopicAssignment(topic_id=topic_id, partitions=dict(assignment)).encode()
    try:
        await zk.create(zk_data.topic_path(name), data, makepath=True)
    except NodeExistsError:
        raise KafkaError(
            ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
        ) from None
    logger.info(
        "wrote topic %s to ZooKeeper: %d partitions, replicas %s",
        name,
        len(assignment),
        {p: list(r) for p, r in sorted(assignment.items())},
    )
    return topic_id


async def read_assignment(
    zk: ZooKeeperSession, name: str
) -> tuple[zk_data.TopicAssignment, int] | None:
    """(assignment, znode version) of a topic, or None if it does not exist."""
    from kazoo.exceptions import NoNodeError

    try:
        data, stat = await zk.get(zk_data.topic_path(name))
    except NoNodeError:
        return None
    try:
        return zk_data.TopicAssignment.decode(data), stat.version
    except (ValueError, KeyError, TypeError, json.JSONDecodeError):
        logger.error("unreadable assignment of topic %s: %r", name, data[:200])
        return None


async def read_topic_config(zk: ZooKeeperSession, name: str) -> dict[str, str]:
    from kazoo.exceptions import NoNodeError

    try:
        data, _ = await zk.get(zk_data.topic_config_path(name))
    except NoNodeError:
        return {}
    return zk_data.decode_topic_config(data)


async def add_partitions(
    zk: ZooKeeperSession,
    name: str,
    current: zk_data.TopicAssignment,
    version: int,
    added: Mapping[int, tuple[int, ...]],
) -> None:
    """Kafka's addPartitions: the topic znode with the new partitions, written only at
    `version` (a concurrent change gives REASSIGNMENT_IN_PROGRESS-like retry to the client)."""
    from kazoo.exceptions import BadVersionError, NoNodeError

    partitions = dict(current.partitions)
    partitions.update(added)
    data = zk_data.TopicAssignment(
        topic_id=current.topic_id,
        partitions=partitions,
        adding_replicas=current.adding_replicas,
        removing_replicas=current.removing_replicas,
    ).encode()
    try:
        await zk.set(zk_data.topic_path(name), data, version=version)
    except NoNodeError:
        raise KafkaError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
        ) from None
    except BadVersionError:
        raise KafkaError(
            ErrorCode.REASSIGNMENT_IN_PROGRESS,
            f"The assignment of topic '{name}' changed meanwhile; retry.",
        ) from None
    logger.info("added partitions %s to topic %s", sorted(added), name)


async def mark_for_deletion(zk: ZooKeeperSession, name: str) -> None:
    """Kafka's deleteTopic: /admin/delete_topics/<name> (already marked is fine)."""
    await zk.create_if_missing(zk_data.delete_topic_path(name))


async def delete_recursive(zk: ZooKeeperSession, path: str) -> None:
    """Delete `path` and everything under it (children first); raises NoNodeError if
    `path` is missing."""
    from kazoo.exceptions import NoNodeError

    for child in await zk.get_children(path):
        try:
            await delete_recursive(zk, f"{path}/{child}")
        except NoNodeError:
            pass
    await zk.delete(path)


async def allocate_producer_ids(zk: ZooKeeperSession, broker_id: int) -> zk_data.ProducerIdBlock:
    """Kafka's ZkProducerIdManager.getNewProducerIdBlock: read the latest block, write the
    next one at the version read; on a conflict (another broker took one) read again."""
    from kazoo.exceptions import BadVersionError, NoNodeError

    while True:
        try:
            data, stat = await zk.get(zk_data.PRODUCER_ID_BLOCK_PATH)
        except NoNodeError:
            await zk.create_if_missing(zk_data.PRODUCER_ID_BLOCK_PATH)
            continue
        start = 0
        if data:
            try:
                start = zk_data.ProducerIdBlock.decode(data).block_end + 1
            except (ValueError, KeyError, json.JSONDecodeError):
                logger.error("unreadable %s: %r", zk_data.PRODUCER_ID_BLOCK_PATH, data[:200])
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "bad producer id block") from None
        block = zk_data.ProducerIdBlock(
            broker=broker_id, block_start=start, block_end=start + PRODUCER_ID_BLOCK_SIZE - 1
        )
        try:
            await zk.set(zk_data.PRODUCER_ID_BLOCK_PATH, block.encode(), version=stat.version)
        except BadVersionError:
            continue
        logger.info(
            "broker %d took producer ids %d-%d", broker_id, block.block_start, block.block_end
        )
        return block
