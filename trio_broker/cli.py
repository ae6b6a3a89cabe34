"""The `trio-broker` command (also `python -m trio_broker`).

    trio-broker serve [--config server.properties] [--override key=value ...]
                      [--log-config FILE | --log-format json --log-file PATH ...]
    trio-broker topics|groups|configs|cluster|produce|consume ...   (admin_cli/)

Subcommands import what they need when they run, so `serve` starts fast.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

logger = logging.getLogger("trio_broker")


def _parse_override(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value


def build_parser(*, admin: bool = True) -> argparse.ArgumentParser:
    """The command line; `admin=False` leaves out the admin commands (admin_cli/), which
    `serve` does not need to import."""
    parser = argparse.ArgumentParser(
        prog="trio-broker", description="A Kafka-wire-compatible message broker on Trio."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a broker")
    serve.add_argument(
        "--config",
        metavar="server.properties",
        help="a Java-style properties file with Kafka's key names",
    )
    serve.add_argument(
        "--override",
        metavar="key=value",
        action="append",
        default=[],
        type=_parse_override,
        help="set one configuration key (repeatable; wins over --config)",
    )
    # --log-level, --logger, --log-format, --log-file*, --log-config.
    from trio_broker import serve_logging

    serve_logging.add_arguments(serve)
    # Their modules import nothing heavy at the top; pyspark and confluent-kafka are
    # imported only when those subcommands run.
    from trio_broker import perf, report_cli

    report_cli.add_parser(sub)
    perf.add_parser(sub)
    if admin:
        from trio_broker import admin_cli

        admin_cli.add_parsers(sub)
    return parser


def _configure_logging(level: str) -> None:
    from trio_broker.server import log_safe

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, level), handlers=[handler])
    # Client strings escaped in every line, and the lines clients cause limited per address.
    log_safe.install(handler)


def _serve(args: argparse.Namespace, *, ends_process: bool = False) -> int:
    import gc

    import trio

    from trio_broker.config import BrokerConfig, ConfigError, load_properties

    props: dict[str, str] = {}
    try:
        if args.config:
            props.update(load_properties(args.config))
        props.update(dict(args.override))
        config = BrokerConfig.from_properties(props)
    except ConfigError as exc:
        logger.error("%s", exc)
        return 2

    from trio_broker import systemd
    from trio_broker.server.readiness import Readiness

    # Under systemd (Type=notify): STATUS= as start-up goes, READY=1 once serving,
    # STOPPING=1 on a stop signal, WATCHDOG=1 if the unit asks (trio_broker/systemd.py).
    notifier = systemd.Notifier.from_environment()
    readiness = Readiness()
    watchdog_s = None
    if notifier is not None:
        readiness.observers.append(notifier.status)
        watchdog_s = systemd.watchdog_interval_s()

    async def main() -> None:
        from functools import partial

        from trio_broker.broker import serve
        from trio_broker.gc_policy import FreezeAfterLongCollections

        async def serve_then_freeze() -> None:
            freezer = FreezeAfterLongCollections(trio.lowlevel.current_trio_token())
            try:
                async with trio.open_nursery() as inner:
                    addresses = await inner.start(partial(serve, config, readiness=readiness))
                    # What start-up made (modules, the codec's tables, configs) lives as
                    # long as the process: out of the collector's sight, a collection of
                    # the older generations no longer walks it (tracked objects 39k -> 6k).
                    # Only here, where the process is ours; an embedding program decides
                    # its own. And what grows later (thousands of partitions' state), once
                    # a full collection takes long (trio_broker/gc_policy.py).
                    gc.freeze()
                    freezer.install()
                    if notifier is not None:
                        where = ", ".join(f"{a[0]}:{a[1]}" for a in addresses)
                        notifier.send(READY=1, STATUS=f"serving on {where}")
            finally:
                freezer.uninstall()

        async with trio.open_nursery() as nursery:
            if watchdog_s is not None:
                nursery.start_soon(notifier.watchdog, watchdog_s)
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                # Started, not awaited: a SIGTERM during start-up (ZooKeeper unreachable,
                # say) must stop the broker too.
                nursery.start_soon(serve_then_freeze)
                async for signum in signals:
                    name = signal.Signals(signum).name
                    logger.info("received %s", name)
                    if ends_process:
                        # The process ends once the broker has stopped (_exit_at_once): no
                        # object has to be collected before, and a full collection in the
                        # stop walked what the logs' close had made (0.1 s of a 0.9 s stop
                        # with 20,000 partitions). The close leaves it off (log/manager.py).
                        gc.disable()
                    if notifier is not None:
                        notifier.send(STOPPING=1, STATUS=f"stopping ({name})")
                    nursery.cancel_scope.cancel()
                    break

    from trio_broker.errors import FatalBrokerError

    def failed(code: int, text: str) -> int:
        # The one line an operator needs, in the log and in `systemctl status`.
        logger.error("%s", text)
        if notifier is not None:
            notifier.status(text)
        return code

    try:
        trio.run(main)
    except (OSError, FatalBrokerError, ConfigError, BaseExceptionGroup) as exc:
        # Trio reports a failed bind from inside the nursery as an exception group.
        errors = exc.exceptions if isinstance(exc, BaseExceptionGroup) else (exc,)
        leaves = _leaves(errors)
        # What only binding can check (a listener's TLS keys, its protocol) is a bad config.
        bad_config = [e for e in leaves if isinstance(e, ConfigError)]
        if bad_config:
            return failed(2, str(bad_config[0]))
        fatal = [e for e in leaves if isinstance(e, FatalBrokerError)]
        if fatal:
            return failed(1, f"cannot run: {fatal[0]}")
        os_errors = [e for e in leaves if isinstance(e, OSError)]
        if not os_errors:
            raise
        return failed(1, f"cannot start: {_os_error_text(os_errors[0], config.log_dirs)}")
    return 0


def _os_error_text(exc: OSError, log_dirs: Sequence[object]) -> str:
    """The error with the file it concerns and its log dir: "[Errno 28] No space left on
    device" alone does not say which disk to look at."""
    from pathlib import Path

    text = str(exc)
    path = _file_of(exc)
    if path is None:
        return f"{text} (log dirs: {', '.join(str(d) for d in log_dirs)})"
    if exc.filename is None:
        text = f"{text}: {path}"
    log_dir = next((d for d in map(Path, log_dirs) if Path(path).is_relative_to(d)), None)
    where = f"log dir {log_dir}" if log_dir is not None else f"directory {Path(path).parent}"
    return f"{text} ({where})"


# Where the file an OSError concerns may be found, innermost frame first: an OSError
# from a write or an fsync (ENOSPC, EIO) carries no file name, but the object writing it
# (an index, a segment, a checkpoint) or a local variable of the function knows it.
_PATH_NAMES = ("path", "file_path", "filename", "file", "log_dir", "directory", "dir")


def _file_of(exc: OSError) -> str | None:
    import os

    if isinstance(exc.filename, str | bytes | os.PathLike):
        return os.fsdecode(exc.filename)
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        names = frame.f_locals
        owner = names.get("self")
        for name in _PATH_NAMES:
            for candidate in (names.get(name), getattr(owner, name, None)):
                if isinstance(candidate, str | os.PathLike):
                    return os.fsdecode(candidate)
    return None


def _leaves(errors: Sequence[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for e in errors:
        out.extend(_leaves(e.exceptions) if isinstance(e, BaseExceptionGroup) else [e])
    return out


def _exit_at_once(code: int) -> NoReturn:
    """End a broker process that has stopped: its logs are flushed, checkpointed and
    marked clean, and what is left is the interpreter's teardown, which collected and freed
    every object the broker held one by one (0.5 s of a 1.6 s stop with 5,000 partitions).
    The log handlers and standard streams are flushed first; nothing else waits at exit."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    as_program = argv is None  # `trio-broker ...` or `python -m trio_broker ...`
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(admin=argv[:1] != ["serve"]).parse_args(argv)
    if args.command == "serve":
        from trio_broker import serve_logging

        try:
            serve_logging.configure(args)
        except serve_logging.LoggingError as exc:
            _configure_logging("INFO")
            logger.error("%s", exc)
            return 2
        code = _serve(args, ends_process=as_program)
        if as_program:
            _exit_at_once(code)
        return code
    _configure_logging(getattr(args, "log_level", None) or "INFO")
    if args.command == "report":
        from trio_broker import report_cli

        return report_cli.run(args)
    if args.command == "perf":
        from trio_broker import perf

        return perf.run(args)
    from trio_broker import admin_cli

    if args.command in admin_cli.COMMANDS:
        return admin_cli.run(args)
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
