"""`trio-broker cluster info`, `trio-broker produce TOPIC` and `trio-broker consume TOPIC`:
quick looks at a cluster and its records.

`produce` sends one record per line of standard input (or per `--value`); `consume`
reads the topic's partitions from `--offset` (earliest by default; `--from-beginning` is
`--offset earliest`) up to the end offsets it found when it started, or `-n` records, or
forever with `--follow`. With `--group G` it joins consumer group G for the topic, as
kafka-console-consumer and `kcat -G` do: it reads the partitions the group gives it from
the group's committed offsets (`--offset earliest|latest` where the group has none) and
commits what it printed, so a second run with the same group goes on where the first
stopped. With `--json` it prints one JSON object per record per line (JSON Lines), as it
goes.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import Any

from trio_broker.admin_cli.output import EXIT_USAGE, CommandError, print_json, print_table

__all__ = ["add_parsers"]


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    cluster = sub.add_parser("cluster", help="the cluster's id, controller and brokers")
    ops = cluster.add_subparsers(dest="op", required=True)
    p = ops.add_parser("info", parents=[common], help="cluster id, controller, brokers")
    p.set_defaults(handler=cluster_info)

    p = sub.add_parser("produce", parents=[common], help="send records (a line each) to a topic")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--value", action="append", help="a record's value (repeatable); else stdin")
    p.add_argument("--key", help="the key of every record")
    p.add_argument("--key-separator", help="split each line into KEY<sep>VALUE")
    p.add_argument("--partition", type=int, help="default: by key, or sticky")
    p.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"])
    p.set_defaults(handler=produce)

    p = sub.add_parser("consume", parents=[common], help="read a topic's records")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--partition", type=int, action="append", help="default: every partition")
    p.add_argument("--offset", default="earliest", help="earliest (default), latest, or an offset")
    p.add_argument(
        "--from-beginning",
        dest="offset",
        action="store_const",
        const="earliest",
        help="the same as --offset earliest",
    )
    p.add_argument(
        "--group",
        "-G",
        help="join this consumer group: start from its committed offsets and commit",
    )
    p.add_argument("-n", "--num", type=int, help="stop after this many records")
    p.add_argument("--follow", action="store_true", help="keep reading past the end")
    p.add_argument("--print-key", action="store_true", help="KEY<TAB>VALUE")
    p.set_defaults(handler=consume)


async def cluster_info(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin

    async with admin(args) as client:
        cluster = await client.metadata.refresh([])
        topics = await client.list_topics()
    info = {
        "cluster_id": cluster.cluster_id,
        "controller_id": cluster.controller_id,
        "topics": len(topics),
        "brokers": [
            {"id": node, "host": host, "port": port, "controller": node == cluster.controller_id}
            for node, (host, port) in sorted(cluster.brokers.items())
        ],
    }
    if args.json:
        print_json(info)
        return 0
    print(f"Cluster ID: {info['cluster_id']}")
    print(f"Controller: {info['controller_id']}")
    print(f"Topics: {info['topics']}")
    print_table(["id", "host", "port", "controller"], info["brokers"])
    return 0


def _records(args: argparse.Namespace) -> list[tuple[bytes | None, bytes]]:
    lines = args.value if args.value is not None else sys.stdin.read().splitlines()
    out = []
    for line in lines:
        key = args.key.encode() if args.key is not None else None
        if args.key_separator:
            k, sep, v = line.partition(args.key_separator)
            if not sep:
                raise CommandError(f"no key separator in line {line!r}", EXIT_USAGE)
            key, line = k.encode(), v
        out.append((key, line.encode()))
    return out


async def produce(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin, client_config
    from trio_broker.client import Producer
    from trio_broker.client.config import ProducerConfig

    records = _records(args)
    async with admin(args) as client:
        await client.describe_topics([args.topic])  # an unknown topic: exit 3, no auto-create
    config = client_config(args, ProducerConfig)
    config["acks"] = args.acks
    results = []
    async with Producer(args.bootstrap.split(","), config=config) as producer:
        handles = [
            await producer.send_soon(args.topic, value, key=key, partition=args.partition)
            for key, value in records
        ]
        await producer.flush()
        for handle in handles:
            meta = await handle.wait()
            results.append(
                {"topic": meta.topic, "partition": meta.partition, "offset": meta.offset}
            )
    if args.json:
        print_json(results)
    else:
        print(f"Produced {len(results)} record(s) to {args.topic}.")
    return 0


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


def _json_value(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


async def consume(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin, client_config
    from trio_broker.client import Consumer, TopicPartition
    from trio_broker.client.config import ConsumerConfig

    offset = args.offset
    if offset not in ("earliest", "latest") and not offset.lstrip("-").isdigit():
        raise CommandError("--offset: earliest, latest or a number", EXIT_USAGE)
    if args.group is not None and (args.partition or offset not in ("earliest", "latest")):
        # As kafka-console-consumer: the group decides the partitions and the offsets.
        raise CommandError(
            "--group reads the partitions and offsets the group gives it: it takes "
            "--offset earliest or latest (where the group has committed nothing), "
            "not --partition or an offset",
            EXIT_USAGE,
        )
    async with admin(args) as client:
        described = (await client.describe_topics([args.topic]))[args.topic]
        numbers = args.partition or [p.partition for p in described.partitions]
        partitions = [TopicPartition(args.topic, p) for p in numbers]
        ends = await client.list_offsets({tp: "latest" for tp in partitions})
    config = client_config(args, ConsumerConfig)
    config.update(enable_auto_commit=False, auto_offset_reset="earliest")
    if args.group is not None:
        config.update(group_id=args.group, auto_offset_reset=offset)
    count = 0
    async with Consumer(args.bootstrap.split(","), config=config) as consumer:
        if args.group is not None:
            consumer.subscribe([args.topic])
        else:
            consumer.assign(partitions)
            for tp in partitions:
                if offset == "earliest":
                    await consumer.seek_to_beginning(tp)
                elif offset == "latest":
                    await consumer.seek_to_end(tp)
                else:
                    consumer.seek(tp, int(offset))
        while True:
            if args.num is not None and count >= args.num:
                break
            if not args.follow and await _at_end(consumer, args.group, partitions, ends):
                break
            batches = await consumer.getmany(timeout_ms=500)
            # The next offset of each partition after what was printed: what a group
            # commits (not the fetch position, which may be past records -n left unprinted).
            printed = {}
            for records in batches.values():
                for r in records:
                    if args.num is not None and count >= args.num:
                        break
                    count += 1
                    _print_record(args, r)
                    printed[TopicPartition(r.topic, r.partition)] = r.offset + 1
            sys.stdout.flush()
            if args.group is not None and printed:
                await consumer.commit(printed)
    if not args.json:
        print(f"Consumed {count} record(s).", file=sys.stderr)
    return 0


async def _at_end(consumer: Any, group: str | None, partitions: list, ends: dict) -> bool:
    """Whether every partition read has reached the end offset found at start. In a group:
    the partitions the group gave this consumer, once it has joined (none given: done)."""
    if group is not None:
        if not consumer.group.stable:
            return False
        partitions = sorted(consumer.assignment())
    for tp in partitions:
        if await consumer.position(tp) < ends.get(tp, 0):
            return False
    return True


def _print_record(args: argparse.Namespace, r: Any) -> None:
    if args.json:
        line = {
            "topic": r.topic,
            "partition": r.partition,
            "offset": r.offset,
            "timestamp": r.timestamp,
            "key": _json_value(r.key),
            "value": _json_value(r.value),
            "headers": [[k, _json_value(v)] for k, v in (r.headers or ())],
        }
        sys.stdout.write(json.dumps(line) + "\n")
    elif args.print_key:
        sys.stdout.write(f"{_text(r.key) or ''}\t{_text(r.value) or ''}\n")
    else:
        sys.stdout.write(f"{_text(r.value) or ''}\n")
