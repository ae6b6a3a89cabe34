"""The broker's logging as an operator configures it (`trio-broker serve`'s options).

    --log-level LEVEL              the root level (INFO)
    --logger NAME=LEVEL            one logger's level (repeatable): kafka.request.logger,
                                   trio_broker.cluster.controller, trio_broker.log.cleaner...
    --log-format text|json         json: one object a line (time, level, logger, message,
                                   exception), for a log pipeline
    --log-file PATH                write there instead of stderr, rolled over by size as
    --log-file-max-bytes N         Kafka's log4j RollingFileAppender does: PATH.1 is the
    --log-file-backups N           newest old file, PATH.N the oldest (100 MiB, 10 kept)
    --log-config FILE              Python's logging.config: a dict in JSON (.json) or YAML
                                   (.yaml/.yml, with PyYAML installed), or an INI file
                                   (anything else) for fileConfig

With --log-config the file decides handlers, formats and levels; --log-level and --logger,
when given, still apply on top. Either way the broker's escaping of client strings applies
to every record, and the per-client line limit to every handler on the root logger
(trio_broker/server/log_safe.py). Levels change at runtime through Kafka's own API for it,
IncrementalAlterConfigs on the BROKER_LOGGER resource (apis/broker_logger.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import logging.config
import logging.handlers
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["JsonFormatter", "LoggingError", "add_arguments", "configure"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class LoggingError(Exception):
    """A logging option or file the broker cannot use (the command exits with code 2)."""


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: `time` (ISO 8601, UTC, milliseconds),
    `level`, `logger`, `message`, and `exception` (the formatted traceback) when there is
    one. Control characters in values are JSON escapes, so a record is always one line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": _iso_time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def _iso_time(created: float) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created * 1000) % 1000:03d}Z"


def _logger_level(text: str) -> tuple[str, str]:
    name, sep, level = text.partition("=")
    level = level.strip().upper()
    if level == "WARN":
        level = "WARNING"
    if not sep or not name.strip() or level not in LEVELS:
        raise argparse.ArgumentTypeError(f"expected NAME=LEVEL (one of {', '.join(LEVELS)})")
    return name.strip(), level


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The logging options of `trio-broker serve`."""
    group = parser.add_argument_group("logging")
    group.add_argument(
        "--log-level", choices=LEVELS, default=None, help="the root logger's level (INFO)"
    )
    group.add_argument(
        "--logger",
        metavar="NAME=LEVEL",
        action="append",
        default=[],
        type=_logger_level,
        help="one logger's level (repeatable), e.g. kafka.request.logger=WARNING",
    )
    group.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="json: one JSON object a line (time, level, logger, message, exception)",
    )
    group.add_argument("--log-file", metavar="PATH", help="log there instead of stderr")
    group.add_argument(
        "--log-file-max-bytes",
        type=int,
        default=100 * 1024 * 1024,
        metavar="N",
        help="roll the log file over at this size (default 100 MiB)",
    )
    group.add_argument(
        "--log-file-backups",
        type=int,
        default=10,
        metavar="N",
        help="rolled-over files kept: PATH.1 (newest) .. PATH.N (default 10)",
    )
    group.add_argument(
        "--log-config",
        metavar="FILE",
        help="Python logging.config: a dict in JSON (.json) or YAML (.yaml), or INI",
    )


def configure(args: argparse.Namespace) -> None:
    """Set up logging from `serve`'s parsed options; LoggingError if they cannot be used."""
    from trio_broker.server import log_safe

    if args.log_config:
        _from_file(Path(args.log_config))
    else:
        handler = _handler(args)
        logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    root = logging.getLogger()
    if args.log_level:
        root.setLevel(args.log_level)
    for name, level in args.logger:
        logging.getLogger(name).setLevel(level)
    # Client strings escaped in every line, and the lines clients cause limited per address.
    log_safe.install()
    for handler in root.handlers:
        log_safe.install(handler)


def _handler(args: argparse.Namespace) -> logging.Handler:
    handler: logging.Handler
    if args.log_file:
        if args.log_file_max_bytes < 0 or args.log_file_backups < 0:
            raise LoggingError("--log-file-max-bytes and --log-file-backups must be >= 0")
        try:
            Path(args.log_file).parent.mkdir(parents=True, exist_ok=True)
            # maxBytes=0 never rolls over: one growing file, for an outside logrotate.
            handler = logging.handlers.RotatingFileHandler(
                args.log_file,
                maxBytes=args.log_file_max_bytes,
                backupCount=args.log_file_backups,
                encoding="utf-8",
            )
        except OSError as exc:
            raise LoggingError(f"cannot open the log file: {exc}") from exc
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if args.log_format == "json" else _text())
    return handler


def _text() -> logging.Formatter:
    return logging.Formatter(TEXT_FORMAT)


def _from_file(path: Path) -> None:
    try:
        text = path.read_text()
    except OSError as exc:
        raise LoggingError(f"cannot read the logging config: {exc}") from exc
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            config = json.loads(text)
        elif suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise LoggingError(
                    f"{path} is YAML but PyYAML is not installed (pip install pyyaml), "
                    "or write it as JSON"
                ) from None
            config = yaml.safe_load(text)
        else:
            # An INI file: handlers' arguments are evaluated as Python there, as the
            # logging module documents; it is the operator's own file.
            logging.config.fileConfig(path, disable_existing_loggers=False)
            return
        if not isinstance(config, dict):
            raise LoggingError(f"{path}: expected a logging.config dictionary")
        config.setdefault("version", 1)
        # Loggers the broker made before the file was read keep working.
        config.setdefault("disable_existing_loggers", False)
        logging.config.dictConfig(config)
    except LoggingError:
        raise
    except Exception as exc:  # JSON, YAML, or logging.config's own ValueError/KeyError
        raise LoggingError(f"bad logging config {path}: {exc}") from exc
