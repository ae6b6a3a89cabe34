"""A cluster's dynamic broker configs in ZooKeeper, where Kafka keeps them.

    /config/brokers/<default>     {"version":1,"config":{"log.retention.ms":"3600000"}}
    /config/brokers/<node.id>     {"version":1,"config":{"num.io.threads":"4"}}
    /config/changes/config_change_<seq>   {"version":2,"entity_path":"brokers/<default>"}

A lone broker keeps both levels in its log dir (cluster/dynamic_broker_config.py); in a
cluster they live here, so a cluster-wide default set through any broker
(`kafka-configs --entity-default`, `trio-broker configs set broker ''`) reaches every broker,
and a broker started later picks it up. Every broker loads its two znodes at start and
then follows the change notifications, as Kafka's DynamicConfigManager does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import trio

from trio_broker.cluster.zookeeper.change_notifications import (
    changed_entity,
    config_changes,
    write_entity_config,
)

logger = logging.getLogger(__name__)

__all__ = ["ZkBrokerConfigs"]

BROKERS = "/config/brokers"
DEFAULT = "<default>"


class ZkBrokerConfigs:
    """A broker service: keeps this broker's DynamicBrokerConfig equal to ZooKeeper's."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.zk = broker.zk
        self.dynamic = broker.dynamic_config
        self.dynamic.store = self  # replace() writes through it instead of the file
        self._nursery: trio.Nursery | None = None
        self._pending = 0
        self._done = trio.Event()
        self._changes = config_changes(self.zk)

    def _znode(self, resource_name: str) -> str:
        return DEFAULT if resource_name == "" else resource_name

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.zk.create_if_missing(BROKERS)
        await self._changes.start()
        await self._load("")
        await self._load(str(self.broker.node_id))
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await self._changes.run(self._on_change)

    async def _on_change(self, data: bytes) -> None:
        kind, _, name = (changed_entity(data) or "").partition("/")
        if kind != "brokers":
            return
        if name == DEFAULT:
            await self._load("")
        elif name == str(self.broker.node_id):
            await self._load(name)

    async def _load(self, resource_name: str) -> None:
        """Read one level's znode and apply it (a level another broker changed, or ours)."""
        from kazoo.exceptions import NoNodeError

        path = f"{BROKERS}/{self._znode(resource_name)}"
        try:
            data, _ = await self.zk.get(path)
            config = dict(json.loads(data).get("config", {}))
        except NoNodeError:
            config = {}
        except (ValueError, AttributeError, TypeError):
            logger.warning("ignoring unreadable %s", path)
            return
        self.dynamic.set_level(resource_name, config)

    # --- writes (AlterConfigs / IncrementalAlterConfigs on a BROKER resource) -------------

    def write(self, resource_name: str, level: Mapping[str, str]) -> None:
        """Write a level in the background; `writes_done` waits for it."""
        if self._nursery is None:
            raise RuntimeError("dynamic broker configs are not loaded from ZooKeeper yet")
        self._pending += 1
        self._nursery.start_soon(self._write, resource_name, dict(level))

    async def _write(self, resource_name: str, level: dict[str, str]) -> None:
        from kazoo.exceptions import KazooException

        path = f"{BROKERS}/{self._znode(resource_name)}"
        try:
            await write_entity_config(self.zk, BROKERS, self._znode(resource_name), level)
        except KazooException as exc:
            logger.error("cannot write %s to ZooKeeper: %r", path, exc)
        finally:
            self._pending -= 1
            if self._pending == 0:
                self._done.set()
                self._done = trio.Event()

    async def writes_done(self) -> None:
        if self._pending:
            await self._done.wait()
