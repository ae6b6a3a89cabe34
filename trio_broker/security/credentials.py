"""The broker's security state: SCRAM credentials (and, with an authorizer, the ACLs).

A lone broker keeps SCRAM credentials in `<first log dir>/scram-credentials`, one JSON
document in Kafka's own form (what ZooKeeper's /config/users/<user> holds): per user and
mechanism `salt=...,stored_key=...,server_key=...,iterations=...`. Never a password.
Written to a temporary file, fsynced and renamed, so a crash leaves the old or the new.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from trio_broker.security.sasl import ScramCredential

logger = logging.getLogger(__name__)

__all__ = ["ScramStore", "SecurityState", "atomic_write"]

SCRAM_FILE = "scram-credentials"


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class ScramStore:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.users: dict[str, dict[str, ScramCredential]] = {}
        # In a cluster, ZooKeeper's /config/users (security/zk_store.py) instead of the file.
        self.zk: Any = None
        if path is not None and path.exists():
            try:
                doc = json.loads(path.read_text())
                for user, mechanisms in doc.get("users", {}).items():
                    self.users[user] = {
                        m: ScramCredential.from_text(text) for m, text in mechanisms.items()
                    }
            except (ValueError, KeyError, OSError) as exc:
                logger.error("cannot read SCRAM credentials from %s: %s", path, exc)

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    def upsert(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        self.users.setdefault(user, {})[mechanism] = credential

    def delete(self, user: str, mechanism: str) -> bool:
        mechanisms = self.users.get(user)
        if not mechanisms or mechanism not in mechanisms:
            return False
        del mechanisms[mechanism]
        if not mechanisms:
            del self.users[user]
        return True

    def save(self) -> None:
        if self.path is None:
            return
        doc = {
            "version": 1,
            "users": {
                user: {m: c.to_text() for m, c in sorted(mechs.items())}
                for user, mechs in sorted(self.users.items())
            },
        }
        atomic_write(self.path, json.dumps(doc, indent=1))


class SecurityState:
    """One per broker, made on first need: credential store and authorizer."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        path = Path(broker.config.log_dirs[0]) / SCRAM_FILE
        # A cluster's credentials are in ZooKeeper (loaded by ZkScram), never in the file.
        self.scram = ScramStore(path if broker.zk is None else None)


def security_state(broker: Any) -> SecurityState:
    state = getattr(broker, "_security_state", None)
    if state is None:
        state = broker._security_state = SecurityState(broker)
    return state
