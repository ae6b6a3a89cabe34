"""ACLs the Kafka way: bindings of a resource pattern to an access control entry, the
filters CreateAcls/DescribeAcls/DeleteAcls use, and the file they persist in.

The numeric codes are Kafka's (ResourceType, PatternType, AclOperation,
AclPermissionType), as they travel in the ACL APIs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from trio_broker.security.credentials import atomic_write

logger = logging.getLogger(__name__)

__all__ = ["AclBinding", "AclFilter", "AclStore", "Op", "Pattern", "Permission", "Resource"]


class Resource:
    ANY, TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER = 1, 2, 3, 4, 5, 6, 7
    VALID = (2, 3, 4, 5, 6, 7)


class Pattern:
    ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4


class Op:
    ANY, ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 1, 2, 3, 4, 5, 6, 7, 8
    CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
    CREATE_TOKENS, DESCRIBE_TOKENS = 13, 14
    NAMES = {
        "ALL": 2,
        "READ": 3,
        "WRITE": 4,
        "CREATE": 5,
        "DELETE": 6,
        "ALTER": 7,
        "DESCRIBE": 8,
        "CLUSTER_ACTION": 9,
        "DESCRIBE_CONFIGS": 10,
        "ALTER_CONFIGS": 11,
        "IDEMPOTENT_WRITE": 12,
        "CREATE_TOKENS": 13,
        "DESCRIBE_TOKENS": 14,
    }


class Permission:
    ANY, DENY, ALLOW = 1, 2, 3


WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"


@attrs.frozen(kw_only=True)
class AclBinding:
    resource_type: int
    resource_name: str
    pattern_type: int  # LITERAL or PREFIXED
    principal: str
    host: str
    operation: int
    permission: int

    def matches_resource(self, resource_type: int, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == Pattern.LITERAL:
            return self.resource_name == name or self.resource_name == WILDCARD
        return name.startswith(self.resource_name)

    def to_json(self) -> dict[str, object]:
        return attrs.asdict(self)


def validate_binding(binding: AclBinding) -> str | None:
    """Why Kafka would refuse to create this binding, or None."""
    if binding.resource_type not in Resource.VALID:
        return "Invalid resource type"
    if binding.pattern_type not in (Pattern.LITERAL, Pattern.PREFIXED):
        return "Invalid pattern type; must be LITERAL or PREFIXED"
    if not binding.resource_name:
        return "Resource name must not be empty"
    if binding.resource_type == Resource.CLUSTER and binding.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    kind, sep, name = binding.principal.partition(":")
    if not sep or not kind or not name:
        return f"Could not parse principal from `{binding.principal}` (no colon is present)"
    if binding.operation < Op.ALL or binding.operation > Op.DESCRIBE_TOKENS:
        return "Invalid operation"
    if binding.permission not in (Permission.DENY, Permission.ALLOW):
        return "Invalid permission type"
    if not binding.host:
        return "Host must not be empty"
    return None


@attrs.frozen(kw_only=True)
class AclFilter:
    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != Resource.ANY and self.resource_type != b.resource_type:
            return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != Op.ANY and self.operation != b.operation:
            return False
        if self.permission != Permission.ANY and self.permission != b.permission:
            return False
        name = self.resource_name
        if self.pattern_type == Pattern.ANY:
            return name is None or name == b.resource_name
        if self.pattern_type == Pattern.MATCH:
            # Every binding that would apply to a resource of this name.
            if name is None:
                return True
            if b.pattern_type == Pattern.LITERAL:
                return b.resource_name in (name, WILDCARD)
            return name.startswith(b.resource_name)
        return self.pattern_type == b.pattern_type and (name is None or name == b.resource_name)

    def invalid(self) -> str | None:
        if self.resource_type < Resource.ANY or self.pattern_type < Pattern.ANY:
            return "Invalid resource or pattern type in filter"
        if self.operation < Op.ANY or self.permission < Permission.ANY:
            return "Invalid operation or permission type in filter"
        return None


class AclStore:
    """All bindings, indexed by resource type, persisted as JSON in the first log dir."""

    FILE = "acls.json"

    def __init__(self, path: Path | None) -> None:
        self.path = path  # None in a cluster: ZooKeeper holds them (security/zk_acls.py)
        self.zk: Any = None
        self.bindings: set[AclBinding] = set()
        self.by_type: dict[int, list[AclBinding]] = {}
        self.generation = 0  # bumped on every change (the authorizer's cache key)
        if path is not None and path.exists():
            try:
                for entry in json.loads(path.read_text())["acls"]:
                    self.bindings.add(AclBinding(**entry))
            except (ValueError, KeyError, TypeError, OSError) as exc:
                # Refusing to start beats starting with no ACLs (and so open, or closed).
                raise RuntimeError(f"cannot read ACLs from {path}: {exc}") from exc
        self._reindex()

    def _reindex(self) -> None:
        self.generation += 1
        by_type: dict[int, list[AclBinding]] = {}
        for b in self.bindings:
            by_type.setdefault(b.resource_type, []).append(b)
        self.by_type = by_type

    def add(self, bindings: Iterable[AclBinding]) -> None:
        self.bindings.update(bindings)
        self._save()

    def remove(self, bindings: Iterable[AclBinding]) -> None:
        self.bindings.difference_update(bindings)
        self._save()

    def replace(self, bindings: set[AclBinding]) -> None:
        """All bindings at once (what ZooKeeper holds); not saved to a file."""
        self.bindings = set(bindings)
        self._reindex()

    def _save(self) -> None:
        self._reindex()
        if self.path is None:
            return
        doc = {"version": 1, "acls": [b.to_json() for b in sorted(self.bindings, key=_order)]}
        atomic_write(self.path, json.dumps(doc, indent=1))

    def matching(self, f: AclFilter) -> list[AclBinding]:
        return sorted((b for b in self.bindings if f.matches(b)), key=_order)


def _order(b: AclBinding) -> tuple[object, ...]:
    return attrs.astuple(b)
