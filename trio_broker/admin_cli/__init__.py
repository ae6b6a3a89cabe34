"""The admin commands of `trio-broker`, on trio-broker's own Trio client, against any
Kafka-compatible broker (Kafka's tools and rpk in spirit):

    trio-broker topics  list|describe|create|delete|alter|add-partitions
    trio-broker groups  list|describe|reset-offsets|delete
    trio-broker configs describe|set|delete
    trio-broker cluster info
    trio-broker reassign generate|execute|verify|cancel|list
    trio-broker leader-election / log-dirs describe
    trio-broker acls    list|add|remove
    trio-broker users   list|set|delete           (SCRAM credentials)
    trio-broker quotas  describe|set|delete       (client quotas)
    trio-broker produce TOPIC / consume TOPIC

Every command takes `--bootstrap host:port` (also spelled `--bootstrap-server`),
`--command-config FILE` (client properties, Kafka's dotted keys, with the security keys
of a secured broker: security.protocol, sasl.*, ssl.*), `--json` and `--timeout-ms`.
Exit codes are in admin_cli/output.py. This module imports only argparse at the top: the
client and trio are imported when a command runs.
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
    "acls",
    "users",
    "quotas",
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
        help="client properties (Kafka's dotted keys, e.g. client.id, request.timeout.ms, "
        "security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.location)",
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
    from trio_broker.admin_cli import configs, groups, records, replicas, security, topics

    common = _common()
    topics.add_parser(sub, common)
    groups.add_parser(sub, common)
    configs.add_parser(sub, common)
    replicas.add_parsers(sub, common)
    security.add_parsers(sub, common)
    records.add_parsers(sub, common)


def client_config(args: argparse.Namespace, config_class: Any) -> dict[str, Any]:
    """--command-config's keys that `config_class` knows, plus --timeout-ms. Keys are
    read as the client reads them (Kafka's, librdkafka's and kafka-python's spellings of
    the security keys, `sasl.jaas.config`). A key no client knows is a usage error (exit
    2), not silently ignored; a key of another client (linger.ms for an admin command) is
    left out."""
    from trio_broker.admin_cli.output import EXIT_USAGE, CommandError
    from trio_broker.client.config import AdminConfig, ConsumerConfig, ProducerConfig
    from trio_broker.config import ConfigError, load_properties

    props: dict[str, str] = {}
    if args.command_config:
        try:
            props = load_properties(args.command_config)
        except ConfigError as exc:
            raise CommandError(str(exc), EXIT_USAGE) from None
    others = [c for c in (AdminConfig, ConsumerConfig, ProducerConfig) if c is not config_class]
    out: dict[str, Any] = {"request_timeout_ms": args.timeout_ms}
    for key, value in props.items():
        try:
            # {field: value} as the client would take this key (aliases resolved).
            values = config_class._values({key: value}, {})
        except ValueError as exc:
            if not _unknown_key(exc):
                raise CommandError(
                    f"{args.command_config}: bad value for {key!r}: {exc}", EXIT_USAGE
                ) from None
            if any(_knows(other, key) for other in others):
                continue
            raise CommandError(
                f"{args.command_config}: unsupported client config {key!r}", EXIT_USAGE
            ) from None
        values.pop("bootstrap_servers", None)
        out.update(values)
    try:
        config_class.build(out)  # values are checked when the client is made: now
    except (TypeError, ValueError) as exc:
        raise CommandError(f"{args.command_config}: {exc}", EXIT_USAGE) from None
    return out


def _unknown_key(exc: ValueError) -> bool:
    # ClientConfig._values names a key it has no field for "unknown <class> key ...".
    return str(exc).startswith("unknown ")


def _knows(config_class: Any, key: str) -> bool:
    try:
        config_class._values({key: ""}, {})
    except ValueError as exc:
        return not _unknown_key(exc)
    return True


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
