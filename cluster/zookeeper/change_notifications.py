"""Change notifications in ZooKeeper (Kafka's ZkNodeChangeNotificationListener).

A broker that changes shared state (a config under /config, an ACL) writes it, then a
sequential znode under a notification path naming what changed:

    /config/changes/config_change_0000000042     {"version":2,"entity_path":"users/alice"}
    /kafka-acl-changes/acl_changes_0000000007    Topic:orders

Every broker watches the path and, for each notification newer than the last it saw,
reloads what it names. What was there before the broker started is not news: it reads the
state itself at start. The services following a path (SCRAM credentials, client quotas,
dynamic broker configs, ACLs) share this one follower.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import trio

__all__ = [
    "write_entity_config",
    "CONFIG_CHANGES",
    "CONFIG_CHANGE_PREFIX",
    "ChangeFollower",
    "config_changes",
    "changed_entity",
    "notify",
    "notify_config_change",
]

CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"


class ChangeFollower:
    """Follows one notification path: `await start()` once (before reading the state, so
    that nothing written meanwhile is missed), then `run(on_change)` in a task, which calls
    `on_change(data)` with each new notification's bytes, in order."""

    def __init__(self, zk: Any, path: str, prefix: str) -> None:
        self.zk = zk
        self.path = path
        self.prefix = prefix
        self.last = -1

    def _seq(self, name: str) -> int:
        text = name[len(self.prefix) :]
        return int(text) if name.startswith(self.prefix) and text.isdigit() else -1

    async def start(self) -> None:
        await self.zk.create_if_missing(self.path)
        self.last = max(map(self._seq, await self.zk.get_children(self.path)), default=-1)

    async def run(self, on_change: Callable[[bytes], Awaitable[None]]) -> None:
        from kazoo.exceptions import NoNodeError

        send, receive = trio.open_memory_channel[list[str]](1)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.zk.watch_children, self.path, send)
            async with receive:
                async for children in receive:
                    for child in sorted(children, key=self._seq):
                        seq = self._seq(child)
                        if seq <= self.last:
                            continue
                        self.last = seq
                        try:
                            data, _ = await self.zk.get(f"{self.path}/{child}")
                        except NoNodeError:
                            continue  # expired and removed meanwhile
                        await on_change(data)


async def notify(zk: Any, path: str, prefix: str, data: bytes) -> None:
    """Write a notification: the next sequential znode `<path>/<prefix><seq>`."""
    await zk.create(f"{path}/{prefix}", data, sequence=True)


def config_changes(zk: Any) -> ChangeFollower:
    """A follower of /config/changes (configs, credentials, quotas)."""
    return ChangeFollower(zk, CONFIG_CHANGES, CONFIG_CHANGE_PREFIX)


def changed_entity(data: bytes) -> str | None:
    """What a /config/changes notification names ("topics/t", "users/alice", ...)."""
    try:
        return str(json.loads(data)["entity_path"])
    except (ValueError, KeyError, TypeError):
        return None


async def notify_config_change(zk: Any, entity: str) -> None:
    data = json.dumps({"version": 2, "entity_path": entity}).encode()
    await notify(zk, CONFIG_CHANGES, CONFIG_CHANGE_PREFIX, data)


async def write_entity_config(zk: Any, root: str, entity: str, configs: dict[str, str]) -> None:
    """Write `{root}/{entity}`'s whole override set (Kafka's `{"version":1,"config":...}`,
    created if missing) and announce it in /config/changes as `{kind}/{entity}`, where
    kind is the last part of `root` (/config/brokers, /config/groups)."""
    from kazoo.exceptions import NodeExistsError, NoNodeError

    path = f"{root}/{entity}"
    payload = json.dumps({"version": 1, "config": configs}).encode()
    try:
        await zk.set(path, payload)
    except NoNodeError:
        try:
            await zk.create(path, payload, makepath=True)
        except NodeExistsError:
            await zk.set(path, payload)
    await notify_config_change(zk, f"{root.rsplit('/', 1)[-1]}/{entity}")
