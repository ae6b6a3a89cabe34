"""The authorizer: Kafka's AclAuthorizer semantics over the broker's ACLs.

- super.users may do anything;
- a DENY binding matching the principal, host and operation (or ALL) wins;
- otherwise an ALLOW binding for the operation, ALL, or an operation implying it (READ,
  WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS);
- a resource no binding applies to at all is open only with
  allow.everyone.if.no.acl.found=true.

`authorizer.class.name` selects it under Kafka's names so Kafka configurations work
unchanged. Installing it wraps the broker's dispatch (security/authorize_apis.py); a
broker without one pays nothing per request.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trio_broker.config import ConfigError
from trio_broker.security.acl import (
    CLUSTER_NAME,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclStore,
    Op,
    Permission,
    Resource,
)

if TYPE_CHECKING:
    from trio_broker.server.requests import Request

logger = logging.getLogger(__name__)

__all__ = ["KAFKA_AUTHORIZERS", "Authorizer", "install"]

KAFKA_AUTHORIZERS = (
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "trio_broker.security.authorizer.Authorizer",
)

_MAX_DECISIONS = 100_000
_IMPLIES_DESCRIBE = frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALL})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.ALL})


def _allowing(op: int) -> frozenset[int]:
    if op == Op.DESCRIBE:
        return _IMPLIES_DESCRIBE
    if op == Op.DESCRIBE_CONFIGS:
        return _IMPLIES_DESCRIBE_CONFIGS
    return frozenset({op, Op.ALL})


class Authorizer:
    def __init__(self, config: Any, log_dir: Path | None) -> None:
        self.super_users = frozenset(p.strip() for p in config.super_users.split(";") if p.strip())
        self.allow_if_no_acl = config.allow_everyone_if_no_acl_found
        self.store = AclStore(log_dir / AclStore.FILE if log_dir is not None else None)
        # Decisions, cleared whenever the ACLs change: a produce or fetch asks the same
        # question per topic on every request, and the answer is a scan of the ACLs.
        self._decisions: dict[tuple[str, str, int, int, str], bool] = {}
        self._generation = self.store.generation

    def authorize(self, principal: str, host: str, op: int, rtype: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        if self._generation != self.store.generation or len(self._decisions) > _MAX_DECISIONS:
            self._decisions = {}
            self._generation = self.store.generation
        key = (principal, host, op, rtype, name)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._decisions[key] = self._decide(principal, host, op, rtype, name)
        return decision

    def _decide(self, principal: str, host: str, op: int, rtype: int, name: str) -> bool:
        matching = [b for b in self.store.by_type.get(rtype, ()) if b.matches_resource(rtype, name)]
        if not matching:
            return self.allow_if_no_acl
        allowed = False
        allow_ops = _allowing(op)
        for b in matching:
            if b.principal != principal and b.principal != WILDCARD_PRINCIPAL:
                continue
            if b.host != WILDCARD and b.host != host:
                continue
            if b.permission == Permission.DENY:
                if b.operation == op or b.operation == Op.ALL:
                    return False
            elif b.operation in allow_ops:
                allowed = True
        return allowed

    def allows(self, request: Request, op: int, rtype: int, name: str) -> bool:
        connection = request.connection
        return self.authorize(connection.principal, connection.peer_host, op, rtype, name)

    def authorize_cluster(self, request: Request, op: str | int) -> bool:
        code = Op.NAMES[op] if isinstance(op, str) else op
        return self.allows(request, code, Resource.CLUSTER, CLUSTER_NAME)

    def allows_any(self, request: Request, op: int, rtype: int) -> bool:
        """Whether some binding could let this principal do `op` on some resource of the
        type (Kafka's authorizeByResourceType, used for idempotent producers)."""
        connection = request.connection
        principal = connection.principal
        if principal in self.super_users:
            return True
        allow_ops = _allowing(op)
        for b in self.store.by_type.get(rtype, ()):
            if b.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if b.host not in (WILDCARD, connection.peer_host):
                continue
            if b.permission == Permission.ALLOW and b.operation in allow_ops:
                return True
        return False


def install(broker: Any) -> None:
    """Give the broker its authorizer and route its requests through the checks."""
    name = broker.config.authorizer_class_name
    if name not in KAFKA_AUTHORIZERS:
        raise ConfigError(
            f"authorizer.class.name={name} is not supported; use one of "
            + ", ".join(KAFKA_AUTHORIZERS)
        )
    from trio_broker.security.authorize_apis import authorizing_dispatch

    # A cluster's ACLs are in ZooKeeper (security/zk_acls.py), a lone broker's in a file.
    log_dir = Path(broker.config.log_dirs[0]) if broker.zk is None else None
    broker.authorizer = Authorizer(broker.config, log_dir)
    if broker.zk is not None:
        from trio_broker.security.zk_acls import ZkAcls

        broker.services.insert(0, ZkAcls(broker))
    plain_dispatch = broker._dispatch

    async def dispatch(broker_: Any, request: Request) -> Any:
        return await authorizing_dispatch(broker_, request, plain_dispatch)

    broker._dispatch = dispatch
    logger.info(
        "authorizer %s: %d ACLs, super users %s",
        name,
        len(broker.authorizer.store.bindings),
        ", ".join(sorted(broker.authorizer.super_users)) or "none",
    )
