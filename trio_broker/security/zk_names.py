"""Entity names as znode names, the way Kafka's Sanitizer writes them.

A user or client id may hold any character, `/` included, and a znode name may not. Kafka
URL-encodes the name (UTF-8; every byte outside `A-Z a-z 0-9 . _ -` becomes `%XX`, a
space `%20` and `*` `%2A`) and decodes it when reading, so `CN=svc/orders` is the znode
`CN%3Dsvc%2Forders`. The same names in the same form let Kafka's tools and ours share a
ZooKeeper.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

__all__ = ["desanitize", "sanitize"]


def sanitize(name: str) -> str:
    # quote() leaves `~` alone; Java's URLEncoder (and so Kafka) encodes it.
    return quote(name, safe="").replace("~", "%7E")


def desanitize(znode: str) -> str:
    return unquote(znode)
