"""`trio-broker configs describe|set|delete {topic,broker,broker-logger} [NAME]`
(kafka-configs).

A broker is named by its id; without a name, `broker` is the cluster-wide default
(Kafka's `--entity-default`, the resource name ""). `describe` shows what is not a default
(Kafka's kafka-configs shows overrides); `--all` shows every key with its source.
`broker-logger ID` is that broker's loggers and their levels (kafka-configs
`--entity-type broker-loggers`): `set broker-logger 1 kafka.request.logger=DEBUG`, and
`delete` gives a logger back its parent's level.
"""

from __future__ import annotations

import argparse
from typing import Any

from trio_broker.admin_cli.output import EXIT_USAGE, CommandError, print_json, print_table
from trio_broker.admin_cli.topics import parse_assignments

__all__ = ["SOURCES", "add_parser"]

SOURCES = {
    0: "UNKNOWN",
    1: "TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    configs = sub.add_parser("configs", help="describe and change topic and broker configs")
    ops = configs.add_subparsers(dest="op", required=True)
    for op, help_text in (
        ("describe", "a topic's or a broker's configs"),
        ("set", "set keys: KEY=VALUE ..."),
        ("delete", "remove overrides: KEY ..."),
    ):
        p = ops.add_parser(op, parents=[common], help=help_text)
        p.add_argument("type", choices=["topic", "broker", "broker-logger"])
        p.add_argument("name", nargs="?", default="", metavar="NAME")
        if op == "describe":
            p.add_argument("--all", action="store_true", help="defaults too")
            p.set_defaults(handler=describe)
        else:
            p.add_argument("keys", nargs="+", metavar="KEY=VALUE" if op == "set" else "KEY")
            p.add_argument("--validate-only", action="store_true")
            p.set_defaults(handler=set_configs if op == "set" else delete_configs)


def _resource(args: argparse.Namespace) -> Any:
    from trio_broker.client.admin import ConfigResource, ConfigResourceType

    if args.type == "topic":
        if not args.name:
            raise CommandError("configs ... topic needs a topic name", EXIT_USAGE)
        return ConfigResource(ConfigResourceType.TOPIC, args.name)
    if args.type == "broker-logger":
        if not args.name.isdigit():
            raise CommandError("configs ... broker-logger needs a broker id", EXIT_USAGE)
        return ConfigResource(ConfigResourceType.BROKER_LOGGER, args.name)
    if args.name and not args.name.isdigit():
        raise CommandError(f"a broker is named by its id, not {args.name!r}", EXIT_USAGE)
    return ConfigResource(ConfigResourceType.BROKER, args.name)


async def describe(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin

    resource = _resource(args)
    async with admin(args) as client:
        if args.type == "topic":
            await client.describe_topics([args.name])  # unknown topic: exit 3
        entries = (await client.describe_configs([resource]))[resource]
    rows = [
        {
            "name": e.name,
            "value": None if e.is_sensitive else e.value,
            "source": SOURCES.get(e.source, str(e.source)),
            "read_only": e.read_only,
            "sensitive": e.is_sensitive,
        }
        for e in sorted(entries.values(), key=lambda e: e.name)
        if args.all or e.source not in (5, -1)
    ]
    if args.json:
        print_json(rows)
    else:
        print_table(["name", "value", "source", "read_only", "sensitive"], rows)
    return 0


async def _alter(args: argparse.Namespace, changes: dict[str, str | None]) -> int:
    from trio_broker.admin_cli import admin

    resource = _resource(args)
    async with admin(args) as client:
        if args.type == "topic":
            await client.describe_topics([args.name])
        await client.incremental_alter_configs(
            {resource: changes}, validate_only=args.validate_only
        )
    what = f"{args.type} {args.name!r}" if args.name else "the cluster-wide broker default"
    if args.json:
        print_json([{"resource": what, "changes": changes, "validate_only": args.validate_only}])
    else:
        verb = "Validated" if args.validate_only else "Updated"
        print(f"{verb} {len(changes)} config(s) of {what}.")
    return 0


async def set_configs(args: argparse.Namespace) -> int:
    return await _alter(args, dict(parse_assignments(args.keys)))


async def delete_configs(args: argparse.Namespace) -> int:
    return await _alter(args, {key: None for key in args.keys})
