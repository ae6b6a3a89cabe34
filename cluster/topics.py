"""Topics: creation (explicit and automatic), deletion, partitions, and their configs.

The controller's part of topic management for a cluster of one: it validates as Kafka
does, records the result in the cluster metadata (persisted), and makes the logs.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

from trio_broker.cluster.metadata import ClusterMetadata, PartitionState, TopicState
from trio_broker.cluster.topic_config import resolve_log_config, validate_topic_configs
from trio_broker.config import BrokerConfig
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log.checkpoints import PendingSyncs

if TYPE_CHECKING:
    from trio_broker.cluster.zk_topics import ZkTopics
    from trio_broker.log import LogManager, PartitionLog

logger = logging.getLogger(__name__)

__all__ = ["INTERNAL_TOPICS", "TopicManager", "is_legal_topic_name", "validate_topic_name"]

_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
_MAX_NAME_LENGTH = 249
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def validate_topic_name(name: str | None) -> None:
    """Kafka's Topic.validate: raises KafkaError(INVALID_TOPIC_EXCEPTION) with its reason."""
    if not name:
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty"
        )
    if name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, 'Topic name cannot be "." or ".."')
    if len(name) > _MAX_NAME_LENGTH:
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name is illegal, it can't be longer than {_MAX_NAME_LENGTH} characters",
        )
    if not _LEGAL.fullmatch(name):
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f'Topic name "{name}" is illegal, it contains a character other than '
            "ASCII alphanumerics, '.', '_' and '-'",
        )


def is_legal_topic_name(name: str | None) -> bool:
    """Whether a topic could have this name (validate_topic_name would pass it)."""
    try:
        validate_topic_name(name)
    except KafkaError:
        return False
    return True


class TopicManager:
    def __init__(self, config: BrokerConfig, metadata: ClusterMetadata, logs: LogManager) -> None:
        self.config = config
        self.metadata = metadata
        self.logs = logs
        # In a ZooKeeper cluster (metadata.zk_mode): the cluster half (cluster/zk_topics.py),
        # set by the broker; creation, deletion and new partitions go through ZooKeeper.
        self.zk_topics: ZkTopics | None = None

    @property
    def live_brokers(self) -> int:
        return max(len(self.metadata.brokers), 1)

    def open(self) -> None:
        """At start: every partition in the metadata gets its log (created if missing), and
        partition directories unknown to the metadata are adopted as topics.

        In a ZooKeeper cluster nothing is adopted or led at start: the logs on disk wait
        for the controller's LeaderAndIsr to make each a leader or a follower."""
        if self.metadata.zk_mode:
            return
        # Logs found on disk may not be loaded yet (log/log_loading.py): they load with
        # their topic's config, and catch their high watermark up when they do.
        self.logs.on_log_loaded = self._lead_loaded
        known = set(self.logs.partitions())
        for topic in self.metadata.topics.values():
            cfg = resolve_log_config(topic.configs, self.config)
            for p in topic.partitions.values():
                if (topic.name, p.partition) not in known:
                    log = self.logs.create_log(topic.name, p.partition, topic.topic_id, cfg)
                    _start_leader_epoch(log, p.leader_epoch)
                elif (log := self.logs.loaded_log(topic.name, p.partition)) is not None:
                    log.update_config(cfg)
        adopted = False
        for topic_name, partition in known:
            topic = self.metadata.topics.get(topic_name)
            if topic is not None and partition in topic.partitions:
                continue
            log = self.logs.get_log(topic_name, partition)  # rare: loaded now
            if log is None:
                continue
            topic = self.metadata.topics.get(log.topic)
            if topic is None:
                topic = TopicState(
                    name=log.topic,
                    topic_id=log.topic_id or uuid.uuid4(),
                    internal=log.topic in INTERNAL_TOPICS,
                )
                self.metadata.topics[log.topic] = topic
            if log.partition not in topic.partitions:
                topic.partitions[log.partition] = self._new_partition(log.topic, log.partition)
                adopted = True
        if adopted:
            logger.warning("adopted partition directories missing from the metadata file")
            self.metadata.save()
        self._become_leader()

    def _become_leader(self) -> None:
        """Kafka's leader HW rule: the high watermark is the smallest log end offset in the
        ISR. While this broker is the ISR alone, that is its own log end offset; after an
        unclean stop the checkpointed HW lags, and this catches it up."""
        for log in self.logs.all_logs():
            self._lead_loaded(log)

    def _lead_loaded(self, log: PartitionLog) -> None:
        """`_become_leader` for one log, as it is loaded (a worker thread may call it)."""
        node = self.config.node_id
        topic = self.metadata.topics.get(log.topic)
        p = topic.partitions.get(log.partition) if topic is not None else None
        if p is not None and p.leader == node and p.isr == [node]:
            log.high_watermark = log.log_end_offset

    def _new_partition(self, topic: str, partition: int) -> PartitionState:
        node = self.config.node_id
        return PartitionState(
            topic=topic,
            partition=partition,
            leader=node,
            leader_epoch=0,
            replicas=[node],
            isr=[node],
        )

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get_log(topic, partition)

    # --- create ---------------------------------------------------------------------------

    def check_new_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str | None],
        *,
        internal: bool = False,
        registered: int | None = None,
    ) -> tuple[int, int]:
        """Validate a CreateTopics entry; returns the resolved (partitions, replication).
        `registered`: the brokers registered now (a cluster reads ZooKeeper for it), else
        the metadata cache's count."""
        live_brokers = self.live_brokers if registered is None else max(registered, 1)
        validate_topic_name(name)
        if name in self.metadata.topics:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if name.startswith("__") and name in INTERNAL_TOPICS and not internal:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Topic '{name}' is an internal topic.")
        if _collides(name, self.metadata.topics):
            raise KafkaError(
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"Topic '{name}' collides with an existing topic ('.' and '_' collide).",
            )
        if num_partitions == -1:
            num_partitions = self.config.num_partitions
        if replication_factor == -1:
            replication_factor = self.config.default_replication_factor
        if internal and not self.metadata.zk_mode:
            # A lone broker is a cluster of one: its internal topics have one replica
            # whatever offsets.topic.replication.factor says (Kafka's default is 3).
            replication_factor = min(replication_factor, live_brokers)
        if num_partitions <= 0:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
            )
        if replication_factor <= 0:
            raise KafkaError(
                ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
            )
        if replication_factor > live_brokers:
            raise KafkaError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {replication_factor} time(s): The target "
                f"replication factor of {replication_factor} cannot be reached because only "
                f"{live_brokers} broker(s) are registered.",
            )
        validate_topic_configs(configs)
        return num_partitions, replication_factor

    def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str | None] | None = None,
        *,
        internal: bool = False,
        topic_id: uuid.UUID | None = None,
    ) -> TopicState:
        configs = dict(configs or {})
        if self.zk_topics is not None:
            # In a cluster only the coordinators create topics this way (their internal
            # topics): through ZooKeeper, in the background; they answer "not yet".
            try:
                num_partitions, replication_factor = self.check_new_topic(
                    name, num_partitions, replication_factor, configs, internal=internal
                )
            except KafkaError as exc:
                if exc.code != ErrorCode.INVALID_REPLICATION_FACTOR:
                    raise
                logger.warning("cannot create %s yet: %s", name, exc.message)
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE) from None
            self.zk_topics.create_in_background(
                name,
                num_partitions,
                replication_factor,
                {k: v for k, v in configs.items() if v is not None},
            )
        num_partitions, _ = self.check_new_topic(
            name, num_partitions, replication_factor, configs, internal=internal
        )
        topic = TopicState(
            name=name,
            topic_id=topic_id or uuid.uuid4(),
            configs={k: v for k, v in configs.items() if v is not None},
            internal=internal,
        )
        cfg = resolve_log_config(topic.configs, self.config)
        created = []
        # The partitions' directories and partition.metadata files are fsynced together
        # once all are written (checkpoints.PendingSyncs), before the topic is saved.
        pending = PendingSyncs()
        try:
            for index in range(num_partitions):
                state = topic.partitions[index] = self._new_partition(name, index)
                log = self.logs.create_log(name, index, topic.topic_id, cfg, pending=pending)
                _start_leader_epoch(log, state.leader_epoch)
                created.append(index)
            try:
                pending.sync()
            except OSError as exc:
                self.logs.new_logs_not_durable(exc)
                raise
            self.metadata.topics[name] = topic
            self.metadata.save()
        except (KafkaError, OSError) as exc:
            # A full disk: no half-created topic stays behind (neither logs nor metadata),
            # so the client's retry starts afresh once there is space.
            self.metadata.topics.pop(name, None)
            for index in created:
                try:
                    self.logs.delete_log(name, index)
                except (KafkaError, OSError):
                    logger.exception("cannot remove log %s-%s of a failed creation", name, index)
            logger.error("cannot create topic %s: %s", name, exc)
            if isinstance(exc, KafkaError):
                raise
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"cannot create topic {name}: {exc}"
            ) from exc
        logger.info("created topic %s (%d partitions, id %s)", name, num_partitions, topic.topic_id)
        return topic

    async def auto_create(self, name: str) -> tuple[TopicState | None, ErrorCode]:
        """Metadata's auto-creation: (topic, NONE) for one that exists, or (None, the error
        to report)."""
        if not self.config.auto_create_topics_enable or name in INTERNAL_TOPICS:
            return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if self.zk_topics is not None:
            # Created through ZooKeeper; LEADER_NOT_AVAILABLE until the controller elected
            # its leaders and told this broker (Kafka's answer too).
            try:
                await self.zk_topics.create_topic(name, -1, -1, {})
            except KafkaError as exc:
                if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    return None, exc.code
            return None, ErrorCode.LEADER_NOT_AVAILABLE
        # Created at once, and still answered LEADER_NOT_AVAILABLE without partitions, as
        # Kafka 3.9 answers every Metadata that auto-creates a topic (its creation is
        # asynchronous there; KRaft answers UNKNOWN_TOPIC_OR_PARTITION): clients ask again.
        # kafka-go's tests rely on it (Metadata v1 right after DeleteTopics lists no
        # partitions of the deleted topics).
        try:
            self.create_topic(name)
        except KafkaError as exc:
            if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                return self.metadata.topics[name], ErrorCode.NONE
            return None, exc.code
        return None, ErrorCode.LEADER_NOT_AVAILABLE

    # --- change ---------------------------------------------------------------------------

    def delete_topic(self, name: str) -> TopicState:
        topic = self.metadata.topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if topic.internal:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Topic {name} is an internal topic.")
        if not self.config.delete_topic_enable:
            raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED)
        for p in topic.partitions:
            if self.logs.get_log(name, p) is not None:
                self.logs.delete_log(name, p)
        del self.metadata.topics[name]
        self.metadata.save()
        logger.info("deleted topic %s (id %s)", name, topic.topic_id)
        return topic

    def check_create_partitions(self, name: str, count: int) -> TopicState:
        topic = self.metadata.topics.get(name)
        if topic is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
            )
        current = len(topic.partitions)
        if count < current:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {current} partitions, which is higher than the requested {count}.",
            )
        if count == current:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions."
            )
        return topic

    def create_partitions(self, name: str, count: int) -> TopicState:
        topic = self.check_create_partitions(name, count)
        cfg = resolve_log_config(topic.configs, self.config)
        # Each partition is added once its log exists, so a full disk midway leaves whole
        # partitions only (the request gets KAFKA_STORAGE_ERROR from create_log).
        for index in range(len(topic.partitions), count):
            log = self.logs.create_log(name, index, topic.topic_id, cfg)
            state = topic.partitions[index] = self._new_partition(name, index)
            _start_leader_epoch(log, state.leader_epoch)
        try:
            self.metadata.save()
        except OSError as exc:
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"cannot save the metadata of {name}: {exc}"
            ) from exc
        return topic

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """Replace a topic's overrides (AlterConfigs semantics; validated by the caller)."""
        topic = self.metadata.topics[name]
        topic.configs = dict(configs)
        cfg = resolve_log_config(topic.configs, self.config)
        for p in topic.partitions:
            log = self.logs.get_log(name, p)
            if log is not None:
                log.update_config(cfg)
        if self.zk_topics is not None:
            # A cluster: /config/topics/<t> and a change notification for the other brokers;
            # the AlterConfigs answer waits for the write (zk_topics.config_writes_done).
            self.zk_topics.write_config(name, topic.configs)
            return
        self.metadata.save()


def _collides(name: str, topics: Mapping[str, TopicState]) -> bool:
    folded = name.replace(".", "_")
    return any(t != name and t.replace(".", "_") == folded for t in topics)


def _start_leader_epoch(log: PartitionLog, leader_epoch: int) -> None:
    """A lone broker's new partition: its leader epoch starts at the log's end now, as a
    broker's does when it becomes a partition's leader (Kafka's makeLeader), not at the
    first record: OffsetForLeaderEpoch answers for it while it is empty, and its
    checkpoint is written with the creation. (Assigned at the first produce, 20,000 new
    partitions' first records left 20,000 files for a stop right after to write: 80-160
    us each here.)"""
    if log.latest_epoch() is not None:
        return
    try:
        log.leader_epoch_cache.assign(leader_epoch, log.log_end_offset)
    except OSError as exc:
        # The first append assigns it again (and the flush writes it).
        logger.warning("leader epoch checkpoint of %s not written: %s", log.name, exc)
