"""systemd's service notification protocol (sd_notify(3)), written out: no library.

A service of `Type=notify` finds a datagram socket's address in $NOTIFY_SOCKET and sends
newline-separated KEY=VALUE assignments to it: `READY=1` once it serves, `STATUS=...`
for `systemctl status`, `STOPPING=1` when it begins to stop, `WATCHDOG=1` at least every
$WATCHDOG_USEC microseconds when the unit sets WatchdogSec=. An address starting with "@"
is in Linux's abstract namespace (a NUL byte in its place). That is the whole protocol
the broker needs; the file descriptor store and credential passing it does not use.

Without $NOTIFY_SOCKET (not started by systemd) `Notifier.from_environment()` is None and
nothing is sent. A failed send is logged once and never stops the broker: a service
manager that went away is not a reason to stop serving.
"""

from __future__ import annotations

import logging
import os
import socket

import trio

logger = logging.getLogger(__name__)

__all__ = ["Notifier", "watchdog_interval_s"]


class Notifier:
    """One datagram socket to the service manager's notify socket."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._target = "\0" + address[1:] if address.startswith("@") else address
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._failed = False

    @classmethod
    def from_environment(cls) -> Notifier | None:
        address = os.environ.get("NOTIFY_SOCKET", "")
        if not address or not address.startswith(("/", "@")):
            return None
        return cls(address)

    def send(self, **fields: str | int) -> bool:
        """One datagram of KEY=VALUE lines (`send(READY=1, STATUS="serving")`). A newline
        in a value would start a new assignment: it becomes a space."""
        text = "\n".join(f"{k}={str(v).replace(chr(10), ' ')}" for k, v in fields.items())
        try:
            # A datagram socket: one message, never partly sent, never waiting long.
            self._sock.sendto(text.encode(), self._target)
        except OSError as exc:
            if not self._failed:
                self._failed = True
                logger.warning("cannot notify the service manager at %s: %s", self.address, exc)
            return False
        return True

    def status(self, text: str) -> None:
        self.send(STATUS=text)

    async def watchdog(self, interval_s: float) -> None:
        """WATCHDOG=1 every `interval_s` (half of WATCHDOG_USEC, as sd_watchdog_enabled(3)
        advises), from the broker's own event loop: a loop that stops running stops the
        pings, which is what the watchdog is for."""
        while True:
            self.send(WATCHDOG=1)
            await trio.sleep(interval_s)

    def close(self) -> None:
        self._sock.close()


def watchdog_interval_s() -> float | None:
    """Half of $WATCHDOG_USEC in seconds, or None when no watchdog is asked for (or it is
    meant for another process: $WATCHDOG_PID names the one that must ping)."""
    usec = os.environ.get("WATCHDOG_USEC", "")
    pid = os.environ.get("WATCHDOG_PID", "")
    if pid and pid != str(os.getpid()):
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    if value <= 0:
        return None
    return value / 2 / 1_000_000
