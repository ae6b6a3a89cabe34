"""Topic management on a broker of a ZooKeeper cluster: what TopicManager (cluster/topics.py)
delegates to when `metadata.zk_mode`.

The broker validates as Kafka's ZkAdminManager does, assigns replicas over the live
brokers (cluster/replica_assignment.py), writes ZooKeeper (cluster/zookeeper/admin_zk_client.py), and
waits for the controller: a created topic is answered once this broker's cache (filled by
UpdateMetadata) has a leader for every partition, a deleted one once the cache no longer
has it, each within the request's timeout.

Internal topics (`__consumer_offsets`, `__transaction_state`) are created the same way,
in the background (`ZkTopics.run` holds the nursery), when a coordinator first needs them;
the coordinator answers COORDINATOR_NOT_AVAILABLE meanwhile, and while fewer brokers are
alive than the topic's replication factor, as Kafka does.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import trio

from trio_broker.cluster.topics import is_legal_topic_name
from trio_broker.cluster.zookeeper import zk_data
from trio_broker.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from trio_broker.cluster.topics import TopicManager
    from trio_broker.cluster.zookeeper.session import ZooKeeperSession

logger = logging.getLogger(__name__)


__all__ = ["ZkTopics"]

_POLL_S = 0.02
_CONFIG_CHANGES_PATH = "/config/changes"
_CONFIG_CHANGE_PREFIX = "config_change_"
_CONFIG_CHANGE_EXPIRY_S = 15 * 60


class ZkTopics:
    """The cluster half of one broker's TopicManager; a broker service (`run`)."""

    def __init__(self, topics: TopicManager, zk: ZooKeeperSession) -> None:
        self.topics = topics
        self.zk = zk
        self._nursery: trio.Nursery | None = None
        self._creating: set[str] = set()
        self._pending_writes = 0
        self._writes_done = trio.Event()
        self._last_change = -1

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._follow_config_changes)
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None

    # --- topic configs (Kafka's dynamic config, ZooKeeper era) ------------------------------
    #
    # A broker that alters a topic's configs writes /config/topics/<t>, then a sequential
    # /config/changes/config_change_<n> naming "topics/<t>". Every broker watches
    # /config/changes and reloads the topic's configs into its cache and its logs;
    # notifications older than 15 minutes are removed (Kafka's changeExpirationMs).

    def write_config(self, name: str, configs: Mapping[str, str]) -> None:
        """Write a topic's new overrides in the background; `config_writes_done` waits."""
        if self._nursery is None:
            return
        self._pending_writes += 1
        self._nursery.start_soon(self._write_config, name, dict(configs))

    async def _write_config(self, name: str, configs: dict[str, str]) -> None:
        from kazoo.exceptions import KazooException

        try:
            await self.zk.set(zk_data.topic_config_path(name), zk_data.encode_topic_config(configs))
            change = {"version": 2, "entity_path": f"topics/{name}"}
            # A sequential znode (through a one-op multi, which takes kazoo's `sequence`).
            (created,) = await self.zk.transaction(
                [
                    (
                        "create",
                        (
                            f"{_CONFIG_CHANGES_PATH}/{_CONFIG_CHANGE_PREFIX}",
                            json.dumps(change, separators=(",", ":")).encode(),
                        ),
                        {"sequence": True},
                    )
                ]
            )
            if isinstance(created, Exception):
                raise created
        except KazooException as exc:
            logger.error("cannot write the configs of topic %s to ZooKeeper: %r", name, exc)
        finally:
            self._pending_writes -= 1
            if self._pending_writes == 0:
                self._writes_done.set()
                self._writes_done = trio.Event()

    async def config_writes_done(self) -> None:
        if self._pending_writes:
            await self._writes_done.wait()

    async def _follow_config_changes(self) -> None:
        send, receive = trio.open_memory_channel[list[str]](1)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.zk.watch_children, _CONFIG_CHANGES_PATH, send)
            async with receive:
                first = True
                async for children in receive:
                    seqs = sorted(
                        (int(c[len(_CONFIG_CHANGE_PREFIX) :]), c)
                        for c in children
                        if c.startswith(_CONFIG_CHANGE_PREFIX)
                        and c[len(_CONFIG_CHANGE_PREFIX) :].isdigit()
                    )
                    if first:
                        # What happened before this broker started is in the configs it
                        # reads with each topic; only later changes are news.
                        first = False
                        self._last_change = seqs[-1][0] if seqs else -1
                    for seq, child in seqs:
                        await self._on_config_change(seq, child)

    async def _on_config_change(self, seq: int, child: str) -> None:
        from kazoo.exceptions import NoNodeError

        path = f"{_CONFIG_CHANGES_PATH}/{child}"
        try:
            data, stat = await self.zk.get(path)
        except NoNodeError:
            return
        if seq > self._last_change:
            self._last_change = seq
            try:
                entity = json.loads(data).get("entity_path", "")
            except (ValueError, AttributeError):
                entity = ""
            kind, _, name = entity.partition("/")
            if kind == "topics" and name:
                await self.reload_topic_config(name)
        if stat.ctime / 1000 < time.time() - _CONFIG_CHANGE_EXPIRY_S:
            try:
                await self.zk.delete(path)
            except NoNodeError:
                pass

    async def reload_topic_config(self, name: str) -> None:
        from trio_broker.cluster.topic_config import resolve_log_config
        from trio_broker.cluster.zookeeper.admin_zk_client import read_topic_config

        topic = self.metadata.topics.get(name)
        if topic is None:
            return  # the configs are read with the topic when it arrives
        topic.configs = await read_topic_config(self.zk, name)
        cfg = resolve_log_config(topic.configs, self.topics.config)
        for p in topic.partitions:
            log = self.topics.logs.get_log(name, p)
            if log is not None:
                log.update_config(cfg)
        logger.info("topic %s configs: %s", name, topic.configs or "defaults")

    @property
    def metadata(self) -> Any:
        return self.topics.metadata

    async def registered_brokers(self) -> dict[int, str | None]:
        """The brokers registered in ZooKeeper now, with their racks: what a replication
        factor is judged against and replicas are assigned over (Kafka's ZkAdminManager
        reads them from ZooKeeper too). The metadata cache follows /brokers/ids through a
        watch and can lag a Metadata answer another broker just gave, so a client that
        saw every broker and at once created a topic with that many replicas would be
        refused."""
        from kazoo.exceptions import NoNodeError

        racks: dict[int, str | None] = {}
        for child in await self.zk.get_children(zk_data.BROKER_IDS_PATH):
            if not child.isdigit():
                continue
            try:
                data, _ = await self.zk.get(zk_data.broker_path(int(child)))
                racks[int(child)] = zk_data.BrokerInfo.decode(int(child), data).rack
            except NoNodeError:
                continue  # gone since the listing
            except (ValueError, KeyError, json.JSONDecodeError):
                racks[int(child)] = None  # unreadable: counted, as Kafka counts it
        return racks

    def assign(
        self,
        racks: Mapping[int, str | None],
        num_partitions: int,
        replication_factor: int,
        start_partition: int = 0,
        start=-1,
    ) -> dict[int, tuple[int, ...]]:
        from trio_broker.cluster.replica_assignment import assign_replicas

        return assign_replicas(
            dict(racks),
            num_partitions,
            replication_factor,
            start_partition=start_partition,
            fixed_start=start,
        )

    # --- create -----------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        assignment: Mapping[int, tuple[int, ...]] | None = None,
        internal: bool = False,
        validate_only: bool = False,
        timeout_ms: int = 0,
    ) -> tuple[uuid.UUID, int, int]:
        """Validate, assign, write ZooKeeper; wait up to `timeout_ms` for the leaders.
        Returns (topic id, partitions, replication factor)."""
        from trio_broker.cluster.zookeeper import admin_zk_client as zk_admin

        racks = await self.registered_brokers()
        if assignment is None:
            num_partitions, replication_factor = self.topics.check_new_topic(
                name,
                num_partitions,
                replication_factor,
                configs,
                internal=internal,
                registered=len(racks),
            )
            assignment = self.assign(racks, num_partitions, replication_factor)
        else:
            num_partitions = len(assignment)
            replication_factor = len(next(iter(assignment.values())))
            self.topics.check_new_topic(
                name,
                num_partitions,
                replication_factor,
                configs,
                internal=internal,
                registered=len(racks),
            )
        if await self.zk.exists(zk_data.topic_path(name)) is not None:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if validate_only:
            return uuid.UUID(int=0), num_partitions, replication_factor
        overrides = {k: v for k, v in configs.items() if v is not None}
        topic_id = await zk_admin.create_topic(self.zk, name, assignment, overrides)
        if timeout_ms > 0:
            await self.wait_for_leaders(name, num_partitions, timeout_ms)
        return topic_id, num_partitions, replication_factor

    def has_leaders(self, name: str, num_partitions: int) -> bool:
        topic = self.metadata.topics.get(name)
        return (
            topic is not None
            and len(topic.partitions) >= num_partitions
            and all(p.leader >= 0 for p in topic.partitions.values())
        )

    async def wait_for_leaders(self, name: str, num_partitions: int, timeout_ms: int) -> bool:
        with trio.move_on_after(timeout_ms / 1000):
            while not self.has_leaders(name, num_partitions):
                await trio.sleep(_POLL_S)
            return True
        return False

    def create_in_background(
        self, name: str, num_partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> None:
        """An internal topic a coordinator needs: refused at once while too few brokers are
        alive, else created in the background. Raises COORDINATOR_NOT_AVAILABLE either way
        (the client retries FindCoordinator until the topic has leaders)."""
        live = len(self.metadata.brokers)
        if replication_factor > live:
            logger.warning(
                "cannot create %s yet: its replication factor %d is larger than the %d live "
                "broker(s) (offsets.topic.replication.factor / "
                "transaction.state.log.replication.factor)",
                name,
                replication_factor,
                live,
            )
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if name not in self._creating and self._nursery is not None:
            self._creating.add(name)
            self._nursery.start_soon(
                self._create_quietly, name, num_partitions, replication_factor, dict(configs)
            )
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)

    async def _create_quietly(
        self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> None:
        try:
            await self.create_topic(
                name, num_partitions, replication_factor, configs, internal=True
            )
        except KafkaError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                logger.warning("cannot create %s: %s", name, exc)
        finally:
            self._creating.discard(name)

    async def _exists(self, name: str) -> bool:
        # A name no topic can have never becomes a ZooKeeper path: the empty one would be
        # /brokers/topics itself, and a NUL or ".." makes kazoo raise.
        return (
            is_legal_topic_name(name) and await self.zk.exists(zk_data.topic_path(name)) is not None
        )

    # --- delete -----------------------------------------------------------------------------

    async def delete_topic(self, name: str, timeout_ms: int) -> None:
        from trio_broker.cluster.zookeeper import admin_zk_client as zk_admin

        topic = self.metadata.topics.get(name)
        if topic is None and not await self._exists(name):
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                "This server does not host this topic-partition.",
            )
        if topic is not None and topic.internal:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Topic {name} is an internal topic.")
        if not self.topics.config.delete_topic_enable:
            raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED)
        await zk_admin.mark_for_deletion(self.zk, name)
        # Kafka: a timeout of 0 or less starts the deletion and answers REQUEST_TIMED_OUT.
        with trio.move_on_after(max(timeout_ms, 0) / 1000) as scope:
            while name in self.metadata.topics:
                await trio.sleep(_POLL_S)
        if scope.cancelled_caught:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"Topic {name} is marked for deletion.")

    # --- partitions -------------------------------------------------------------------------

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignments: list[list[int]] | None,
        *,
        validate_only: bool,
        timeout_ms: int,
    ) -> None:
        """Kafka's AdminZkClient.addPartitions: new partitions' replicas (given, or assigned
        starting where partition 0's preferred leader is) into the topic znode."""
        from trio_broker.cluster.zookeeper import admin_zk_client as zk_admin

        read = await zk_admin.read_assignment(self.zk, name) if is_legal_topic_name(name) else None
        if read is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
            )
        current, version = read
        existing = len(current.partitions)
        if count < existing:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {existing} partitions, which is higher than the "
                f"requested {count}.",
            )
        if count == existing:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS, f"Topic already has {existing} partitions."
            )
        factor = len(current.partitions[0]) if 0 in current.partitions else 1
        if assignments is not None:
            added = {existing + i: tuple(a) for i, a in enumerate(assignments)}
        else:
            racks = await self.registered_brokers()
            ids = sorted(racks)
            first = current.partitions.get(0, (ids[0],))[0] if ids else 0
            start = next((i for i, b in enumerate(ids) if b >= first), 0)
            added = self.assign(
                racks, count - existing, factor, start_partition=existing, start=start
            )
        if validate_only:
            return
        await zk_admin.add_partitions(self.zk, name, current, version, added)
        if timeout_ms > 0:
            await self.wait_for_leaders(name, count, timeout_ms)
