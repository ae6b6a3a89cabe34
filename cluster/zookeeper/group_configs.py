"""A cluster's group configs in ZooKeeper, beside the topic and broker configs.

    /config/groups/<group>                {"version":1,"config":{"share.auto.offset.reset":"earliest"}}
    /config/changes/config_change_<seq>   {"version":2,"entity_path":"groups/<group>"}

A lone broker keeps its groups' configs (`share.*`, `consumer.*`, set with
IncrementalAlterConfigs on a GROUP resource) in its metadata file; in a cluster they live
here, so a config set through any broker holds on every broker (a share group's
share-partitions are kept by the leaders of its topics' partitions, on every broker), is
described the same by all, and a broker started later loads it. The group name is
URL-encoded in the path, as Kafka's Sanitizer does for user and client ids. Every broker
loads /config/groups at start and then follows the change notifications.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, unquote

import trio

from trio_broker.cluster.zookeeper.change_notifications import (
    changed_entity,
    config_changes,
    write_entity_config,
)

logger = logging.getLogger(__name__)

__all__ = ["GROUPS", "ZkGroupConfigs"]

GROUPS = "/config/groups"


def _znode(group: str) -> str:
    return quote(group, safe="")


class ZkGroupConfigs:
    """A broker service: keeps `metadata.group_configs` equal to ZooKeeper's."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.zk = broker.zk
        self._nursery: trio.Nursery | None = None
        self._pending = 0
        self._done = trio.Event()
        self._changes = config_changes(self.zk)

    @property
    def configs(self) -> dict[str, dict[str, str]]:
        return self.broker.metadata.group_configs

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.zk.create_if_missing(GROUPS)
        await self._changes.start()
        loaded = {}
        for child in await self.zk.get_children(GROUPS):
            config = await self._read(child)
            if config:
                loaded[unquote(child)] = config
        # What this broker's metadata file remembered is ZooKeeper's now.
        self.configs.clear()
        self.configs.update(loaded)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await self._changes.run(self._on_change)

    async def _on_change(self, data: bytes) -> None:
        kind, _, name = (changed_entity(data) or "").partition("/")
        if kind != "groups" or not name:
            return
        config = await self._read(name)
        if config is None:
            return
        group = unquote(name)
        if config:
            self.configs[group] = config
        else:
            self.configs.pop(group, None)

    async def _read(self, name: str) -> dict[str, str] | None:
        """A group's configs ({} when its znode is gone), None when unreadable."""
        from kazoo.exceptions import NoNodeError

        path = f"{GROUPS}/{name}"
        try:
            data, _ = await self.zk.get(path)
            return {str(k): str(v) for k, v in json.loads(data).get("config", {}).items()}
        except NoNodeError:
            return {}
        except (ValueError, AttributeError, TypeError):
            logger.warning("ignoring unreadable %s", path)
            return None

    # --- writes (IncrementalAlterConfigs / AlterConfigs on a GROUP resource) --------------

    def write(self, group: str, configs: Mapping[str, str]) -> None:
        """Write a group's whole override set in the background; `writes_done` waits."""
        if self._nursery is None:
            raise RuntimeError("group configs are not loaded from ZooKeeper yet")
        self._pending += 1
        self._nursery.start_soon(self._write, group, dict(configs))

    async def _write(self, group: str, configs: dict[str, str]) -> None:
        from kazoo.exceptions import KazooException

        path = f"{GROUPS}/{_znode(group)}"
        try:
            await write_entity_config(self.zk, GROUPS, _znode(group), configs)
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
