"""What the admin commands print, and the exit codes that say what failed.

Human output is a table with Kafka's upper-case column names; `--json` prints one JSON
value (a list of objects) on stdout. Errors are one line on stderr,
`trio-broker: error: ...`, and the exit code says which kind:

    0  done
    1  the broker refused (a Kafka error; its name is in the message)
    2  bad usage: arguments, --command-config
    3  not found: an unknown topic, partition or group
    4  no broker reachable (connection refused, timed out)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trio_broker.errors import ErrorCode, KafkaError

__all__ = [
    "EXIT_NOT_FOUND",
    "EXIT_REFUSED",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "CommandError",
    "exit_code_for",
    "print_json",
    "print_table",
]

EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_UNREACHABLE = 4

_NOT_FOUND = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.GROUP_ID_NOT_FOUND,
}
_UNREACHABLE = {ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT}


class CommandError(Exception):
    """A failure the command itself detects; `code` is its exit code."""

    def __init__(self, message: str, code: int = EXIT_REFUSED) -> None:
        super().__init__(message)
        self.code = code


def _codes(exc: KafkaError) -> list[int]:
    errors = getattr(exc, "errors", None)
    if errors:
        return [int(e.code) for e in errors.values()]
    return [int(exc.code)]


def exit_code_for(exc: BaseException) -> int:
    if isinstance(exc, CommandError):
        return exc.code
    if isinstance(exc, KafkaError):
        codes = _codes(exc)
        if any(c in _UNREACHABLE for c in codes):
            return EXIT_UNREACHABLE
        if any(c in _NOT_FOUND for c in codes):
            return EXIT_NOT_FOUND
        return EXIT_REFUSED
    if isinstance(exc, OSError | TimeoutError):
        return EXIT_UNREACHABLE
    return EXIT_REFUSED


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=None, separators=(", ", ": "))
    sys.stdout.write("\n")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(str(v) for v in value)
    return str(value)


def print_table(columns: Sequence[str], rows: Iterable[Sequence[Any] | Mapping[str, Any]]) -> None:
    """Columns padded to their widest cell, Kafka's tools' look."""
    cells = [
        [_cell(r.get(c) if isinstance(r, Mapping) else r[i]) for i, c in enumerate(columns)]
        for r in rows
    ]
    header = [c.upper().replace("_", "-") for c in columns]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(header)]
    for row in [header, *cells]:
        sys.stdout.write("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        sys.stdout.write("\n")
