"""The admin commands of `trio-broker`, on trio-broker's own Trio client, against any
Kafka-compatible broker (Kafka's tools and rpk in spirit):

    trio-broker topics  list|describe|create|delete|alter|add-partitions
    trio-broker groups  list|describe|reset-offsets|delete
    trio-broker configs describe|set|delete
    trio-broker cluster info
    trio-broker reassign generate|execute|verify|cancel|list
    trio-broker leader-election / log-dirs describe
    trio-broker produce TOPIC / consume TOPIC

Every command takes `--bootstrap host:port` (also spelled `--bootstrap-server`),
`--command-config FILE` (client properties, Kafka's dotted keys), `--json` and
`--timeout-ms`. Exit codes are in admin_cli/output.py. This module imports only argparse
at the top: the client and trio are imported when a command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["COMMANDS", "add_parsers", "run"]

COMMANDS = (
    "topics",
    "groups",
    "configs",
    "cluster",
    "reassign",
    "leader-election",
    "log-dirs",
    "produce",
    "consume",
)


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap",
        "--bootstrap-server",
        dest="bootstrap",
        default="127.0.0.1:9092",
        metavar="HOST:PORT[,HOST:PORT]",
        help="brokers to start from (default 127.0.0.1:9092)",
    )
    common.add_argument(
        "--command-config",
        metavar="FILE",
        help="client properties (Kafka's dotted keys, e.g. client.id, request.timeout.ms)",
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    common.add_argument(
        "--timeout-ms",
        type=int,
        default=30_000,
        help="request timeout (default 30000); an unreachable broker fails at once",
    )
    common.add_argument(
        "--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    return common


def add_parsers(sub: Any) -> None:
    from trio_broker.admin_cli import configs, groups, records, replicas, topics

    common = _common()
    topics.add_parser(sub, common)
    groups.add_parser(sub, common)
    configs.add_parser(sub, common)
    records.add_parsers(sub, common)
    replicas.add_parsers(sub, common)


def client_config(args: argparse.Namespace, config_class: Any) -> dict[str, Any]:
    """--command-config's keys that `config_class` knows, plus --timeout-ms. A key no
    client knows is a usage error (exit 2), not silently ignored."""
    import attrs

    from trio_broker.admin_cli.output import EXIT_USAGE, CommandError
    from trio_broker.client.config import AdminConfig, ConsumerConfig, ProducerConfig
    from trio_broker.config import ConfigError, load_properties

    props: dict[str, str] = {}
    if args.command_config:
        try:
            props = load_properties(args.command_config)
        except ConfigError as exc:
            raise CommandError(str(exc), EXIT_USAGE) from None
    known = {
        f.name for cls in (AdminConfig, ConsumerConfig, ProducerConfig) for f in attrs.fields(cls)
    }
    mine = {f.name for f in attrs.fields(config_class)}
    out: dict[str, Any] = {"request_timeout_ms": args.timeout_ms}
    for key, value in props.items():
        name = key.replace(".", "_")
        if name not in known:
            raise CommandError(
                f"{args.command_config}: unsupported client config {key!r}", EXIT_USAGE
            )
        if name in mine and name != "bootstrap_servers":
            out[name] = value
    return out


def admin(args: argparse.Namespace) -> Any:
    from trio_broker.client.admin import Admin
    from trio_broker.client.config import AdminConfig

    return Admin(args.bootstrap.split(","), config=client_config(args, AdminConfig))


def run(args: argparse.Namespace) -> int:
    import trio

    from trio_broker.admin_cli.output import exit_code_for, one_line

    try:
        code = trio.run(args.handler, args)
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:  # noqa: BLE001 - every failure is one line and a code
        leaf = _first_leaf(exc)
        if isinstance(leaf, KeyboardInterrupt):
            return 130
        if isinstance(leaf, SystemExit):
            raise
        print(f"trio-broker: error: {one_line(leaf)}", file=sys.stderr)
        return exit_code_for(leaf)
    return code or 0


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc
