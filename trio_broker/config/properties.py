"""Java `.properties` files: server.properties and meta.properties.

What Kafka reads with `Utils.loadProps` (`java.util.Properties.load`): comments, the three
separators, line continuations and backslash escapes. The result is the mapping
`BrokerConfig.from_properties` takes.
"""

from __future__ import annotations

import os
from pathlib import Path

from trio_broker.config.keys import ConfigError

__all__ = ["load_properties", "parse_properties"]


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java `.properties` text: `#`/`!` comments, `=`, `:` or space separators,
    backslash line continuations and escapes."""
    out: dict[str, str] = {}
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip() if not pending else raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        # An odd number of trailing backslashes continues the line.
        stripped = line.rstrip("\n")
        n = len(stripped) - len(stripped.rstrip("\\"))
        if n % 2 == 1:
            pending += stripped[:-1]
            continue
        logical.append(pending + stripped)
        pending = ""
    if pending:
        logical.append(pending)
    for line in logical:
        key_chars: list[str] = []
        i = 0
        while i < len(line):
            c = line[i]
            if c == "\\" and i + 1 < len(line):
                key_chars.append(_ESCAPES.get(line[i + 1], line[i + 1]))
                i += 2
                continue
            if c in "=: \t\f":
                break
            key_chars.append(c)
            i += 1
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        value_chars: list[str] = []
        j = 0
        while j < len(rest):
            c = rest[j]
            if c == "\\" and j + 1 < len(rest):
                value_chars.append(_ESCAPES.get(rest[j + 1], rest[j + 1]))
                j += 2
                continue
            value_chars.append(c)
            j += 1
        out["".join(key_chars)] = "".join(value_chars)
    return out


def load_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc.strerror}") from None
    return parse_properties(text)
