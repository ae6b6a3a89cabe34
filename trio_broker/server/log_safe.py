"""Log lines that clients cannot forge or flood.

Escaping. Client ids, group ids, transactional ids, principals and the messages of errors
they cause reach log lines from everywhere in the broker; a newline in one of them once
wrote a line of its own (`2026-11-27 00:00:00,000 ERROR trio_broker.broker: FORGED LINE`).
So escaping is done once, centrally: `install()` wraps the logging record factory so that
every record of a `trio_broker` logger whose message (or whose exception's message) holds a
control character gets it escaped (`\\n`, `\\x1b`, `\\u2028`) before any handler formats it.
Our own message templates hold none, so what is escaped is what came from outside. The
CLI and `serve()` install it; it is idempotent. The request log (`kafka.request.logger`,
trio_broker/request_log.py) is ours too and names the client id: its records are escaped
the same way. Other loggers' records are left alone.

Flooding. Lines logged on a client's behalf (in its connection's task, or in a handler
task answering its request: `CLIENT_ADDRESS` is set there) can be limited per client
address and call site by `ClientLineFilter` on a handler: the CLI puts it on the broker's
own handler; an embedding program may put it on its own (`install(handler)`). Lines of the
socket server itself (bad frames, connections closed mid-frame, idle or stalled) are
limited where they are logged (Connection.log_client), whatever the handlers. The request
log is not limited: it is one line per request by design, turned on by the operator.
"""

from __future__ import annotations

import contextvars
import logging
import re
import threading
import time
import traceback
from collections.abc import Iterator
from typing import Any

__all__ = ["CLIENT_ADDRESS", "ClientLineFilter", "escape", "install"]

# The address of the client on whose behalf the current task works, if any.
CLIENT_ADDRESS: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "trio_broker_client_address", default=None
)

# The loggers whose records are escaped: the broker's, and its request log (request_log.py).
_OURS = ("trio_broker", "kafka.request.logger")
# One line per request when `request.log.enable` is on: never limited per client.
_REQUEST_LOGGER = "kafka.request.logger"

# C0 and C1 controls, DEL, and the Unicode line and paragraph separators.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_one(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str) -> str:
    """`text` with every control character (newlines included) written as an escape."""
    return _UNSAFE.sub(_escape_one, text)


def _exceptions(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, its causes and contexts, and the members of exception groups."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        todo.extend(getattr(current, "exceptions", ()))


def _safe_exception_text(exc_info: Any) -> str | None:
    """The traceback as logging formats it, with the unsafe exception messages (and notes)
    escaped; None when none is unsafe (then logging formats it as usual)."""
    unsafe = set()
    for exc in _exceptions(exc_info[1]):
        try:
            texts = [str(exc), *(getattr(exc, "__notes__", None) or ())]
        except Exception:
            continue
        unsafe.update(t for t in texts if isinstance(t, str) and _UNSAFE.search(t))
    if not unsafe:
        return None
    text = "".join(traceback.format_exception(*exc_info)).removesuffix("\n")
    for message in sorted(unsafe, key=len, reverse=True):
        text = text.replace(message, escape(message))
    return text


def _make_safe(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:
        return  # a bad format: the handler reports it as it always has
    if _UNSAFE.search(message):
        record.msg = escape(message)
        record.args = None
    if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
        record.exc_text = _safe_exception_text(record.exc_info)


_lock = threading.Lock()


def install(handler: logging.Handler | None = None) -> None:
    """Escape the control characters in `trio_broker` log records (once per process), and
    with `handler`, limit the lines clients cause there (`ClientLineFilter`)."""
    with _lock:
        current = logging.getLogRecordFactory()
        if not getattr(current, "trio_broker_safe", False):

            def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
                record = current(*args, **kwargs)
                if record.name.startswith(_OURS):
                    _make_safe(record)
                return record

            factory.trio_broker_safe = True  # type: ignore[attr-defined]
            logging.setLogRecordFactory(factory)
        if handler is not None and not any(
            isinstance(f, ClientLineFilter) for f in handler.filters
        ):
            handler.addFilter(ClientLineFilter())


class ClientLineFilter(logging.Filter):
    """At most `burst` lines per `interval_s` from one call site on behalf of one client
    address; the first line let through after some were not says how many.

    Only records logged where `CLIENT_ADDRESS` is set count; every other line passes."""

    _MAX_KEYS = 10_000

    def __init__(self, burst: int = 10, interval_s: float = 60.0) -> None:
        super().__init__()
        self.burst = burst
        self.interval_s = interval_s
        # (address, logger, line) -> [window start, lines in the window, not logged]
        self._windows: dict[tuple[str, str, int], list[Any]] = {}
        self._lock = threading.Lock()  # one handler may serve brokers on several threads

    def filter(self, record: logging.LogRecord) -> bool:
        address = CLIENT_ADDRESS.get()
        if address is None or record.name == _REQUEST_LOGGER:
            return True
        key = (address, record.name, record.lineno)
        now = time.monotonic()
        with self._lock:
            window = self._windows.get(key)
            if window is None:
                if len(self._windows) >= self._MAX_KEYS:
                    self._forget(now)
                window = self._windows[key] = [now, 0, 0]
            elif now - window[0] >= self.interval_s:
                window[0], window[1] = now, 0
            window[1] += 1
            if window[1] > self.burst:
                window[2] += 1
                return False
            skipped, window[2] = window[2], 0
        if skipped:
            record.msg = (
                f"{record.getMessage()} ({skipped} more like this from {address} not logged)"
            )
            record.args = None
        return True

    def _forget(self, now: float) -> None:
        for key, window in list(self._windows.items()):
            if now - window[0] >= self.interval_s and not window[2]:
                del self._windows[key]
        if len(self._windows) >= self._MAX_KEYS:
            self._windows.clear()  # a flood from many addresses: start over rather than grow
