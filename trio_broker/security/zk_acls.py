"""A cluster's ACLs in ZooKeeper, where Kafka's AclAuthorizer keeps them.

    /kafka-acl/<Type>/<name>                      LITERAL patterns
    /kafka-acl-extended/prefixed/<Type>/<name>    PREFIXED patterns
        {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                              "operation":"Read","host":"*"}]}
    /kafka-acl-changes/acl_changes_<seq>          "Topic:name" after a LITERAL change
    /kafka-acl-extended-changes/acl_changes_<seq> {"version":1,"resourceType":"Topic",
                                                   "name":"x","patternType":"PREFIXED"}

Every broker loads them at start and follows both change paths. A write reads the
resource's znode, changes it and writes it back conditionally on its version (retrying
when another broker wrote between), then leaves a change notification.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

import trio

from trio_broker.cluster.zookeeper.change_notifications import ChangeFollower, notify
from trio_broker.security.acl import AclBinding, Op, Pattern, Permission

logger = logging.getLogger(__name__)

__all__ = ["ZkAcls"]

_TYPES = {
    2: "Topic",
    3: "Group",
    4: "Cluster",
    5: "TransactionalId",
    6: "DelegationToken",
    7: "User",
}
_TYPE_CODES = {v: k for k, v in _TYPES.items()}
_OPS = {
    Op.ALL: "All",
    Op.READ: "Read",
    Op.WRITE: "Write",
    Op.CREATE: "Create",
    Op.DELETE: "Delete",
    Op.ALTER: "Alter",
    Op.DESCRIBE: "Describe",
    Op.CLUSTER_ACTION: "ClusterAction",
    Op.DESCRIBE_CONFIGS: "DescribeConfigs",
    Op.ALTER_CONFIGS: "AlterConfigs",
    Op.IDEMPOTENT_WRITE: "IdempotentWrite",
    Op.CREATE_TOKENS: "CreateTokens",
    Op.DESCRIBE_TOKENS: "DescribeTokens",
}
_OP_CODES = {v: k for k, v in _OPS.items()}
_PERMISSIONS = {Permission.ALLOW: "Allow", Permission.DENY: "Deny"}
_PERMISSION_CODES = {v: k for k, v in _PERMISSIONS.items()}

_ROOTS = {Pattern.LITERAL: "/kafka-acl", Pattern.PREFIXED: "/kafka-acl-extended/prefixed"}
_CHANGES = {Pattern.LITERAL: "/kafka-acl-changes", Pattern.PREFIXED: "/kafka-acl-extended-changes"}
_PREFIX = "acl_changes_"

Resource = tuple[int, str, int]  # (resource type, name, pattern type)


def _path(resource: Resource) -> str:
    rtype, name, pattern = resource
    return f"{_ROOTS[pattern]}/{_TYPES[rtype]}/{name}"


def _decode(resource: Resource, data: bytes) -> set[AclBinding]:
    rtype, name, pattern = resource
    out = set()
    for acl in json.loads(data).get("acls", []):
        out.add(
            AclBinding(
                resource_type=rtype,
                resource_name=name,
                pattern_type=pattern,
                principal=acl["principal"],
                host=acl["host"],
                operation=_OP_CODES[acl["operation"]],
                permission=_PERMISSION_CODES[acl["permissionType"]],
            )
        )
    return out


def _encode(bindings: Iterable[AclBinding]) -> bytes:
    acls = [
        {
            "principal": b.principal,
            "permissionType": _PERMISSIONS[b.permission],
            "operation": _OPS[b.operation],
            "host": b.host,
        }
        for b in sorted(bindings, key=lambda b: (b.principal, b.host, b.operation, b.permission))
    ]
    return json.dumps({"version": 1, "acls": acls}).encode()


class ZkAcls:
    """A broker service: keeps the authorizer's AclStore equal to ZooKeeper's ACLs."""

    def __init__(self, broker: Any) -> None:
        self.zk = broker.zk
        self.store = broker.authorizer.store
        self.store.zk = self
        self._changes = {p: ChangeFollower(self.zk, path, _PREFIX) for p, path in _CHANGES.items()}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        for pattern in _ROOTS:
            await self.zk.create_if_missing(_ROOTS[pattern])
            await self._changes[pattern].start()
        bindings: set[AclBinding] = set()
        for pattern, root in _ROOTS.items():
            for type_name in await self.zk.get_children(root):
                rtype = _TYPE_CODES.get(type_name)
                if rtype is None:
                    continue
                for name in await self.zk.get_children(f"{root}/{type_name}"):
                    bindings |= await self._read((rtype, name, pattern))
        self.store.replace(bindings)
        task_status.started()
        async with trio.open_nursery() as nursery:
            for pattern in _CHANGES:
                nursery.start_soon(self._follow, pattern)

    async def _follow(self, pattern: int) -> None:
        async def on_change(data: bytes) -> None:
            resource = self._changed(pattern, data)
            if resource is not None:
                self._install(resource, await self._read(resource))

        await self._changes[pattern].run(on_change)

    def _changed(self, pattern: int, data: bytes) -> Resource | None:
        try:
            if pattern == Pattern.LITERAL:
                type_name, _, name = data.decode().partition(":")
            else:
                event = json.loads(data)
                type_name, name = event["resourceType"], event["name"]
        except (ValueError, KeyError, TypeError):
            return None
        rtype = _TYPE_CODES.get(type_name) or _TYPE_CODES.get(type_name.title())
        return None if rtype is None else (rtype, name, pattern)

    async def _read(self, resource: Resource) -> set[AclBinding]:
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = await self.zk.get(_path(resource))
            return _decode(resource, data)
        except NoNodeError:
            return set()
        except (ValueError, KeyError):
            logger.warning("ignoring unreadable ACLs at %s", _path(resource))
            return set()

    def _install(self, resource: Resource, bindings: set[AclBinding]) -> None:
        kept = {
            b
            for b in self.store.bindings
            if (b.resource_type, b.resource_name, b.pattern_type) != resource
        }
        self.store.replace(kept | bindings)

    async def add(self, bindings: Iterable[AclBinding]) -> None:
        await self._update(bindings, lambda current, mine: current | mine)

    async def remove(self, bindings: Iterable[AclBinding]) -> None:
        await self._update(bindings, lambda current, mine: current - mine)

    async def _update(
        self,
        bindings: Iterable[AclBinding],
        change: Callable[[set[AclBinding], set[AclBinding]], set[AclBinding]],
    ) -> None:
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        by_resource: dict[Resource, set[AclBinding]] = {}
        for b in bindings:
            by_resource.setdefault((b.resource_type, b.resource_name, b.pattern_type), set()).add(b)
        for resource, mine in by_resource.items():
            path = _path(resource)
            while True:  # conditional on the version read: another broker may write too
                try:
                    data, stat = await self.zk.get(path)
                    current, version = _decode(resource, data), stat.version
                except NoNodeError:
                    current, version = set(), None
                wanted = change(current, mine)
                try:
                    if version is None:
                        if wanted:
                            await self.zk.create(path, _encode(wanted), makepath=True)
                    elif wanted:
                        await self.zk.set(path, _encode(wanted), version=version)
                    else:
                        await self.zk.delete(path, version=version)
                except (BadVersionError, NodeExistsError, NoNodeError):
                    continue
                break
            self._install(resource, wanted)
            rtype, name, pattern = resource
            if pattern == Pattern.LITERAL:
                notice = f"{_TYPES[rtype]}:{name}".encode()
            else:
                notice = json.dumps(
                    {
                        "version": 1,
                        "resourceType": _TYPES[rtype],
                        "name": name,
                        "patternType": "PREFIXED",
                    }
                ).encode()
            await notify(self.zk, _CHANGES[pattern], _PREFIX, notice)
