"""`trio-broker topics list|describe|create|delete|alter|add-partitions`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from trio_broker.admin_cli.output import EXIT_USAGE, CommandError, print_json, print_table

__all__ = ["add_parser", "parse_assignments"]


def parse_assignments(items: list[str]) -> dict[str, str]:
    """`key=value` arguments -> {key: value} (a usage error otherwise)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"expected key=value, got {item!r}", EXIT_USAGE)
        out[key.strip()] = value
    return out


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    topics = sub.add_parser("topics", help="list, describe, create, delete and alter topics")
    ops = topics.add_subparsers(dest="op", required=True)

    p = ops.add_parser("list", parents=[common], help="topics with partition counts")
    p.add_argument("--exclude-internal", action="store_true", help="hide __consumer_offsets etc.")
    p.set_defaults(handler=list_topics)

    p = ops.add_parser("describe", parents=[common], help="partitions, leaders, ISR, configs")
    p.add_argument("topics", nargs="*", metavar="TOPIC", help="default: every topic")
    only = p.add_mutually_exclusive_group()
    for flag, text in _FILTERS.items():
        only.add_argument(f"--{flag}", dest="only", action="store_const", const=flag, help=text)
    p.set_defaults(handler=describe_topics, only=None)

    p = ops.add_parser("create", parents=[common], help="create topics")
    p.add_argument("topics", nargs="+", metavar="TOPIC")
    p.add_argument("-p", "--partitions", type=int, default=-1, help="default: the broker's")
    p.add_argument("-r", "--replication-factor", type=int, default=-1)
    p.add_argument("-c", "--config", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--if-not-exists", action="store_true")
    p.set_defaults(handler=create_topics)

    p = ops.add_parser("delete", parents=[common], help="delete topics")
    p.add_argument("topics", nargs="+", metavar="TOPIC")
    p.add_argument("--if-exists", action="store_true")
    p.set_defaults(handler=delete_topics)

    p = ops.add_parser("alter", parents=[common], help="change a topic's configs (or grow it)")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("-c", "--config", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--delete-config", action="append", default=[], metavar="KEY")
    p.add_argument("-p", "--partitions", type=int, help="new total partition count")
    p.set_defaults(handler=alter_topic)

    p = ops.add_parser("add-partitions", parents=[common], help="add partitions to a topic")
    p.add_argument("topic", metavar="TOPIC")
    count = p.add_mutually_exclusive_group(required=True)
    count.add_argument("-n", "--num", type=int, help="partitions to add")
    count.add_argument("--total", type=int, help="the new total")
    p.set_defaults(handler=add_partitions)


async def list_topics(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin

    async with admin(args) as client:
        described = await client.describe_topics()
    rows = [
        {
            "name": t.name,
            "partitions": t.partition_count,
            "replication_factor": len(t.partitions[0].replicas) if t.partitions else 0,
            "internal": t.is_internal,
        }
        for t in sorted(described.values(), key=lambda t: t.name)
        if not (args.exclude_internal and t.is_internal)
    ]
    if args.json:
        print_json(rows)
    else:
        print_table(["name", "partitions", "replication_factor"], rows)
    return 0


# kafka-topics --describe's filters: only the partitions that need an operator's look.
_FILTERS = {
    "under-replicated-partitions": "only partitions whose ISR is smaller than their replicas",
    "unavailable-partitions": "only partitions without a live leader",
    "under-min-isr-partitions": "only partitions whose ISR is below min.insync.replicas",
    "at-min-isr-partitions": "only partitions whose ISR is exactly min.insync.replicas",
}


def _wanted(only: str | None, p: Any, live: set[int], min_isr: int) -> bool:
    if only is None:
        return True
    if only == "under-replicated-partitions":
        return len(p.isr) < len(p.replicas)
    if only == "unavailable-partitions":
        return p.leader < 0 or p.leader not in live
    if only == "under-min-isr-partitions":
        return len(p.isr) < min_isr
    return len(p.isr) == min_isr


async def describe_topics(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin
    from trio_broker.client.admin import ConfigResource, ConfigResourceType

    async with admin(args) as client:
        described = await client.describe_topics(args.topics or None)
        resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in sorted(described)]
        configs = await client.describe_configs(resources) if resources else {}
        live = set((await client.describe_cluster())["brokers"]) if args.only else set()
    out = []
    for name in sorted(described):
        t = described[name]
        entries = configs.get(ConfigResource(ConfigResourceType.TOPIC, name), {})
        overrides = {k: e.value for k, e in sorted(entries.items()) if e.source == 1}
        min_isr_entry = entries.get("min.insync.replicas")
        min_isr = int(min_isr_entry.value) if min_isr_entry and min_isr_entry.value else 1
        partitions = [p for p in t.partitions if _wanted(args.only, p, live, min_isr)]
        if args.only and not partitions:
            continue
        out.append(
            {
                "name": name,
                "topic_id": t.topic_id,
                "internal": t.is_internal,
                "partition_count": t.partition_count,
                "replication_factor": len(t.partitions[0].replicas) if t.partitions else 0,
                "configs": overrides,
                "partitions": [
                    {
                        "partition": p.partition,
                        "leader": p.leader,
                        "replicas": list(p.replicas),
                        "isr": list(p.isr),
                        "offline": list(p.offline_replicas),
                    }
                    for p in partitions
                ],
            }
        )
    if args.json:
        print_json(out)
        return 0
    for i, t in enumerate(out):
        if i:
            print()
        configs_text = ",".join(f"{k}={v}" for k, v in t["configs"].items()) or "-"
        print(
            f"Topic: {t['name']}  TopicId: {t['topic_id']}  PartitionCount: "
            f"{t['partition_count']}  ReplicationFactor: {t['replication_factor']}  "
            f"Configs: {configs_text}"
        )
        columns = ["partition", "leader", "replicas", "isr"]
        if any(p["offline"] for p in t["partitions"]):
            columns.append("offline")
        print_table(columns, t["partitions"])
    return 0


async def create_topics(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin
    from trio_broker.client.admin import AdminError, NewTopic
    from trio_broker.errors import ErrorCode

    configs = parse_assignments(args.config)
    new = [NewTopic(n, args.partitions, args.replication_factor, configs) for n in args.topics]
    async with admin(args) as client:
        try:
            created = await client.create_topics(new)
        except AdminError as exc:
            exists = {
                name for name, e in exc.errors.items() if e.code == ErrorCode.TOPIC_ALREADY_EXISTS
            }
            if not args.if_not_exists or len(exists) != len(exc.errors):
                raise
            created = exc.results or {}
    rows = [
        {"name": t.name, "partitions": t.num_partitions, "replication_factor": t.replication_factor}
        for t in created.values()
    ]
    if args.json:
        print_json(rows)
    else:
        for r in rows:
            print(f"Created topic {r['name']} ({r['partitions']} partitions).")
    return 0


async def delete_topics(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin
    from trio_broker.client.admin import AdminError
    from trio_broker.errors import ErrorCode

    async with admin(args) as client:
        try:
            await client.delete_topics(args.topics)
            missing: set[str] = set()
        except AdminError as exc:
            missing = {
                n for n, e in exc.errors.items() if e.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            }
            if not args.if_exists or len(missing) != len(exc.errors):
                raise
    deleted = [n for n in args.topics if n not in missing]
    if args.json:
        print_json([{"name": n, "deleted": n in deleted} for n in args.topics])
    else:
        for n in deleted:
            print(f"Deleted topic {n}.")
    return 0


async def alter_topic(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin
    from trio_broker.client.admin import ConfigResource, ConfigResourceType

    changes: dict[str, str | None] = dict(parse_assignments(args.config))
    for key in args.delete_config:
        changes[key] = None
    if not changes and args.partitions is None:
        raise CommandError("nothing to alter: give --config, --delete-config or --partitions", 2)
    async with admin(args) as client:
        await client.describe_topics([args.topic])  # an unknown topic fails here, exit 3
        if changes:
            resource = ConfigResource(ConfigResourceType.TOPIC, args.topic)
            await client.incremental_alter_configs({resource: changes})
        if args.partitions is not None:
            await client.create_partitions({args.topic: args.partitions})
    if args.json:
        print_json([{"name": args.topic, "configs": changes, "partitions": args.partitions}])
    else:
        print(f"Altered topic {args.topic}.")
    return 0


async def add_partitions(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin

    async with admin(args) as client:
        current = (await client.describe_topics([args.topic]))[args.topic].partition_count
        total = args.total if args.total is not None else current + args.num
        await client.create_partitions({args.topic: total})
    if args.json:
        print_json([{"name": args.topic, "previous": current, "partitions": total}])
    else:
        print(f"Topic {args.topic}: {current} -> {total} partitions.", file=sys.stdout)
    return 0
