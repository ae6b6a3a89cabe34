"""Replica operations on a cluster, as Kafka's tools do them:

    trio-broker reassign generate|execute|verify|cancel|list   kafka-reassign-partitions
    trio-broker leader-election                               kafka-leader-election
    trio-broker log-dirs describe                             kafka-log-dirs

The JSON files are Kafka's, so a file written for Kafka's tools works here and the other
way round: a reassignment `{"version":1,"partitions":[{"topic":"t","partition":0,
"replicas":[1,2,3]}]}`, topics to move `{"version":1,"topics":[{"topic":"t"}]}`, and
partitions to elect `{"partitions":[{"topic":"t","partition":0}]}`. `log-dirs describe
--json` prints kafka-log-dirs' JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from trio_broker.admin_cli.output import (
    EXIT_REFUSED,
    EXIT_USAGE,
    CommandError,
    print_json,
    print_table,
)

__all__ = ["add_parsers"]


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    reassign = sub.add_parser(
        "reassign", help="move partitions to other brokers (kafka-reassign-partitions)"
    )
    ops = reassign.add_subparsers(dest="op", required=True)
    p = ops.add_parser(
        "generate", parents=[common], help="propose an assignment of topics over brokers"
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--topics", help="comma-separated topic names")
    what.add_argument("--topics-to-move-json-file", metavar="FILE", help="Kafka's topics JSON")
    p.add_argument("--brokers", "--broker-list", dest="brokers", required=True, help="e.g. 1,2,3")
    p.add_argument("--disable-rack-aware", action="store_true")
    p.set_defaults(handler=generate)
    for name, handler, text in (
        ("execute", execute, "start the reassignment a JSON file describes"),
        ("verify", verify, "whether it is done (exit 1 while not)"),
        ("cancel", cancel, "cancel what is still in progress of it"),
    ):
        p = ops.add_parser(name, parents=[common], help=text)
        p.add_argument(
            "file", metavar="REASSIGNMENT_JSON_FILE", help="Kafka's reassignment JSON ('-': stdin)"
        )
        if name == "execute":
            p.add_argument(
                "--additional",
                action="store_true",
                help="start it even while other reassignments are in progress",
            )
            p.add_argument(
                "--throttle",
                type=int,
                default=-1,
                metavar="BYTES_PER_S",
                help="the most the replication of the moving partitions may use, per broker "
                "(leader and follower each); run `verify` until done to remove it",
            )
            p.add_argument(
                "--replica-alter-log-dirs-throttle",
                type=int,
                default=-1,
                metavar="BYTES_PER_S",
                help="the most each broker may copy moving replicas between its log dirs",
            )
        else:
            p.add_argument(
                "--preserve-throttles",
                action="store_true",
                help="leave the throttles in place (by default they are removed once nothing "
                "is in progress)",
            )
        p.set_defaults(handler=handler)
    p = ops.add_parser("list", parents=[common], help="reassignments in progress")
    p.set_defaults(handler=list_reassignments)

    p = sub.add_parser(
        "leader-election",
        parents=[common],
        help="elect preferred (or unclean) leaders (kafka-leader-election)",
    )
    p.add_argument(
        "--election-type",
        type=str.lower,
        choices=["preferred", "unclean"],
        default="preferred",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--all-topic-partitions", action="store_true")
    which.add_argument("--topic", help="with --partition, or every partition of it")
    which.add_argument("--path-to-json-file", metavar="FILE", help="Kafka's partitions JSON")
    p.add_argument("--partition", type=int)
    p.set_defaults(handler=leader_election)

    log_dirs = sub.add_parser("log-dirs", help="each broker's log dirs (kafka-log-dirs)")
    ops = log_dirs.add_subparsers(dest="op", required=True)
    p = ops.add_parser("describe", parents=[common], help="log dirs, replicas and sizes")
    p.add_argument("--brokers", "--broker-list", dest="brokers", help="default: every broker")
    p.add_argument("--topics", "--topic-list", dest="topics", help="default: every topic")
    p.set_defaults(handler=describe_log_dirs)


# -- Kafka's JSON files ------------------------------------------------------------------


def _read_json(path: str) -> Any:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
        return json.loads(text)
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}", EXIT_USAGE) from None
    except json.JSONDecodeError as exc:
        raise CommandError(f"{path} is not JSON: {exc}", EXIT_USAGE) from None


def _int_list(text: str, what: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise CommandError(
            f"{what} must be comma-separated integers: {text!r}", EXIT_USAGE
        ) from None


def read_reassignment(
    path: str, dirs_out: dict[tuple[str, int, int], str] | None = None
) -> dict[tuple[str, int], list[int]]:
    """Kafka's reassignment JSON -> {(topic, partition): replicas}; the replicas' log dirs
    other than "any" go into `dirs_out` as {(topic, partition, broker): path}."""
    data = _read_json(path)
    out: dict[tuple[str, int], list[int]] = {}
    try:
        entries = data["partitions"]
        for entry in entries:
            key = (str(entry["topic"]), int(entry["partition"]))
            replicas = [int(r) for r in entry["replicas"]]
            dirs = entry.get("log_dirs")
            if dirs is not None:
                if len(dirs) != len(replicas):
                    raise CommandError(
                        f"{path}: {key[0]}-{key[1]} names {len(dirs)} log_dirs for "
                        f"{len(replicas)} replicas",
                        EXIT_USAGE,
                    )
                for broker, log_dir in zip(replicas, dirs, strict=True):
                    if log_dir != "any" and dirs_out is not None:
                        dirs_out[(*key, broker)] = str(log_dir)
            if key in out:
                raise CommandError(f"{path}: partition {key[0]}-{key[1]} twice", EXIT_USAGE)
            out[key] = replicas
    except (KeyError, TypeError, ValueError):
        raise CommandError(
            f"{path}: expected Kafka's reassignment JSON, "
            '{"version":1,"partitions":[{"topic":...,"partition":...,"replicas":[...]}]}',
            EXIT_USAGE,
        ) from None
    if not out:
        raise CommandError(f"{path}: no partitions", EXIT_USAGE)
    return out


def reassignment_json(assignment: dict[tuple[str, int], list[int] | tuple[int, ...]]) -> dict:
    return {
        "version": 1,
        "partitions": [
            {
                "topic": t,
                "partition": p,
                "replicas": list(r),
                "log_dirs": ["any"] * len(r),
            }
            for (t, p), r in sorted(assignment.items())
        ],
    }


def _tp_text(tps: Any) -> str:
    return ",".join(f"{t}-{p}" for t, p in sorted(tps))


# -- reassign ------------------------------------------------------------------------------


async def generate(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin
    from trio_broker.cluster.replica_assignment import assign_replicas
    from trio_broker.errors import KafkaError

    if args.topics is not None:
        names = [t for t in args.topics.split(",") if t]
    else:
        data = _read_json(args.topics_to_move_json_file)
        try:
            names = [str(t["topic"]) for t in data["topics"]]
        except (KeyError, TypeError):
            raise CommandError(
                f'{args.topics_to_move_json_file}: expected {{"topics":[{{"topic":...}}]}}',
                EXIT_USAGE,
            ) from None
    brokers = _int_list(args.brokers, "--brokers")
    if not names or not brokers:
        raise CommandError("give at least one topic and one broker", EXIT_USAGE)
    async with admin(args) as client:
        cluster = await client.describe_cluster()
        described = await client.describe_topics(names)
    unknown = sorted(set(brokers) - set(cluster["brokers"]))
    if unknown:
        raise CommandError(f"brokers {unknown} are not in the cluster", EXIT_USAGE)
    racks = {b: (None if args.disable_rack_aware else cluster["brokers"][b][2]) for b in brokers}
    current: dict[tuple[str, int], tuple[int, ...]] = {}
    proposed: dict[tuple[str, int], tuple[int, ...]] = {}
    for name in names:
        topic = described[name]
        for p in topic.partitions:
            current[(name, p.partition)] = p.replicas
        factor = len(topic.partitions[0].replicas) if topic.partitions else 0
        try:
            plan = assign_replicas(racks, topic.partition_count, factor)
        except KafkaError as exc:
            raise CommandError(f"topic {name}: {exc}", EXIT_USAGE) from None
        for partition, replicas in plan.items():
            proposed[(name, partition)] = replicas
    if args.json:
        print_json({"current": reassignment_json(current), "proposed": reassignment_json(proposed)})
        return 0
    print("Current partition replica assignment")
    print(json.dumps(reassignment_json(current)))
    print()
    print("Proposed partition reassignment configuration")
    print(json.dumps(reassignment_json(proposed)))
    return 0


async def execute(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin
    from trio_broker.client.subscription import TopicPartition

    dirs: dict[tuple[str, int, int], str] = {}
    wanted = read_reassignment(args.file, dirs)
    async with admin(args) as client:
        described = await client.describe_topics(sorted({t for t, _ in wanted}))
        current = {
            (name, p.partition): p.replicas
            for name, t in described.items()
            for p in t.partitions
            if (name, p.partition) in wanted
        }
        missing = sorted(set(wanted) - set(current))
        if missing:
            raise CommandError(f"no such partitions: {_tp_text(missing)}", 3)
        if not args.additional and await client.list_partition_reassignments():
            # As Kafka's tool: a second reassignment only when asked for.
            raise CommandError(
                "Cannot execute because there is an existing partition assignment. Use "
                "--additional to override this and create a new partition assignment in "
                "addition to the existing one.",
                EXIT_REFUSED,
            )
        notes = []
        if args.throttle >= 0 or args.replica_alter_log_dirs_throttle >= 0:
            notes.append(
                "Warning: You must run `reassign verify` periodically, until the reassignment "
                "completes, to ensure the throttle is removed."
            )
        if args.throttle >= 0:
            ongoing = await client.list_partition_reassignments(
                [TopicPartition(t, p) for t, p in wanted]
            )
            brokers = await _set_replication_throttle(
                client, wanted, current, ongoing, args.throttle
            )
            notes.append(
                f"The inter-broker throttle limit was set to {args.throttle} B/s "
                f"on brokers {_ints(sorted(brokers))}"
            )
        if args.replica_alter_log_dirs_throttle >= 0 and dirs:
            from trio_broker.client.admin_types import ConfigResource, ConfigResourceType

            rate = str(args.replica_alter_log_dirs_throttle)
            await client.incremental_alter_configs(
                {
                    ConfigResource(ConfigResourceType.BROKER, str(b)): {_LOG_DIRS_RATE: rate}
                    for b in sorted({b for _, _, b in dirs})
                }
            )
            notes.append(f"The replica-alter-dir throttle limit was set to {rate} B/s")
        await client.alter_partition_reassignments(
            {TopicPartition(t, p): r for (t, p), r in wanted.items()}
        )
        if dirs:
            await _move_to_log_dirs(client, dirs, args.timeout_ms)
    if args.json:
        print_json(
            {"previous": reassignment_json(current), "started": _tp_text(wanted), "notes": notes}
        )
        return 0
    print("Current partition replica assignment")
    print()
    print(json.dumps(reassignment_json(current)))
    print()
    print("Save this to use as the REASSIGNMENT_JSON_FILE of `reassign execute` to roll back")
    for note in notes:
        print(note)
    print(f"Successfully started partition reassignments for {_tp_text(wanted)}")
    return 0


# Kafka's replication quota configs (cluster/replication/replication_quota.py), as its tool sets them.
_LEADER_RATE = "leader.replication.throttled.rate"
_FOLLOWER_RATE = "follower.replication.throttled.rate"
_LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
_LEADER_REPLICAS = "leader.replication.throttled.replicas"
_FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"


def throttled_replicas(
    wanted: dict[tuple[str, int], list[int]],
    current: dict[tuple[str, int], Any],
    ongoing: dict[Any, Any],
) -> tuple[dict[str, tuple[str, str]], set[int]]:
    """Per topic, (leader list, follower list) as kafka-reassign-partitions computes them,
    and the brokers those lists name:
    the leader side names each moving partition's current replicas (whichever leads), the
    follower side the replicas it gains. For a partition already being reassigned, its
    replicas before that reassignment are the current ones."""
    leaders: dict[str, set[tuple[int, int]]] = {}
    followers: dict[str, set[tuple[int, int]]] = {}
    for (topic, partition), target in wanted.items():
        move = next(
            (r for tp, r in ongoing.items() if (tp.topic, tp.partition) == (topic, partition)),
            None,
        )
        if move is not None:
            sources = set(move.replicas) - set(move.adding_replicas)
        else:
            sources = set(current[(topic, partition)])
        leaders.setdefault(topic, set()).update((partition, b) for b in sources)
        followers.setdefault(topic, set()).update(
            (partition, b) for b in target if b not in sources
        )

    def text(pairs: set[tuple[int, int]]) -> str:
        return ",".join(f"{p}:{b}" for p, b in sorted(pairs))

    lists = {t: (text(leaders[t]), text(followers.get(t, set()))) for t in leaders}
    brokers = {b for pairs in (*leaders.values(), *followers.values()) for _, b in pairs}
    return lists, brokers


async def _set_replication_throttle(
    client: Any,
    wanted: dict[tuple[str, int], list[int]],
    current: dict[tuple[str, int], Any],
    ongoing: dict[Any, Any],
    rate: int,
) -> set[int]:
    """The topic throttle lists, then the rate on every broker the moves touch."""
    from trio_broker.client.admin_types import ConfigResource, ConfigResourceType

    lists, brokers = throttled_replicas(wanted, current, ongoing)
    await client.incremental_alter_configs(
        {
            ConfigResource(ConfigResourceType.TOPIC, topic): {
                _LEADER_REPLICAS: leader,
                _FOLLOWER_REPLICAS: follower,
            }
            for topic, (leader, follower) in sorted(lists.items())
        }
    )
    await client.incremental_alter_configs(
        {
            ConfigResource(ConfigResourceType.BROKER, str(b)): {
                _LEADER_RATE: str(rate),
                _FOLLOWER_RATE: str(rate),
            }
            for b in sorted(brokers)
        }
    )
    return brokers


async def _clear_throttles(client: Any, topics: set[str]) -> list[str]:
    """Kafka's clearAllThrottles: the rates on every broker, the lists on `topics`."""
    from trio_broker.client.admin_types import ConfigResource, ConfigResourceType

    brokers = sorted((await client.describe_cluster())["brokers"])
    await client.incremental_alter_configs(
        {
            ConfigResource(ConfigResourceType.BROKER, str(b)): {
                _LEADER_RATE: None,
                _FOLLOWER_RATE: None,
                _LOG_DIRS_RATE: None,
            }
            for b in brokers
        }
    )
    await client.incremental_alter_configs(
        {
            ConfigResource(ConfigResourceType.TOPIC, t): {
                _LEADER_REPLICAS: None,
                _FOLLOWER_REPLICAS: None,
            }
            for t in sorted(topics)
        }
    )
    return [
        f"Clearing broker-level throttles on brokers {_ints(brokers)}",
        f"Clearing topic-level throttles on topics {', '.join(sorted(topics))}",
    ]


async def _move_to_log_dirs(
    client: Any, dirs: dict[tuple[str, int, int], str], timeout_ms: int
) -> None:
    """AlterReplicaLogDirs for the replicas given a log dir, as Kafka's tool sends it: again
    while a new replica does not exist yet on its broker (the reassignment creates it),
    until `timeout_ms`."""
    import trio

    from trio_broker.client.admin import AdminError
    from trio_broker.errors import ErrorCode

    not_yet = {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REPLICA_NOT_AVAILABLE,
    }
    todo = dict(dirs)
    with trio.move_on_after(timeout_ms / 1000):
        while todo:
            try:
                await client.alter_replica_log_dirs(todo)
                return
            except AdminError as exc:
                if any(e.code not in not_yet for e in exc.errors.values()):
                    raise
                todo = {r: todo[r] for r in exc.errors}
            await trio.sleep(0.2)
    if todo:
        raise CommandError(
            "the reassignment started, but these replicas were not created within "
            f"--timeout-ms to be moved to their log dirs: {sorted(todo)}",
            EXIT_REFUSED,
        )


async def verify(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin
    from trio_broker.client.subscription import TopicPartition

    dirs: dict[tuple[str, int, int], str] = {}
    wanted = read_reassignment(args.file, dirs)
    async with admin(args) as client:
        ongoing = await client.list_partition_reassignments(
            [TopicPartition(t, p) for t, p in wanted]
        )
        described = await client.describe_topics(sorted({t for t, _ in wanted}))
        where = (
            await client.describe_log_dirs(
                sorted({b for _, _, b in dirs}), sorted({t for t, _, _ in dirs})
            )
            if dirs
            else {}
        )
    rows: list[dict[str, Any]] = []
    for (t, p), target in sorted(wanted.items()):
        replicas = next(
            (list(x.replicas) for x in described[t].partitions if x.partition == p), None
        )
        if TopicPartition(t, p) in ongoing:
            state = "in progress"
        elif replicas == list(target):
            state = "complete"
        else:
            state = "not in progress"
        rows.append(
            {"topic": t, "partition": p, "state": state, "replicas": replicas, "target": target}
        )
    for (t, p, b), path in sorted(dirs.items()):
        found = {
            (d.path, r.is_future)
            for d in where.get(b, {}).values()
            for tp, r in d.replicas.items()
            if tp == TopicPartition(t, p)
        }
        if found == {(path, False)}:
            state = "complete"
        elif (path, True) in found:
            state = "in progress"
        else:
            state = "not in progress"
        rows.append({"topic": t, "partition": p, "broker": b, "log_dir": path, "state": state})
    cleared: list[str] = []
    if not args.preserve_throttles and all(r["state"] != "in progress" for r in rows):
        # Nothing is moving any more: the throttles a throttled `execute` set go (all of
        # them, as Kafka's tool does: which were ours is not recorded anywhere).
        async with admin(args) as client:
            cleared = await _clear_throttles(client, {t for t, _ in wanted})
    if args.json:
        print_json(rows)
        for line in cleared:
            print(line, file=sys.stderr)
    else:
        for r in rows:
            name = f"{r['topic']}-{r['partition']}"
            if "broker" in r:
                replica = f"{name} on broker {r['broker']} to {r['log_dir']}"
                if r["state"] == "complete":
                    print(f"Reassignment of replica {replica} is completed.")
                elif r["state"] == "in progress":
                    print(f"Reassignment of replica {replica} is still in progress.")
                else:
                    print(
                        f"Replica {name} on broker {r['broker']} is not moving to {r['log_dir']}."
                    )
                continue
            if r["state"] == "complete":
                print(f"Reassignment of partition {name} is completed.")
            elif r["state"] == "in progress":
                print(f"Reassignment of partition {name} is still in progress.")
            else:
                print(
                    f"There is no active reassignment of partition {name}, but its replica "
                    f"set is {_ints(r['replicas'])} rather than {_ints(r['target'])}."
                )
        for line in cleared:
            print(line)
    return 0 if all(r["state"] == "complete" for r in rows) else EXIT_REFUSED


def _ints(values: Any) -> str:
    return "-" if values is None else ",".join(str(v) for v in values)


async def cancel(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin
    from trio_broker.client.subscription import TopicPartition

    wanted = read_reassignment(args.file)
    async with admin(args) as client:
        ongoing = await client.list_partition_reassignments(
            [TopicPartition(t, p) for t, p in wanted]
        )
        if ongoing:
            await client.alter_partition_reassignments({tp: None for tp in ongoing})
        cleared = (
            []
            if args.preserve_throttles
            else await _clear_throttles(client, {t for t, _ in wanted})
        )
    cancelled = sorted((tp.topic, tp.partition) for tp in ongoing)
    if args.json:
        print_json([{"topic": t, "partition": p} for t, p in cancelled])
        for line in cleared:
            print(line, file=sys.stderr)
        return 0
    if cancelled:
        print(f"Successfully cancelled partition reassignments for: {_tp_text(cancelled)}")
    else:
        print("None of those partitions is being reassigned.")
    for line in cleared:
        print(line)
    return 0


async def list_reassignments(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin

    async with admin(args) as client:
        ongoing = await client.list_partition_reassignments()
    rows = [
        {
            "topic": tp.topic,
            "partition": tp.partition,
            "replicas": list(r.replicas),
            "adding": list(r.adding_replicas),
            "removing": list(r.removing_replicas),
        }
        for tp, r in sorted(ongoing.items())
    ]
    if args.json:
        print_json(rows)
    elif not rows:
        print("No partition reassignments found.")
    else:
        print_table(["topic", "partition", "replicas", "adding", "removing"], rows)
    return 0


# -- leader-election -----------------------------------------------------------------------


async def leader_election(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin
    from trio_broker.client.subscription import TopicPartition
    from trio_broker.errors import ErrorCode

    if args.partition is not None and args.topic is None:
        raise CommandError("--partition needs --topic", EXIT_USAGE)
    async with admin(args) as client:
        partitions: list[TopicPartition] | None = None
        if args.topic is not None:
            if args.partition is not None:
                partitions = [TopicPartition(args.topic, args.partition)]
            else:
                topic = (await client.describe_topics([args.topic]))[args.topic]
                partitions = [TopicPartition(args.topic, p.partition) for p in topic.partitions]
        elif args.path_to_json_file is not None:
            data = _read_json(args.path_to_json_file)
            try:
                partitions = [
                    TopicPartition(str(e["topic"]), int(e["partition"])) for e in data["partitions"]
                ]
            except (KeyError, TypeError, ValueError):
                raise CommandError(
                    f"{args.path_to_json_file}: expected "
                    '{"partitions":[{"topic":...,"partition":...}]}',
                    EXIT_USAGE,
                ) from None
        results = await client.elect_leaders(args.election_type, partitions)
    kind = args.election_type.upper()
    elected = sorted((tp.topic, tp.partition) for tp, c in results.items() if c == ErrorCode.NONE)
    not_needed = sorted(
        (tp.topic, tp.partition) for tp, c in results.items() if c == ErrorCode.ELECTION_NOT_NEEDED
    )
    failed = {
        (tp.topic, tp.partition): ErrorCode(c).name
        for tp, c in sorted(results.items())
        if c not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED)
    }
    if args.json:
        print_json(
            [
                {"topic": tp.topic, "partition": tp.partition, "result": ErrorCode(c).name}
                for tp, c in sorted(results.items())
            ]
        )
    else:
        if elected:
            print(
                f"Successfully completed leader election ({kind}) for partitions {_tp_text(elected)}"
            )
        if not_needed:
            print(f"Valid replica already elected for partitions {_tp_text(not_needed)}")
        for (t, p), name in failed.items():
            print(f"Error completing leader election ({kind}) for partition: {t}-{p}: {name}")
    if failed:
        print(f"trio-broker: error: {len(failed)} replica(s) could not be elected", file=sys.stderr)
        return EXIT_REFUSED
    return 0


# -- log-dirs ------------------------------------------------------------------------------


async def describe_log_dirs(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin
    from trio_broker.errors import ErrorCode

    brokers = None if args.brokers is None else _int_list(args.brokers, "--brokers")
    topics = None if args.topics is None else [t for t in args.topics.split(",") if t]
    async with admin(args) as client:
        described = await client.describe_log_dirs(brokers, topics)
    if args.json:
        # kafka-log-dirs --describe's JSON.
        print_json(
            {
                "version": 1,
                "brokers": [
                    {
                        "broker": broker,
                        "logDirs": [
                            {
                                "logDir": d.path,
                                "error": None if d.error == 0 else ErrorCode(d.error).name,
                                "partitions": [
                                    {
                                        "partition": f"{tp.topic}-{tp.partition}",
                                        "size": r.size,
                                        "offsetLag": r.offset_lag,
                                        "isFuture": r.is_future,
                                    }
                                    for tp, r in sorted(d.replicas.items())
                                ],
                            }
                            for _, d in sorted(dirs.items())
                        ],
                    }
                    for broker, dirs in sorted(described.items())
                ],
            }
        )
        return 0
    rows = []
    for broker, dirs in sorted(described.items()):
        for _, d in sorted(dirs.items()):
            error = None if d.error == 0 else ErrorCode(d.error).name
            if not d.replicas:
                rows.append({"broker": broker, "log_dir": d.path, "error": error})
            for tp, r in sorted(d.replicas.items()):
                rows.append(
                    {
                        "broker": broker,
                        "log_dir": d.path,
                        "error": error,
                        "partition": f"{tp.topic}-{tp.partition}",
                        "size": r.size,
                        "offset_lag": r.offset_lag,
                        "future": r.is_future,
                    }
                )
    print_table(["broker", "log_dir", "error", "partition", "size", "offset_lag", "future"], rows)
    return 0
