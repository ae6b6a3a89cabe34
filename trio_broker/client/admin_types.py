"""The admin client's values: what its calls take and return (small frozen attrs classes)
and AdminError, the per-resource failure report."""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from trio_broker.client.subscription import TopicPartition
from trio_broker.errors import KafkaError

__all__ = [
    "SCRAM_MECHANISMS",
    "AclBinding",
    "AclBindingFilter",
    "AdminError",
    "ClientQuotaEntity",
    "ClientQuotaFilterComponent",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "GroupDescription",
    "GroupListing",
    "LogDirDescription",
    "MemberDescription",
    "NewTopic",
    "PartitionInfo",
    "PartitionLag",
    "PartitionReassignment",
    "ReplicaLogDirInfo",
    "TopicDescription",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "acl_code",
    "acl_name",
    "check_errors",
    "error_with",
]


class AdminError(KafkaError):
    """Some resources of a call failed: `.errors` maps each to its KafkaError."""

    def __init__(self, what: str, errors: Mapping[Any, KafkaError], results: Any = None) -> None:
        first = next(iter(errors.values()))
        detail = "; ".join(f"{resource}: {error}" for resource, error in errors.items())
        super().__init__(first.code, f"{what} failed for {detail}")
        self.errors = dict(errors)
        self.results = results


class ConfigResourceType(enum.IntEnum):
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8  # a broker's log levels, named by its id
    GROUP = 32  # a group's configs (KIP-848's consumer.*, KIP-932's share.*), by group id


@attrs.frozen
class ConfigResource:
    type: ConfigResourceType = attrs.field(converter=ConfigResourceType)
    name: str

    def __str__(self) -> str:
        return f"{self.type.name.lower()} {self.name!r}"


@attrs.frozen
class NewTopic:
    name: str
    num_partitions: int = -1  # -1: the broker's num.partitions
    replication_factor: int = -1  # -1: the broker's default.replication.factor
    configs: Mapping[str, str] = attrs.field(factory=dict, converter=lambda c: dict(c or {}))


@attrs.frozen(kw_only=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    # Replicas on brokers that are down or in a failed log dir (Metadata v5+).
    offline_replicas: tuple[int, ...] = ()


@attrs.frozen(kw_only=True)
class TopicDescription:
    name: str
    topic_id: str
    is_internal: bool
    partitions: tuple[PartitionInfo, ...]

    @property
    def partition_count(self) -> int:
        return len(self.partitions)


@attrs.frozen(kw_only=True)
class ConfigEntry:
    name: str
    value: str | None
    read_only: bool = False
    is_default: bool = False
    is_sensitive: bool = False
    source: int = -1


@attrs.frozen(kw_only=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"  # or "consumer" (KIP-848), from ListGroups v5


@attrs.frozen(kw_only=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    topics: tuple[str, ...]  # the member's subscription (consumer groups)
    assignment: frozenset[TopicPartition]
    # KIP-848 groups: the member's epoch and what the coordinator is moving it to.
    member_epoch: int = -1
    target_assignment: frozenset[TopicPartition] | None = None


@attrs.frozen(kw_only=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str  # the assignor (the leader's choice, or the coordinator's for KIP-848)
    members: tuple[MemberDescription, ...]
    # or "consumer" (KIP-848: ConsumerGroupDescribe), or "share" (KIP-932: ShareGroupDescribe)
    group_type: str = "classic"
    group_epoch: int = -1
    assignment_epoch: int = -1


@attrs.frozen(kw_only=True)
class PartitionLag:
    committed: int | None
    log_end_offset: int

    @property
    def lag(self) -> int:
        """Records not yet consumed: all of them when nothing is committed."""
        return self.log_end_offset - (self.committed if self.committed is not None else 0)


@attrs.frozen(kw_only=True)
class PartitionReassignment:
    """An ongoing reassignment (ListPartitionReassignments): the replica set now, and the
    replicas being added and removed."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


@attrs.frozen(kw_only=True)
class ReplicaLogDirInfo:
    size: int  # bytes of the replica's segments
    offset_lag: int  # a future replica's distance to the current one; else 0
    is_future: bool  # the copy being made by AlterReplicaLogDirs


@attrs.frozen(kw_only=True)
class LogDirDescription:
    """One log dir of a broker (DescribeLogDirs). `error` is NONE, or
    KAFKA_STORAGE_ERROR for an offline dir; the byte counts are -1 when unknown."""

    path: str
    error: int
    replicas: Mapping[TopicPartition, ReplicaLogDirInfo]
    total_bytes: int = -1
    usable_bytes: int = -1


# -- ACLs ----------------------------------------------------------------------------------

# Kafka's codes that serve as defaults here; every other name comes from the broker's
# tables in security/acl.py, loaded on first use so that importing the client stays light.
_ANY = 1  # ANY in ResourceType, PatternType, AclOperation and AclPermissionType
_LITERAL = 3  # PatternType.LITERAL
_ALLOW = 3  # AclPermissionType.ALLOW
_ACL_KINDS = ("resource_type", "pattern_type", "operation", "permission_type")


@functools.cache
def _acl_names() -> dict[str, dict[str, int]]:
    from trio_broker.security.acl import Op, Pattern, Permission, Resource

    def table(cls: type) -> dict[str, int]:
        return {k: v for k, v in vars(cls).items() if k.isupper() and isinstance(v, int)}

    return dict(zip(_ACL_KINDS, map(table, (Resource, Pattern, Op, Permission)), strict=True))


def _squash(name: str) -> str:
    return re.sub(r"[^A-Za-z]", "", name).upper()


def acl_code(kind: str, value: int | str) -> int:
    """Kafka's code of an ACL field ("resource_type", "pattern_type", "operation",
    "permission_type") from the code or its name, in any case, with or without separators:
    "IdempotentWrite", "idempotent-write" and "IDEMPOTENT_WRITE" are all 12."""
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    table = _acl_names()[kind]
    wanted = _squash(str(value))
    for name, code in table.items():
        if _squash(name) == wanted:
            return code
    raise ValueError(f"unknown {kind.replace('_', ' ')} {value!r}; one of {', '.join(table)}")


def acl_name(kind: str, code: int) -> str:
    """Kafka's name of an ACL code ("TOPIC", "PREFIXED", "IDEMPOTENT_WRITE", "ALLOW")."""
    for name, c in _acl_names()[kind].items():
        if c == code:
            return name
    return "UNKNOWN"


def _acl_field(kind: str) -> Callable[[int | str], int]:
    return functools.partial(acl_code, kind)


@attrs.frozen(kw_only=True)
class AclBinding:
    """One ACL (Kafka's AclBinding): a resource pattern and an access control entry.

    The codes are Kafka's ints; names are taken too and turned into them
    (`AclBinding(resource_type="topic", resource_name="orders", principal="User:alice",
    operation="Read")`). A cluster's resource name is "kafka-cluster"."""

    resource_type: int = attrs.field(converter=_acl_field("resource_type"))
    resource_name: str
    pattern_type: int = attrs.field(default=_LITERAL, converter=_acl_field("pattern_type"))
    principal: str
    host: str = "*"
    operation: int = attrs.field(converter=_acl_field("operation"))
    permission_type: int = attrs.field(default=_ALLOW, converter=_acl_field("permission_type"))

    def named(self) -> dict[str, str]:
        """Every field, with Kafka's names in place of the codes (for printing, JSON)."""
        out = attrs.asdict(self)
        for kind in _ACL_KINDS:
            out[kind] = acl_name(kind, out[kind])
        return out

    def to_filter(self) -> AclBindingFilter:
        """The filter that matches exactly this binding."""
        return AclBindingFilter(**attrs.asdict(self))

    def __str__(self) -> str:
        n = self.named()
        return (
            f"{n['permission_type']} {self.principal} {n['operation']} from {self.host} on "
            f"{n['resource_type']} {n['pattern_type']} {self.resource_name!r}"
        )


@attrs.frozen(kw_only=True)
class AclBindingFilter:
    """Which ACLs DescribeAcls and DeleteAcls take: ANY codes and None names match every
    value. `pattern_type` MATCH with a name matches every binding that applies to a
    resource of that name (literal, `*` and prefixes of it)."""

    resource_type: int = attrs.field(default=_ANY, converter=_acl_field("resource_type"))
    resource_name: str | None = None
    pattern_type: int = attrs.field(default=_ANY, converter=_acl_field("pattern_type"))
    principal: str | None = None
    host: str | None = None
    operation: int = attrs.field(default=_ANY, converter=_acl_field("operation"))
    permission_type: int = attrs.field(default=_ANY, converter=_acl_field("permission_type"))

    def __str__(self) -> str:
        parts = [
            f"{kind}={acl_name(kind, getattr(self, kind))}"
            for kind in _ACL_KINDS
            if getattr(self, kind) != _ANY
        ]
        parts += [
            f"{key}={getattr(self, key)!r}"
            for key in ("resource_name", "principal", "host")
            if getattr(self, key) is not None
        ]
        return f"ACL filter ({', '.join(parts) or 'any'})"


# -- SCRAM credentials ---------------------------------------------------------------------

# Kafka's ScramMechanism type bytes, as AlterUserScramCredentials carries them.
SCRAM_MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}


def _scram_mechanism(value: str) -> str:
    mechanism = str(value).strip().upper()
    if mechanism not in SCRAM_MECHANISMS:
        raise ValueError(
            f"SCRAM mechanism must be one of {', '.join(SCRAM_MECHANISMS)}, not {value!r}"
        )
    return mechanism


@attrs.frozen
class UserScramCredentialUpsertion:
    """Create or replace a user's credential for one mechanism. The password never leaves
    the client: the admin salts and hashes it (PBKDF2, KIP-554); `salt` None is 32 random
    bytes."""

    user: str
    mechanism: str = attrs.field(converter=_scram_mechanism)
    password: str | bytes = attrs.field(repr=False)
    iterations: int = 4096
    salt: bytes | None = attrs.field(default=None, repr=False)


@attrs.frozen
class UserScramCredentialDeletion:
    user: str
    mechanism: str = attrs.field(converter=_scram_mechanism)


# -- client quotas -------------------------------------------------------------------------


def _entity_entries(
    value: Mapping[str, str | None] | Iterable[tuple[str, str | None]],
) -> tuple[tuple[str, str | None], ...]:
    pairs = value.items() if isinstance(value, Mapping) else value
    entries = tuple(sorted((str(t), n) for t, n in pairs))
    if not entries:
        raise ValueError("a client quota entity names at least one entity type")
    if len({t for t, _ in entries}) != len(entries):
        raise ValueError(f"an entity type twice in {entries}")
    return entries


@attrs.frozen
class ClientQuotaEntity:
    """Whom a quota applies to: {entity type: name} with "user" and/or "client-id"; a
    None name is the default entity of that type (`ClientQuotaEntity({"user": None})`)."""

    entries: tuple[tuple[str, str | None], ...] = attrs.field(converter=_entity_entries)

    @classmethod
    def of(cls, value: Any) -> ClientQuotaEntity:
        """`value` itself if it is one, else the entity of its (type, name) pairs."""
        return value if isinstance(value, cls) else cls(value)

    def as_dict(self) -> dict[str, str | None]:
        return dict(self.entries)

    def __str__(self) -> str:
        return ", ".join(f"{t} {n!r}" if n is not None else f"default {t}" for t, n in self.entries)


@attrs.frozen(kw_only=True)
class ClientQuotaFilterComponent:
    """One entity type of a DescribeClientQuotas filter: a name exactly, the default
    entity, or any named (not default) entity of that type."""

    EXACT, DEFAULT, SPECIFIED = 0, 1, 2

    entity_type: str
    match_type: int
    match: str | None = None

    @classmethod
    def of_entity(cls, entity_type: str, name: str) -> ClientQuotaFilterComponent:
        return cls(entity_type=entity_type, match_type=cls.EXACT, match=name)

    @classmethod
    def of_default_entity(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type=entity_type, match_type=cls.DEFAULT)

    @classmethod
    def of_entity_type(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type=entity_type, match_type=cls.SPECIFIED)


def check_errors(what: str, errors: Mapping[Any, KafkaError], results: Any = None) -> None:
    """Raise one AdminError for the failed resources of a call, if any."""
    if errors:
        raise AdminError(what, errors, results)


def error_with(code: int, message: str | None, what: str) -> KafkaError:
    """The client's KafkaError for an answer's error code and message about `what`."""
    from trio_broker.client.errors import error_for

    return error_for(code, f"{what}: {message}" if message else what)
