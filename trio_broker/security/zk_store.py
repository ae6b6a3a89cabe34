"""A cluster's SCRAM credentials in ZooKeeper, where Kafka keeps them.

    /config/users/<user>      {"version":1,"config":{"SCRAM-SHA-256":"salt=...,stored_key=...,
                               server_key=...,iterations=4096", ...other user configs}}
    /config/changes/config_change_<seq>   {"version":2,"entity_path":"users/<user>"}

Every broker loads the users at start and then follows the change notifications (Kafka's
ZkNodeChangeNotificationListener), so credentials made through any broker authenticate on
all of them. Writes keep the user's other configs (quotas) as they are.
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
from trio_broker.security.credentials import security_state
from trio_broker.security.sasl import SCRAM_HASHES, ScramCredential
from trio_broker.security.zk_names import desanitize, sanitize

logger = logging.getLogger(__name__)

__all__ = ["ZkScram"]

USERS = "/config/users"


class ZkScram:
    """A broker service: keeps `security_state(broker).scram` equal to ZooKeeper's."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.zk = broker.zk
        self.store = security_state(broker).scram
        self.store.zk = self  # the credential APIs write through it
        self._changes = config_changes(self.zk)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.zk.create_if_missing(USERS)
        await self._changes.start()
        for znode in await self.zk.get_children(USERS):
            await self._load(desanitize(znode))
        task_status.started()
        await self._changes.run(self._on_change)

    async def _on_change(self, data: bytes) -> None:
        kind, _, name = (changed_entity(data) or "").partition("/")
        if kind == "users" and name and "/" not in name:  # not users/<user>/clients/<c>
            await self._load(desanitize(name))

    async def _load(self, user: str) -> None:
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = await self.zk.get(f"{USERS}/{sanitize(user)}")
            config = json.loads(data).get("config", {})
        except NoNodeError:
            config = {}
        except ValueError:
            logger.warning("ignoring unreadable %s/%s", USERS, sanitize(user))
            return
        credentials = {}
        for mechanism in SCRAM_HASHES:
            if mechanism in config:
                try:
                    credentials[mechanism] = ScramCredential.from_text(config[mechanism])
                except (ValueError, KeyError):
                    logger.warning("ignoring an unreadable %s credential of %s", mechanism, user)
        if credentials:
            self.store.users[user] = credentials
        else:
            self.store.users.pop(user, None)

    async def write(self, users: set[str]) -> None:
        """Write these users' credentials as the store holds them, then notify the brokers."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        for user in users:
            path = f"{USERS}/{sanitize(user)}"
            while True:  # conditional on the version read: quotas share this znode
                try:
                    data, stat = await self.zk.get(path)
                    doc = json.loads(data)
                    version = stat.version
                except NoNodeError:
                    doc, version = {"version": 1, "config": {}}, None
                config = {k: v for k, v in doc.get("config", {}).items() if k not in SCRAM_HASHES}
                for mechanism, credential in self.store.users.get(user, {}).items():
                    config[mechanism] = credential.to_text()
                payload = json.dumps({"version": 1, "config": config}).encode()
                try:
                    if version is None:
                        await self.zk.create(path, payload, makepath=True)
                    else:
                        await self.zk.set(path, payload, version=version)
                except (BadVersionError, NodeExistsError, NoNodeError):
                    continue
                break
            await notify_config_change(self.zk, f"users/{sanitize(user)}")
