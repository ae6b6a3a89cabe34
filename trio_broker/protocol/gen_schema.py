"""The generator's model of Kafka's message definitions (`kafka-protocol/messages/*.json`).

Loads the JSON files (which carry `//` comment lines), normalises version ranges
("3+", "0-7", "none"), names (`snake_case` attributes), nested and common
structs (ordered leaf first), tagged fields and per-field flexible versions, and
says what each field is in Python: its type hint and the expression of its default.
Nothing here knows about the wire layout or the emitted encoders.
"""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OPEN = 0x7FFF  # upper bound of an open version range ("N+")

Range = tuple[int, int]

PY_TYPES = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "int",
    "uint16": "int",
    "uint32": "int",
    "float64": "float",
    "bool": "bool",
    "string": "str",
    "bytes": "bytes",
    "uuid": "uuid.UUID",
    "records": "Any",
}
# Every type that is not the name of a struct.
PRIMITIVES = set(PY_TYPES)
_ZERO = {"int": "0", "float": "0.0", "bool": "False", "str": '""', "bytes": 'b""'}
# Attribute names the generated classes use for their own methods.
_RESERVED_ATTRS = {"encode", "decode"}


# -- versions and names ----------------------------------------------------------------


def parse_versions(text: str | None) -> Range | None:
    if text is None or text == "" or text == "none":
        return None
    text = str(text).strip()
    if text.endswith("+"):
        return (int(text[:-1]), OPEN)
    if "-" in text:
        lo, hi = text.split("-")
        return (int(lo), int(hi))
    return (int(text), int(text))


def in_range(v: int, r: Range | None) -> bool:
    return r is not None and r[0] <= v <= r[1]


def intersect(a: Range | None, b: Range | None) -> Range | None:
    if a is None or b is None:
        return None
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return (lo, hi) if lo <= hi else None


def snake_case(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()
    if keyword.iskeyword(s) or s in _RESERVED_ATTRS:
        s += "_"
    return s


def py_str(text: str) -> str:
    """A double-quoted Python string literal, as ruff format would write it."""
    return json.dumps(text)


# -- spec model ------------------------------------------------------------------------


@dataclass
class FieldSpec:
    name: str
    attr: str
    type: str
    versions: Range | None
    nullable: Range | None
    tagged: Range | None
    tag: int | None
    flexible_override: Range | None
    has_flexible_override: bool
    default: object
    struct: StructSpec | None = None

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def base(self) -> str:
        return self.type[2:] if self.is_array else self.type


@dataclass
class StructSpec:
    name: str
    fields: list[FieldSpec] = field(default_factory=list)


@dataclass
class MessageSpec:
    path: str  # relative to the spec dir, for the banner
    stem: str
    module: str
    name: str
    kind: str
    api_key: int | None
    valid: Range
    flexible: Range | None
    unstable: bool
    root: StructSpec
    structs: list[StructSpec]  # leaf first, root last


# -- loading ---------------------------------------------------------------------------


def load_json(path: Path) -> dict:
    # Kafka's files carry `//` comment lines; JSON has no comments.
    lines = [
        ln
        for ln in path.read_text(encoding="utf-8").splitlines()
        if not ln.lstrip().startswith("//")
    ]
    return json.loads("\n".join(lines))


def _parse_fields(
    raw: list[dict], defined: dict[str, StructSpec], order: list[StructSpec]
) -> list[FieldSpec]:
    out = []
    for f in raw:
        fs = FieldSpec(
            name=f["name"],
            attr=snake_case(f["name"]),
            type=f["type"],
            versions=parse_versions(f.get("versions")),
            nullable=parse_versions(f.get("nullableVersions")),
            tagged=parse_versions(f.get("taggedVersions")),
            tag=f.get("tag"),
            flexible_override=parse_versions(f.get("flexibleVersions")),
            has_flexible_override="flexibleVersions" in f,
            default=f.get("default", ...),
        )
        if "fields" in f:
            st = StructSpec(fs.base)
            defined[st.name] = st
            st.fields = _parse_fields(f["fields"], defined, order)
            order.append(st)
        out.append(fs)
    return out


def _link(fields: list[FieldSpec], defined: dict[str, StructSpec], where: str) -> None:
    for f in fields:
        if f.base not in PRIMITIVES:
            if f.base not in defined:
                raise ValueError(f"{where}: unknown type {f.type!r} of field {f.name}")
            f.struct = defined[f.base]


def load_message(path: Path, rel: str) -> MessageSpec:
    if rel in SPEC_NEW_MESSAGES and not path.exists():
        d = SPEC_NEW_MESSAGES[rel]
    else:
        d = _with_additions(load_json(path), rel)
    defined: dict[str, StructSpec] = {}
    order: list[StructSpec] = []
    for cs in d.get("commonStructs", []):
        st = StructSpec(cs["name"])
        defined[st.name] = st
        st.fields = _parse_fields(cs["fields"], defined, order)
        order.append(st)
    root = StructSpec(d["name"])
    root.fields = _parse_fields(d["fields"], defined, order)
    for st in [*order, root]:
        _link(st.fields, defined, rel)
    # Common structs may be referenced by structs declared after them; sort leaf-first.
    ordered: list[StructSpec] = []
    seen: set[str] = set()

    def visit(st: StructSpec) -> None:
        if st.name in seen:
            return
        seen.add(st.name)
        for f in st.fields:
            if f.struct is not None:
                visit(f.struct)
        ordered.append(st)

    for st in order:
        visit(st)
    visit(root)
    valid = parse_versions(d["validVersions"])
    assert valid is not None, rel
    return MessageSpec(
        path=rel,
        stem=path.stem,
        module=snake_case(path.stem),
        name=d["name"],
        kind=d["type"],
        api_key=d.get("apiKey"),
        valid=valid,
        flexible=parse_versions(d.get("flexibleVersions")),
        unstable=bool(d.get("latestVersionUnstable", False)),
        root=root,
        structs=ordered,
    )


# Requests KRaft sends only to its controllers that a ZooKeeper-era cluster here sends to
# its controller broker too: BrokerHeartbeat (broker fencing, cluster/controller/fencing.py).
_BROKER_TO_CONTROLLER = frozenset({"BrokerHeartbeatRequest.json"})


def select_specs(spec_dir: Path) -> list[MessageSpec]:
    """The messages the broker serves (to clients, and to other brokers of a ZooKeeper-era
    cluster: LeaderAndIsr, UpdateMetadata, StopReplica, ControlledShutdown, AlterPartition,
    BrokerHeartbeat),
    the headers, and the coordinator records."""
    messages = spec_dir / "messages"
    chosen: list[tuple[Path, str]] = []
    for p in sorted(messages.glob("*Request.json")):
        d = load_json(p)
        listeners = d.get("listeners", [])
        if "broker" in listeners or "zkBroker" in listeners or p.name in _BROKER_TO_CONTROLLER:
            chosen.append((p, f"messages/{p.name}"))
            resp = p.with_name(p.name[: -len("Request.json")] + "Response.json")
            chosen.append((resp, f"messages/{resp.name}"))
    for stem in (
        "RequestHeader",
        "ResponseHeader",
        "ConsumerProtocolSubscription",
        "ConsumerProtocolAssignment",
    ):
        chosen.append((messages / f"{stem}.json", f"messages/{stem}.json"))
    for p in sorted((spec_dir / "coordinator-records").glob("*.json")):
        chosen.append((p, f"coordinator-records/{p.name}"))
    for rel in SPEC_NEW_MESSAGES:
        if not (spec_dir / rel).exists():
            chosen.append((spec_dir / rel, rel))
    return [load_message(p, rel) for p, rel in chosen]


# Versions newer than the shared definition files, written here as what they add (in our
# words, not Kafka's files): applied only while a shared file still lacks the version, so
# they fall away once the shared files are Kafka 4.0's.
#
# ConsumerGroupHeartbeat v1 (KIP-848, Kafka 4.0), which librdkafka 2.12 and later send and
# nothing older: the request gains a nullable regular-expression subscription after the
# topic names; the response is v0's.
SPEC_ADDITIONS: dict[str, tuple[str, str, list[dict[str, Any]]]] = {
    # file: (the version range it then has, the field the new ones follow, the new fields)
    "messages/ConsumerGroupHeartbeatRequest.json": (
        "0-1",
        "SubscribedTopicNames",
        [
            {
                "name": "SubscribedTopicRegex",
                "type": "string",
                "versions": "1+",
                "nullableVersions": "1+",
                "default": "null",
                "about": "A regular expression (RE2/J syntax) the subscribed topics match, "
                "instead of names; null when unchanged since the last heartbeat.",
            }
        ],
    ),
    "messages/ConsumerGroupHeartbeatResponse.json": ("0-1", "", []),
}


# KIP-932 share groups: Kafka 4.1 made them stable as version 1 of their four APIs, the
# only version librdkafka 2.16 sends (its encoder and its mock broker serve 1-1). The shared
# files hold the early-access version 0. ShareGroupHeartbeat, ShareGroupDescribe and
# ShareAcknowledge keep v0's fields in v1. ShareFetch v1's request adds a record limit and a
# preferred batch size after the byte limit and drops the per-partition byte limit; its
# response adds the acquisition lock's duration after the top-level error message.
_SHARE_ADDITIONS: dict[str, tuple[str, str, list[dict[str, Any]]]] = {
    f"messages/{name}{kind}.json": ("0-1", "", [])
    for name in ("ShareGroupHeartbeat", "ShareGroupDescribe", "ShareAcknowledge")
    for kind in ("Request", "Response")
}
_SHARE_ADDITIONS["messages/ShareFetchRequest.json"] = (
    "0-1",
    "MaxBytes",
    [
        {
            "name": "MaxRecords",
            "type": "int32",
            "versions": "1+",
            "about": "At most this many records acquired (whole batches may exceed it).",
        },
        {
            "name": "BatchSize",
            "type": "int32",
            "versions": "1+",
            "about": "The number of records the client prefers per acquired range.",
        },
    ],
)
_SHARE_ADDITIONS["messages/ShareFetchResponse.json"] = (
    "0-1",
    "ErrorMessage",
    [
        {
            "name": "AcquisitionLockTimeoutMs",
            "type": "int32",
            "versions": "1+",
            "about": "How long the records acquired by this fetch stay locked to the member.",
        }
    ],
)
SPEC_ADDITIONS.update(_SHARE_ADDITIONS)


def _field(name: str, type_: str, about: str, **more: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, "versions": "0+", "about": about, **more}


def _nullable_string(name: str, about: str) -> dict[str, Any]:
    return _field(name, "string", about, nullableVersions="0+", default="null")


_PARTITION_RESULT = [
    _field("PartitionIndex", "int32", "The partition."),
    _field("ErrorCode", "int16", "Its error, 0 for none."),
    _nullable_string("ErrorMessage", "Its error's message, null for none."),
]

# Messages the shared files (Kafka 3.9's) do not have at all, written here as whole
# definitions in our words; each falls away once the shared files hold it. The share group
# admin APIs of KIP-932 (Kafka 4.0), version 0: the share-partitions' start offsets of a
# group, described, set (while the group is empty) and deleted.
SPEC_NEW_MESSAGES: dict[str, dict[str, Any]] = {
    "messages/DescribeShareGroupOffsetsRequest.json": {
        "apiKey": 90,
        "type": "request",
        "listeners": ["broker"],
        "name": "DescribeShareGroupOffsetsRequest",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            _field(
                "Groups",
                "[]DescribeShareGroupOffsetsRequestGroup",
                "The share groups asked about.",
                fields=[
                    _field("GroupId", "string", "A share group."),
                    _field(
                        "Topics",
                        "[]DescribeShareGroupOffsetsRequestTopic",
                        "Its topics asked about; null for all it has state of.",
                        nullableVersions="0+",
                        fields=[
                            _field("TopicName", "string", "A topic."),
                            _field("Partitions", "[]int32", "Its partitions asked about."),
                        ],
                    ),
                ],
            )
        ],
    },
    "messages/DescribeShareGroupOffsetsResponse.json": {
        "apiKey": 90,
        "type": "response",
        "name": "DescribeShareGroupOffsetsResponse",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            _field("ThrottleTimeMs", "int32", "Quota throttle, in ms."),
            _field(
                "Groups",
                "[]DescribeShareGroupOffsetsResponseGroup",
                "One answer per group asked about.",
                fields=[
                    _field("GroupId", "string", "The share group."),
                    _field(
                        "Topics",
                        "[]DescribeShareGroupOffsetsResponseTopic",
                        "Its topics.",
                        fields=[
                            _field("TopicName", "string", "The topic."),
                            _field("TopicId", "uuid", "The topic's id."),
                            _field(
                                "Partitions",
                                "[]DescribeShareGroupOffsetsResponsePartition",
                                "Its share-partitions.",
                                fields=[
                                    _field("PartitionIndex", "int32", "The partition."),
                                    _field(
                                        "StartOffset",
                                        "int64",
                                        "The share-partition start offset (-1: none yet).",
                                    ),
                                    _field("LeaderEpoch", "int32", "The partition's leader epoch."),
                                    _field("ErrorCode", "int16", "Its error, 0 for none."),
                                    _nullable_string(
                                        "ErrorMessage", "Its error's message, null for none."
                                    ),
                                ],
                            ),
                        ],
                    ),
                    _field("ErrorCode", "int16", "The group's error, 0 for none."),
                    _nullable_string("ErrorMessage", "The group's error message, null for none."),
                ],
            ),
        ],
    },
    "messages/AlterShareGroupOffsetsRequest.json": {
        "apiKey": 91,
        "type": "request",
        "listeners": ["broker"],
        "name": "AlterShareGroupOffsetsRequest",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            _field("GroupId", "string", "The share group, which must be empty."),
            _field(
                "Topics",
                "[]AlterShareGroupOffsetsRequestTopic",
                "The topics whose start offsets change.",
                fields=[
                    _field("TopicName", "string", "A topic."),
                    _field(
                        "Partitions",
                        "[]AlterShareGroupOffsetsRequestPartition",
                        "Its partitions.",
                        fields=[
                            _field("PartitionIndex", "int32", "A partition."),
                            _field("StartOffset", "int64", "Its new share-partition start offset."),
                        ],
                    ),
                ],
            ),
        ],
    },
    "messages/AlterShareGroupOffsetsResponse.json": {
        "apiKey": 91,
        "type": "response",
        "name": "AlterShareGroupOffsetsResponse",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            _field("ThrottleTimeMs", "int32", "Quota throttle, in ms."),
            # Kafka 4.1 released v0 with a top-level error (KAFKA-19440).
            _field("ErrorCode", "int16", "The request's error, 0 for none."),
            _nullable_string("ErrorMessage", "The request's error message, null for none."),
            _field(
                "Responses",
                "[]AlterShareGroupOffsetsResponseTopic",
                "One answer per topic.",
                fields=[
                    _field("TopicName", "string", "The topic."),
                    _field("TopicId", "uuid", "The topic's id."),
                    _field(
                        "Partitions",
                        "[]AlterShareGroupOffsetsResponsePartition",
                        "One answer per partition.",
                        fields=_PARTITION_RESULT,
                    ),
                ],
            ),
        ],
    },
    "messages/DeleteShareGroupOffsetsRequest.json": {
        "apiKey": 92,
        "type": "request",
        "listeners": ["broker"],
        "name": "DeleteShareGroupOffsetsRequest",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            _field("GroupId", "string", "The share group, which must be empty."),
            _field(
                "Topics",
                "[]DeleteShareGroupOffsetsRequestTopic",
                "The topics whose share-partitions' state goes.",
                fields=[_field("TopicName", "string", "A topic.")],
            ),
        ],
    },
    "messages/DeleteShareGroupOffsetsResponse.json": {
        "apiKey": 92,
        "type": "response",
        "name": "DeleteShareGroupOffsetsResponse",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            _field("ThrottleTimeMs", "int32", "Quota throttle, in ms."),
            _field("ErrorCode", "int16", "The request's error, 0 for none."),
            _nullable_string("ErrorMessage", "The request's error message, null for none."),
            _field(
                "Responses",
                "[]DeleteShareGroupOffsetsResponseTopic",
                # Kafka 4.1's released v0 answers per topic, not per partition.
                "One answer per topic.",
                fields=[
                    _field("TopicName", "string", "The topic."),
                    _field("TopicId", "uuid", "The topic's id."),
                    _field("ErrorCode", "int16", "Its error, 0 for none."),
                    _nullable_string("ErrorMessage", "Its error's message, null for none."),
                ],
            ),
        ],
    },
}


# Changes to a nested field's keys that a version newer than the shared file makes (a
# dotted path of field names -> the keys it then has), applied with SPEC_ADDITIONS.
SPEC_FIELD_CHANGES: dict[str, dict[str, dict[str, Any]]] = {
    # ShareFetch v1 has no per-partition byte limit.
    "messages/ShareFetchRequest.json": {"Topics.Partitions.PartitionMaxBytes": {"versions": "0"}},
}


# Early-access definitions whose version Kafka later released unchanged: the share
# coordinator's state APIs (KIP-932, Kafka 4.1), which brokers send each other at v0.
SPEC_RELEASED: frozenset[str] = frozenset(
    f"messages/{name}{kind}.json"
    for name in (
        "InitializeShareGroupState",
        "ReadShareGroupState",
        "WriteShareGroupState",
        "DeleteShareGroupState",
        "ReadShareGroupStateSummary",
    )
    for kind in ("Request", "Response")
)


def _with_additions(d: dict[str, Any], rel: str) -> dict[str, Any]:
    if rel in SPEC_RELEASED:
        d = dict(d, latestVersionUnstable=False)
    addition = SPEC_ADDITIONS.get(rel)
    if addition is None or d.get("validVersions") == addition[0]:
        return d
    versions, after, fields = addition
    # The added version is a released one (KIP-848's v1 in Kafka 4.0, KIP-932's v1 in 4.1):
    # clients may send it, whatever the early-access file said of its own latest.
    out = dict(d, validVersions=versions, latestVersionUnstable=False)
    if fields:
        names = [f["name"] for f in d["fields"]]
        at = names.index(after) + 1
        out["fields"] = [*d["fields"][:at], *fields, *d["fields"][at:]]
    for path, keys in SPEC_FIELD_CHANGES.get(rel, {}).items():
        out["fields"] = _changed_field(out["fields"], path.split("."), keys)
    return out


def _changed_field(
    fields: list[dict[str, Any]], path: list[str], keys: dict[str, Any]
) -> list[dict[str, Any]]:
    out = []
    for f in fields:
        if f["name"] == path[0]:
            f = (
                dict(f, **keys)
                if len(path) == 1
                else dict(f, fields=_changed_field(f["fields"], path[1:], keys))
            )
        out.append(f)
    return out


# -- fields in Python ------------------------------------------------------------------


def default_expr(f: FieldSpec, msg: MessageSpec) -> str:
    """The Python expression of a field's default, as the spec gives it."""
    raw = f.default
    is_null = raw is None or (isinstance(raw, str) and raw == "null")
    if f.is_array:
        return "None" if is_null else "[]"
    if f.struct is not None:
        return "None" if is_null else f"_DEFAULT_{f.struct.name}"
    t = f.type
    if t == "records":
        return "None"
    if t == "uuid":
        return "ZERO_UUID"
    if raw is ... or (isinstance(raw, str) and raw == "" and t != "string"):
        return _ZERO[PY_TYPES[t]]
    if is_null:
        if f.nullable is None:
            raise ValueError(f"{msg.path}: {f.name} defaults to null but is never nullable")
        return "None"
    if t == "bool":
        return repr(raw if isinstance(raw, bool) else str(raw).lower() == "true")
    if t == "string":
        return py_str(str(raw))
    if t == "bytes":
        return 'b""'
    if t == "float64":
        return repr(float(raw))
    return repr(int(str(raw), 0))


def default_expr_is_none(f: FieldSpec) -> bool:
    return f.default is None or f.default == "null"


def type_hint(f: FieldSpec) -> str:
    base = f.struct.name if f.struct is not None else PY_TYPES[f.base]
    hint = f"list[{base}]" if f.is_array else base
    if hint == "Any":
        return hint
    nullable_default = default_expr_is_none(f)
    if f.nullable is not None or nullable_default:
        hint += " | None"
    return hint


def init_default(f: FieldSpec, msg: MessageSpec) -> tuple[str, str | None]:
    """The default of the field's `__init__` parameter, and for a mutable one (a list, a
    struct) the expression that makes a new value when the caller passes none (the
    parameter's default is then `DEFAULT`)."""
    d = default_expr(f, msg)
    if d == "[]":
        return "DEFAULT", "[]"
    if d.startswith("_DEFAULT_"):
        assert f.struct is not None
        return "DEFAULT", f"{f.struct.name}()"
    return d, None
