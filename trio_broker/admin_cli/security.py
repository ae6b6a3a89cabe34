"""Security administration, in the spirit of Kafka's kafka-acls and kafka-configs:

    trio-broker acls list|add|remove          ACL bindings (kafka-acls)
    trio-broker users list|set|delete         SCRAM credentials (kafka-configs, users)
    trio-broker quotas describe|set|delete    client quotas (kafka-configs, users/clients)

A secured broker is reached with `--command-config` (security.protocol, sasl.mechanism,
sasl.username/sasl.password or sasl.jaas.config, ssl.* keys). ACL codes and names are
Kafka's; an operation is given as Kafka's tools spell it (Read, IdempotentWrite) or in
upper case with underscores (IDEMPOTENT_WRITE), in any case. Passwords are salted and
hashed on this side (KIP-554): the broker never sees one.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from trio_broker.admin_cli.output import (
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    CommandError,
    print_json,
    print_table,
)

__all__ = ["add_parsers"]

CLUSTER_NAME = "kafka-cluster"

# The operations Kafka's tool lets each resource type have an ACL for.
_OPERATIONS = {
    "TOPIC": set(
        "READ WRITE CREATE DESCRIBE DELETE ALTER DESCRIBE_CONFIGS ALTER_CONFIGS ALL".split()
    ),
    "GROUP": {"READ", "DESCRIBE", "DELETE", "ALL"},
    "CLUSTER": set(
        "CREATE CLUSTER_ACTION DESCRIBE_CONFIGS ALTER_CONFIGS IDEMPOTENT_WRITE ALTER DESCRIBE "
        "ALL".split()
    ),
    "TRANSACTIONAL_ID": {"DESCRIBE", "WRITE", "ALL"},
}

_ACL_COLUMNS = (
    "resource_type resource_name pattern_type principal host operation permission_type".split()
)


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    _add_acls(sub, common)
    _add_users(sub, common)
    _add_quotas(sub, common)


# -- acls ----------------------------------------------------------------------------------


def _resource_args(p: argparse.ArgumentParser, *, adding: bool) -> None:
    group = p.add_argument_group("resources")
    group.add_argument("--topic", action="append", default=[], metavar="T", help="repeatable")
    group.add_argument("--group", action="append", default=[], metavar="G", help="repeatable")
    group.add_argument("--cluster", action="store_true", help="the cluster (kafka-cluster)")
    group.add_argument(
        "--transactional-id", action="append", default=[], metavar="X", help="repeatable"
    )
    group.add_argument(
        "--resource-pattern-type",
        type=str.lower,
        choices=["literal", "prefixed"] if adding else ["literal", "prefixed", "match", "any"],
        help="literal (default) or prefixed"
        if adding
        else "default any; match: every ACL that applies to the named resources",
    )


def _operation_arg(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument(
        "--operation",
        action="append",
        default=[],
        metavar="OP",
        help=text + ": Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
        "DescribeConfigs, AlterConfigs, IdempotentWrite, All (any case; repeatable)",
    )


def _entry_args(p: argparse.ArgumentParser, *, adding: bool) -> None:
    host_default = "default * (every host); repeatable"
    p.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME")
    p.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST", help=host_default)
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST", help=host_default)
    _operation_arg(p, "operations" if adding else "only these operations (default: any)")
    p.add_argument(
        "--producer",
        action="store_true",
        help="Write, Describe, Create on the topics; Write, Describe on the transactional ids",
    )
    p.add_argument(
        "--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster"
    )
    p.add_argument(
        "--consumer",
        action="store_true",
        help="Read, Describe on the topics and Read on the group (needs --group)",
    )


def _add_acls(sub: Any, common: argparse.ArgumentParser) -> None:
    acls = sub.add_parser("acls", help="list, add and remove ACLs (kafka-acls)")
    ops = acls.add_subparsers(dest="op", required=True)

    p = ops.add_parser(
        "list",
        parents=[common],
        help="the ACLs matching the filters (default: every ACL)",
        description="The ACLs matching every filter given; with none, every ACL.",
    )
    _resource_args(p, adding=False)
    p.add_argument(
        "--principal", action="append", default=[], metavar="User:NAME", help="repeatable"
    )
    _operation_arg(p, "only these operations")
    p.set_defaults(handler=list_acls)

    p = ops.add_parser(
        "add",
        parents=[common],
        help="add ACLs",
        description="Add an ACL for each resource, principal, host and operation given. "
        "Adding an ACL that exists already changes nothing.",
    )
    _resource_args(p, adding=True)
    _entry_args(p, adding=True)
    p.set_defaults(handler=add_acls)

    p = ops.add_parser(
        "remove",
        parents=[common],
        help="remove the ACLs a filter matches (no prompt)",
        description="Remove the ACLs of the resources given that match the other options. "
        "No --operation matches every operation; no principal matches every principal "
        "and host; a principal's host is * unless --allow-host/--deny-host names one. "
        "There is no confirmation prompt: run `acls list` first to see what is there.",
    )
    _resource_args(p, adding=False)
    _entry_args(p, adding=False)
    p.set_defaults(handler=remove_acls)


def _acl_code(kind: str, name: str) -> int:
    from trio_broker.client.admin_types import acl_code

    try:
        return acl_code(kind, name)
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None


def _resources(args: argparse.Namespace) -> list[tuple[str, str]]:
    return (
        [("TOPIC", t) for t in args.topic]
        + [("GROUP", g) for g in args.group]
        + ([("CLUSTER", CLUSTER_NAME)] if args.cluster else [])
        + [("TRANSACTIONAL_ID", x) for x in args.transactional_id]
    )


def _operations(args: argparse.Namespace) -> list[str]:
    from trio_broker.client.admin_types import acl_name

    return [acl_name("operation", _acl_code("operation", op)) for op in args.operation]


def _check_principals(principals: list[str]) -> None:
    for principal in principals:
        kind, sep, name = principal.partition(":")
        if not (kind and sep and name):
            raise CommandError(
                f"a principal is TYPE:NAME (e.g. User:alice), not {principal!r}", EXIT_USAGE
            )


def _resource_operations(args: argparse.Namespace) -> list[tuple[str, str, list[str]]]:
    """(resource type, name, operations) for add and for remove: --operation on every
    resource given, or what --producer/--consumer stand for."""
    convenience = args.producer or args.consumer
    if args.idempotent and not args.producer:
        raise CommandError("--idempotent goes with --producer", EXIT_USAGE)
    if not convenience:
        return [(t, n, _operations(args)) for t, n in _resources(args)]
    if args.operation or args.deny_principal or args.deny_host:
        raise CommandError(
            "--producer and --consumer cannot be combined with --operation, "
            "--deny-principal or --deny-host",
            EXIT_USAGE,
        )
    if args.cluster:
        raise CommandError(
            "--producer and --consumer give ACLs on topics, groups and transactional ids; "
            "--idempotent adds IdempotentWrite on the cluster",
            EXIT_USAGE,
        )
    if not args.topic:
        raise CommandError("--producer and --consumer need --topic", EXIT_USAGE)
    if args.consumer and not args.group:
        raise CommandError("--consumer needs --group", EXIT_USAGE)
    out: list[tuple[str, str, list[str]]] = []
    if args.producer:
        out += [("TOPIC", t, ["WRITE", "DESCRIBE", "CREATE"]) for t in args.topic]
        out += [("TRANSACTIONAL_ID", x, ["WRITE", "DESCRIBE"]) for x in args.transactional_id]
        if args.idempotent:
            out.append(("CLUSTER", CLUSTER_NAME, ["IDEMPOTENT_WRITE"]))
    if args.consumer:
        out += [("TOPIC", t, ["READ", "DESCRIBE"]) for t in args.topic]
        out += [("GROUP", g, ["READ"]) for g in args.group]
    return out


def _entries(args: argparse.Namespace, *, adding: bool) -> list[tuple[str | None, str | None, str]]:
    """(principal, host, permission) of every entry the options name; a principal's host
    is `*` unless given (as in kafka-acls). A filter without a principal matches every
    principal (and a host given alone, that host)."""
    out: list[tuple[str | None, str | None, str]] = []
    for permission, principals, hosts in (
        ("ALLOW", args.allow_principal, args.allow_host),
        ("DENY", args.deny_principal, args.deny_host),
    ):
        _check_principals(principals)
        if hosts and not principals:
            if adding:
                flag = permission.lower()
                raise CommandError(f"--{flag}-host needs --{flag}-principal", EXIT_USAGE)
            principals = [None]
        for principal in principals:
            for host in hosts or ["*"]:
                out.append((principal, host, permission))
    if not out and not adding:
        out.append((None, None, "ANY"))
    return out


def _acl_rows(bindings: Any) -> list[dict[str, str]]:
    rows = {tuple(b.named().values()): b.named() for b in bindings}
    return [rows[key] for key in sorted(rows)]


def _print_acls(args: argparse.Namespace, rows: list[dict[str, str]], empty: str) -> None:
    if args.json:
        print_json(rows)
    elif rows:
        print_table(_ACL_COLUMNS, rows)
    else:
        print(empty)


async def list_acls(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin
    from trio_broker.client.admin_types import AclBindingFilter

    _check_principals(args.principal)
    pattern = args.resource_pattern_type or "any"
    resources: list[tuple[str, str | None]] = list(_resources(args)) or [("ANY", None)]
    filters = [
        AclBindingFilter(
            resource_type=rtype,
            resource_name=name,
            pattern_type=pattern,
            principal=principal,
            operation=op,
        )
        for rtype, name in resources
        for principal in args.principal or [None]
        for op in _operations(args) or ["ANY"]
    ]
    found = []
    async with admin(args) as client:
        for f in filters:
            found += await client.describe_acls(f)
    _print_acls(args, _acl_rows(found), "No ACLs.")
    return 0


async def add_acls(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin
    from trio_broker.client.admin_types import AclBinding

    if not _resources(args):
        raise CommandError(
            "name a resource: --topic, --group, --cluster or --transactional-id", EXIT_USAGE
        )
    entries = _entries(args, adding=True)
    if not entries:
        raise CommandError("add needs --allow-principal or --deny-principal", EXIT_USAGE)
    pattern = args.resource_pattern_type or "literal"
    bindings = []
    for rtype, name, operations in _resource_operations(args):
        if not operations:
            raise CommandError("add needs --operation, --producer or --consumer", EXIT_USAGE)
        for op in operations:
            if op not in _OPERATIONS[rtype]:
                raise CommandError(
                    f"{rtype} ACLs take {', '.join(sorted(_OPERATIONS[rtype]))}, not {op}",
                    EXIT_USAGE,
                )
        for principal, host, permission in entries:
            bindings += [
                AclBinding(
                    resource_type=rtype,
                    resource_name=name,
                    # The cluster is one resource, named literally.
                    pattern_type="literal" if rtype == "CLUSTER" else pattern,
                    principal=principal,
                    host=host,
                    operation=op,
                    permission_type=permission,
                )
                for op in operations
            ]
    async with admin(args) as client:
        await client.create_acls(bindings)
    rows = _acl_rows(bindings)
    if not args.json:
        print(f"Added {len(rows)} ACL(s):")
    _print_acls(args, rows, "")
    return 0


async def remove_acls(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin
    from trio_broker.client.admin_types import AclBindingFilter

    if not _resources(args):
        raise CommandError(
            "name the resources to remove ACLs of: --topic, --group, --cluster or "
            "--transactional-id",
            EXIT_USAGE,
        )
    pattern = args.resource_pattern_type or "any"
    filters = [
        AclBindingFilter(
            resource_type=rtype,
            resource_name=name,
            pattern_type=pattern,
            principal=principal,
            host=host,
            operation=op,
            permission_type=permission,
        )
        for rtype, name, operations in _resource_operations(args)
        for principal, host, permission in _entries(args, adding=False)
        for op in operations or ["ANY"]
    ]
    async with admin(args) as client:
        removed = await client.delete_acls(filters)
    rows = _acl_rows(b for bindings in removed.values() for b in bindings)
    if rows and not args.json:
        print(f"Removed {len(rows)} ACL(s):")
    _print_acls(args, rows, "No ACL matched; nothing was removed.")
    return 0


# -- users (SCRAM credentials) -------------------------------------------------------------


def _add_users(sub: Any, common: argparse.ArgumentParser) -> None:
    users = sub.add_parser(
        "users", help="SCRAM credentials of users (kafka-configs --entity-type users)"
    )
    ops = users.add_subparsers(dest="op", required=True)
    mechanisms = ["SCRAM-SHA-256", "SCRAM-SHA-512"]

    p = ops.add_parser("list", parents=[common], help="users' SCRAM mechanisms and iterations")
    p.add_argument("users", nargs="*", metavar="USER", help="default: every user with one")
    p.set_defaults(handler=list_users)

    p = ops.add_parser(
        "set",
        parents=[common],
        help="create or replace a user's SCRAM credential",
        description="Create or replace USER's credential for one SCRAM mechanism. The "
        "password is salted and hashed here; the broker keeps neither it nor the hash. "
        "Without --password or --password-file it is read from stdin (a prompt on a "
        "terminal).",
    )
    p.add_argument("user", metavar="USER")
    p.add_argument("--mechanism", type=str.upper, choices=mechanisms, required=True)
    p.add_argument(
        "--iterations", type=int, default=4096, help="default 4096 (the broker takes 4096-16384)"
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument("--password", help="visible in the process list; prefer a file")
    source.add_argument("--password-file", metavar="FILE", help="its first line is the password")
    p.set_defaults(handler=set_user)

    p = ops.add_parser("delete", parents=[common], help="remove a user's SCRAM credential")
    p.add_argument("user", metavar="USER")
    p.add_argument("--mechanism", type=str.upper, choices=mechanisms, required=True)
    p.set_defaults(handler=delete_user)


def _not_found_is_exit_3(exc: Any) -> None:
    """A user without a credential is "not found" (exit 3), as an unknown topic is."""
    from trio_broker.errors import ErrorCode

    codes = {int(e.code) for e in getattr(exc, "errors", {}).values()}
    if codes == {ErrorCode.RESOURCE_NOT_FOUND}:
        raise CommandError(str(exc), EXIT_NOT_FOUND) from None


def _password(args: argparse.Namespace) -> str:
    if args.password is not None:
        password = args.password
    elif args.password_file is not None:
        try:
            with open(args.password_file, encoding="utf-8") as f:
                password = f.readline().rstrip("\r\n")
        except OSError as exc:
            raise CommandError(
                f"cannot read {args.password_file}: {exc.strerror}", EXIT_USAGE
            ) from None
    elif sys.stdin.isatty():
        import getpass

        password = getpass.getpass(f"Password for {args.user}: ")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise CommandError("the password is empty", EXIT_USAGE)
    return password


async def list_users(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin
    from trio_broker.client.admin_types import AdminError

    async with admin(args) as client:
        try:
            described = await client.describe_user_scram_credentials(args.users or None)
        except AdminError as exc:
            _not_found_is_exit_3(exc)
            raise
    rows = [
        {"user": user, "mechanism": mechanism, "iterations": iterations}
        for user in sorted(described)
        for mechanism, iterations in sorted(described[user])
    ]
    if args.json:
        print_json(rows)
    elif rows:
        print_table(["user", "mechanism", "iterations"], rows)
    else:
        print("No user has a SCRAM credential.")
    return 0


async def set_user(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin
    from trio_broker.client.admin_types import UserScramCredentialUpsertion

    upsertion = UserScramCredentialUpsertion(
        args.user, args.mechanism, _password(args), iterations=args.iterations
    )
    async with admin(args) as client:
        await client.alter_user_scram_credentials(upsertions=[upsertion])
    row = {"user": args.user, "mechanism": args.mechanism, "iterations": args.iterations}
    if args.json:
        print_json([row])
    else:
        print(
            f"Set the {args.mechanism} credential of user {args.user!r} "
            f"({args.iterations} iterations)."
        )
    return 0


async def delete_user(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin
    from trio_broker.client.admin_types import AdminError, UserScramCredentialDeletion

    async with admin(args) as client:
        try:
            await client.alter_user_scram_credentials(
                deletions=[UserScramCredentialDeletion(args.user, args.mechanism)]
            )
        except AdminError as exc:
            _not_found_is_exit_3(exc)
            raise
    if args.json:
        print_json([{"user": args.user, "mechanism": args.mechanism, "deleted": True}])
    else:
        print(f"Deleted the {args.mechanism} credential of user {args.user!r}.")
    return 0


# -- quotas --------------------------------------------------------------------------------


def _entity_args(p: argparse.ArgumentParser) -> None:
    user = p.add_mutually_exclusive_group()
    user.add_argument("--user", metavar="USER")
    user.add_argument("--user-default", action="store_true", help="the default user entity")
    client = p.add_mutually_exclusive_group()
    client.add_argument("--client", "--client-id", dest="client", metavar="CLIENT_ID")
    client.add_argument(
        "--client-default", action="store_true", help="the default client-id entity"
    )


def _add_quotas(sub: Any, common: argparse.ArgumentParser) -> None:
    quotas = sub.add_parser(
        "quotas", help="client quotas of users and client ids (kafka-configs, quotas)"
    )
    ops = quotas.add_subparsers(dest="op", required=True)
    p = ops.add_parser(
        "describe",
        parents=[common],
        help="quotas, of every entity or of the one named",
        description="Without options, every entity's quotas; with --user/--client (or "
        "their defaults), the quotas of exactly that entity (as kafka-configs --describe).",
    )
    _entity_args(p)
    p.set_defaults(handler=describe_quotas)
    for op, text in (
        (
            "set",
            "set quotas: KEY=VALUE ... (producer_byte_rate, consumer_byte_rate, "
            "request_percentage)",
        ),
        ("delete", "remove quotas: KEY ..."),
    ):
        p = ops.add_parser(op, parents=[common], help=text, description=text)
        _entity_args(p)
        p.add_argument("keys", nargs="+", metavar="KEY=VALUE" if op == "set" else "KEY")
        p.add_argument("--validate-only", action="store_true")
        p.set_defaults(handler=set_quotas if op == "set" else delete_quotas)


def _entity(args: argparse.Namespace) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    if args.user is not None or args.user_default:
        out["user"] = args.user
    if args.client is not None or args.client_default:
        out["client-id"] = args.client
    return out


def _entity_text(entity: dict[str, str | None]) -> str:
    return " and ".join(
        f"{t} {n!r}" if n is not None else f"the default {t}"
        for t, n in sorted(entity.items(), key=lambda kv: kv[0] != "user")
    )


async def describe_quotas(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli import admin

    entity = _entity(args)
    async with admin(args) as client:
        described = await client.describe_client_quotas(entity, strict=bool(entity))
    found = sorted(
        ((e.as_dict(), values) for e, values in described.items()),
        # By entity type, then name; a default entity after the named ones.
        key=lambda ev: sorted((t, n is None, n or "") for t, n in ev[0].items()),
    )
    if args.json:
        print_json([{"entity": e, "values": dict(sorted(v.items()))} for e, v in found])
        return 0
    if not found:
        print("No quotas.")
        return 0

    def name(e: dict[str, str | None], kind: str) -> str | None:
        if kind not in e:
            return None
        return "<default>" if e[kind] is None else e[kind]

    rows = [
        {"user": name(e, "user"), "client_id": name(e, "client-id"), "quota": k, "value": v}
        for e, values in found
        for k, v in sorted(values.items())
    ]
    print_table(["user", "client_id", "quota", "value"], rows)
    return 0


async def _alter_quotas(args: argparse.Namespace, changes: dict[str, float | None]) -> int:
    from trio_broker.admin_cli import admin
    from trio_broker.client.admin_types import ClientQuotaEntity

    entity = _entity(args)
    if not entity:
        raise CommandError(
            "name an entity: --user U or --user-default, and/or --client C or --client-default",
            EXIT_USAGE,
        )
    async with admin(args) as client:
        await client.alter_client_quotas(
            {ClientQuotaEntity(entity): changes}, validate_only=args.validate_only
        )
    if args.json:
        print_json([{"entity": entity, "changes": changes, "validate_only": args.validate_only}])
    else:
        verb = "Validated" if args.validate_only else "Updated"
        if all(v is None for v in changes.values()):
            verb = "Validated removing" if args.validate_only else "Removed"
            print(f"{verb} {', '.join(changes)} from the quotas of {_entity_text(entity)}.")
        else:
            shown = ", ".join(f"{k}={v}" for k, v in changes.items())
            print(f"{verb} the quotas of {_entity_text(entity)}: {shown}.")
    return 0


async def set_quotas(args: argparse.Namespace) -> int:
    from trio_broker.admin_cli.topics import parse_assignments

    changes: dict[str, float | None] = {}
    for key, text in parse_assignments(args.keys).items():
        try:
            changes[key] = float(text)
        except ValueError:
            raise CommandError(f"{key}: a quota is a number, not {text!r}", EXIT_USAGE) from None
    return await _alter_quotas(args, changes)


async def delete_quotas(args: argparse.Namespace) -> int:
    return await _alter_quotas(args, {key: None for key in args.keys})
