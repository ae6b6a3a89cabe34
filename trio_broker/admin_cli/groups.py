"""`trio-broker groups list|describe|reset-offsets|delete` (kafka-consumer-groups)."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import Any

from trio_broker.admin_cli.output import (
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    CommandError,
    print_json,
    print_table,
)

__all__ = ["add_parser", "describe_rows"]

# Kafka's kafka-consumer-groups --describe columns, as JSON keys.
DESCRIBE_COLUMNS = (
    "group",
    "topic",
    "partition",
    "current_offset",
    "log_end_offset",
    "lag",
    "consumer_id",
    "host",
    "client_id",
)
# Offsets committed per OffsetCommit request by reset-offsets --execute.
_COMMIT_CHUNK = 500


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    groups = sub.add_parser("groups", help="list, describe, reset and delete consumer groups")
    ops = groups.add_subparsers(dest="op", required=True)

    p = ops.add_parser("list", parents=[common], help="groups with their state")
    p.set_defaults(handler=list_groups)

    p = ops.add_parser(
        "describe", parents=[common], help="members, assignments, committed offsets and lag"
    )
    p.add_argument("groups", nargs="+", metavar="GROUP")
    p.add_argument("--members", action="store_true", help="list members and their assignments")
    p.set_defaults(handler=describe_groups)

    p = ops.add_parser(
        "reset-offsets",
        parents=[common],
        help="move an inactive group's committed offsets (a dry run unless --execute)",
    )
    p.add_argument("group", metavar="GROUP")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC[:P,P...]",
        help="a topic, or some of its partitions (repeatable)",
    )
    which.add_argument(
        "--all-topics", action="store_true", help="every partition the group has committed"
    )
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:MM:SS[.sss][+HH:MM]")
    to.add_argument("--to-offset", type=int, metavar="OFFSET")
    to.add_argument("--shift-by", type=int, metavar="N")
    p.add_argument("--execute", action="store_true", help="commit the new offsets")
    p.add_argument("--dry-run", action="store_true", help="only show them (the default)")
    p.set_defaults(handler=reset_offsets)

    p = ops.add_parser("delete", parents=[common], help="delete inactive groups")
    p.add_argument("groups", nargs="+", metavar="GROUP")
    p.set_defaults(handler=delete_groups)


async def list_groups(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin

    async with admin(args) as client:
        listings = await client.list_groups()
    rows = [
        {
            "group": g.group_id,
            "type": g.group_type,
            "state": g.state,
            "protocol_type": g.protocol_type,
        }
        for g in listings
    ]
    if args.json:
        print_json(rows)
    else:
        print_table(["group", "type", "state", "protocol_type"], rows)
    return 0


async def _describe_one(client: Any, group_id: str) -> tuple[Any, list[dict[str, Any]]]:
    from trio_broker.client import TopicPartition

    description = (await client.describe_groups([group_id]))[group_id]
    if description.group_type == "share":
        # A share group's position in a partition is its share-partition start offset.
        starts = await client.list_share_group_offsets(group_id)
        committed = {tp: offset for tp, offset in starts.items() if offset >= 0}
    else:
        committed = await client.list_group_offsets(group_id)
    if description.state == "Dead" and not committed:
        raise CommandError(f"consumer group {group_id!r} does not exist", EXIT_NOT_FOUND)
    owners: dict[TopicPartition, Any] = {}
    for member in description.members:
        for tp in member.assignment:
            owners[tp] = member
    partitions = sorted(set(committed) | set(owners))
    ends = await client.list_offsets({tp: "latest" for tp in partitions}) if partitions else {}
    return description, describe_rows(group_id, partitions, committed, ends, owners)


def describe_rows(
    group_id: str, partitions: list[Any], committed: dict, ends: dict, owners: dict
) -> list[dict[str, Any]]:
    rows = []
    for tp in partitions:
        current = committed.get(tp)
        end = ends.get(tp)
        member = owners.get(tp)
        rows.append(
            {
                "group": group_id,
                "topic": tp.topic,
                "partition": tp.partition,
                "current_offset": current,
                "log_end_offset": end,
                "lag": None if current is None or end is None else max(end - current, 0),
                "consumer_id": member.member_id if member else None,
                "host": member.client_host if member else None,
                "client_id": member.client_id if member else None,
            }
        )
    return rows


async def describe_groups(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin

    results = []
    async with admin(args) as client:
        for group_id in args.groups:
            results.append(await _describe_one(client, group_id))
    if args.json:
        if args.members:
            print_json(
                [
                    {
                        "group": d.group_id,
                        "type": d.group_type,
                        "state": d.state,
                        "protocol": d.protocol,
                        "group_epoch": d.group_epoch,
                        "assignment_epoch": d.assignment_epoch,
                        "members": [_member_json(m) for m in d.members],
                    }
                    for d, _ in results
                ]
            )
        else:
            print_json([row for _, rows in results for row in rows])
        return 0
    for i, (description, rows) in enumerate(results):
        if i:
            print()
        epochs = ""
        if description.group_type in ("consumer", "share"):
            epochs = (
                f"  Epoch: {description.group_epoch}"
                f"  Assignment epoch: {description.assignment_epoch}"
            )
        print(
            f"Group: {description.group_id}  Type: {description.group_type}  "
            f"State: {description.state}  "
            f"{'Protocol' if description.group_type == 'classic' else 'Assignor'}: "
            f"{description.protocol or '-'}  Members: {len(description.members)}{epochs}"
        )
        if args.members:
            print_table(
                ["consumer_id", "host", "client_id", "partitions", "assignment"],
                [
                    {
                        **_member_json(m),
                        "partitions": len(m.assignment),
                        "assignment": [f"{tp.topic}-{tp.partition}" for tp in sorted(m.assignment)],
                    }
                    for m in description.members
                ],
            )
        else:
            print_table(DESCRIBE_COLUMNS, rows)
    return 0


def _member_json(m: Any) -> dict[str, Any]:
    out = {
        "consumer_id": m.member_id,
        "group_instance_id": m.group_instance_id,
        "host": m.client_host,
        "client_id": m.client_id,
        "assignment": [
            {"topic": tp.topic, "partition": tp.partition} for tp in sorted(m.assignment)
        ],
    }
    if m.target_assignment is not None:  # a KIP-848 member: its epoch and its target
        out["member_epoch"] = m.member_epoch
        out["target_assignment"] = [
            {"topic": tp.topic, "partition": tp.partition} for tp in sorted(m.target_assignment)
        ]
    return out


def _parse_datetime_ms(text: str) -> int:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(f"--to-datetime: cannot read {text!r}", EXIT_USAGE) from None
    # Without a zone, local time (as kafka-consumer-groups).
    return int(when.astimezone().timestamp() * 1000)


async def _reset_partitions(client: Any, args: argparse.Namespace) -> list[Any]:
    from trio_broker.client import TopicPartition

    if args.all_topics:
        return sorted(await client.list_group_offsets(args.group))
    wanted: list[TopicPartition] = []
    whole: list[str] = []
    for spec in args.topic:
        topic, sep, parts = spec.partition(":")
        if sep:
            try:
                wanted += [TopicPartition(topic, int(p)) for p in parts.split(",") if p]
            except ValueError:
                raise CommandError(f"--topic {spec!r}: expected TOPIC:P,P", EXIT_USAGE) from None
        else:
            whole.append(topic)
    if whole:
        described = await client.describe_topics(whole)
        for name in whole:
            wanted += [TopicPartition(name, p.partition) for p in described[name].partitions]
    return sorted(set(wanted))


async def reset_offsets(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin

    if args.execute and args.dry_run:
        raise CommandError("give --execute or --dry-run, not both", EXIT_USAGE)
    async with admin(args) as client:
        description = (await client.describe_groups([args.group]))[args.group]
        if description.state not in ("Empty", "Dead"):
            raise CommandError(
                f"assignments can only be reset if the group {args.group!r} is inactive, "
                f"but the current state is {description.state}"
            )
        partitions = await _reset_partitions(client, args)
        if not partitions:
            raise CommandError(f"no partitions to reset for group {args.group!r}", EXIT_NOT_FOUND)
        committed = await client.list_group_offsets(args.group)
        earliest = await client.list_offsets({tp: "earliest" for tp in partitions})
        latest = await client.list_offsets({tp: "latest" for tp in partitions})
        if args.to_earliest:
            target = dict(earliest)
        elif args.to_latest:
            target = dict(latest)
        elif args.to_datetime is not None:
            ms = _parse_datetime_ms(args.to_datetime)
            found = await client.list_offsets({tp: ms for tp in partitions})
            # No record at or after that time: the log end, as Kafka does.
            target = {tp: found[tp] if found[tp] >= 0 else latest[tp] for tp in partitions}
        elif args.to_offset is not None:
            target = {tp: args.to_offset for tp in partitions}
        else:
            target = {tp: committed.get(tp, earliest[tp]) + args.shift_by for tp in partitions}
        # Never outside the log (Kafka clamps the same way).
        target = {tp: min(max(o, earliest[tp]), latest[tp]) for tp, o in target.items()}
        if args.execute:
            await _commit(client, args.group, target)
    rows = [
        {
            "group": args.group,
            "topic": tp.topic,
            "partition": tp.partition,
            "current_offset": committed.get(tp),
            "new_offset": target[tp],
        }
        for tp in partitions
    ]
    if args.json:
        print_json(rows)
    else:
        print_table(["group", "topic", "partition", "current_offset", "new_offset"], rows)
        if not args.execute:
            print("Dry run: nothing committed; add --execute to commit.", file=sys.stderr)
    return 0


async def _commit(client: Any, group_id: str, target: dict) -> None:
    items = sorted(target.items())
    done = 0
    show = len(items) > _COMMIT_CHUNK
    for start in range(0, len(items), _COMMIT_CHUNK):
        chunk = dict(items[start : start + _COMMIT_CHUNK])
        await client.alter_group_offsets(group_id, chunk)
        done += len(chunk)
        if show:
            print(f"committed {done}/{len(items)} partitions", file=sys.stderr, flush=True)


async def delete_groups(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin

    async with admin(args) as client:
        await client.delete_groups(args.groups)
    if args.json:
        print_json([{"group": g, "deleted": True} for g in args.groups])
    else:
        for g in args.groups:
            print(f"Deleted group {g}.")
    return 0
