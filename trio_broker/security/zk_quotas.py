"""A cluster's client quotas in ZooKeeper, where Kafka keeps them.

    /config/users/<user>                     {"version":1,"config":{"producer_byte_rate":"1024"}}
    /config/users/<user>/clients/<client>    (the user's SCRAM credentials share its znode)
    /config/clients/<client>
    /config/changes/config_change_<seq>      {"version":2,"entity_path":"users/alice/clients/c1"}

A default entity is named `<default>`; other names are URL-encoded as Kafka does
(security/zk_names.py). Every broker loads the quotas at start and follows the
change notifications; a write keeps the znode's other configs (credentials) as they are.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import trio

from trio_broker.cluster.zookeeper.change_notifications import (
    changed_entity,
    config_changes,
    notify_config_change,
)
from trio_broker.security.client_quotas import CLIENT_ID, QUOTA_KEYS, USER, Entity, install
from trio_broker.security.zk_names import desanitize, sanitize

logger = logging.getLogger(__name__)

__all__ = ["ZkQuotas"]

DEFAULT = "<default>"
_KEYS = QUOTA_KEYS[USER] | QUOTA_KEYS[CLIENT_ID]


def _zk_name(name: str | None) -> str:
    return DEFAULT if name is None else sanitize(name)


def _name(zk_name: str) -> str | None:
    return None if zk_name == DEFAULT else desanitize(zk_name)


def entity_path(entity: Entity) -> str:
    names = dict(entity)
    if USER in names and CLIENT_ID in names:
        return f"users/{_zk_name(names[USER])}/clients/{_zk_name(names[CLIENT_ID])}"
    if USER in names:
        return f"users/{_zk_name(names[USER])}"
    return f"clients/{_zk_name(names[CLIENT_ID])}"


def entity_of(path: str) -> Entity | None:
    parts = path.split("/")
    if len(parts) == 2 and parts[0] == "users":
        return ((USER, _name(parts[1])),)
    if len(parts) == 2 and parts[0] == "clients":
        return ((CLIENT_ID, _name(parts[1])),)
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return ((CLIENT_ID, _name(parts[3])), (USER, _name(parts[1])))
    return None


class ZkQuotas:
    """A broker service: keeps the broker's ClientQuotas equal to ZooKeeper's."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.zk = broker.zk
        broker.zk_quotas = self
        self._changes = config_changes(self.zk)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self._changes.start()
        for path in await self._entity_paths():
            await self._load(path)
        task_status.started()
        await self._changes.run(self._on_change)

    async def _entity_paths(self) -> list[str]:
        from kazoo.exceptions import NoNodeError

        paths = []
        for kind in ("users", "clients"):
            try:
                names = await self.zk.get_children(f"/config/{kind}")
            except NoNodeError:
                continue
            for name in names:
                paths.append(f"{kind}/{name}")
                if kind == "users":
                    try:
                        clients = await self.zk.get_children(f"/config/users/{name}/clients")
                    except NoNodeError:
                        continue
                    paths.extend(f"users/{name}/clients/{c}" for c in clients)
        return paths

    async def _on_change(self, data: bytes) -> None:
        path = changed_entity(data)
        if path is not None:
            await self._load(path)

    async def _load(self, path: str) -> None:
        from kazoo.exceptions import NoNodeError

        entity = entity_of(path)
        if entity is None:
            return
        try:
            data, _ = await self.zk.get(f"/config/{path}")
            config = json.loads(data).get("config", {})
        except NoNodeError:
            config = {}
        except ValueError:
            logger.warning("ignoring unreadable /config/%s", path)
            return
        values = {}
        for key, text in config.items():
            if key in _KEYS:
                try:
                    values[key] = float(text)
                except ValueError:
                    logger.warning("ignoring quota %s=%r of /config/%s", key, text, path)
        quotas = self.broker.client_quotas
        if quotas is None:
            if not values:
                return
            quotas = install(self.broker)
        quotas.entities.pop(entity, None)
        if values:
            quotas.alter(entity, list(values.items()))
        else:
            quotas.alter(entity, [])

    async def write(self, entity: Entity) -> None:
        """Write this entity's quotas as the broker holds them, then notify the brokers."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        path = entity_path(entity)
        values = self.broker.client_quotas.entities.get(entity, {})
        while True:
            try:
                data, stat = await self.zk.get(f"/config/{path}")
                doc, version = json.loads(data), stat.version
            except NoNodeError:
                doc, version = {"version": 1, "config": {}}, None
            config = {k: v for k, v in doc.get("config", {}).items() if k not in _KEYS}
            config.update({k: repr(v) for k, v in values.items()})
            payload = json.dumps({"version": 1, "config": config}).encode()
            try:
                if version is None:
                    await self.zk.create(f"/config/{path}", payload, makepath=True)
                else:
                    await self.zk.set(f"/config/{path}", payload, version=version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue
            break
        await notify_config_change(self.zk, path)
