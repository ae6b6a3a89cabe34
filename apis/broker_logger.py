"""The BROKER_LOGGER config resource (type 8): the broker's log levels, described and
changed at runtime through DescribeConfigs and IncrementalAlterConfigs, as Kafka's
`kafka-configs --entity-type broker-loggers` does (KIP-412).

The resource name is this broker's id; its "configs" are its loggers, each with its
effective level, plus `root`. Levels are reported in Kafka's (log4j's) words, TRACE DEBUG
INFO WARN ERROR FATAL, and accepted in them or in Python's (WARNING, CRITICAL). SET gives
a logger its own level, DELETE takes it away (the logger follows its parent again; not
allowed on root), APPEND and SUBTRACT are refused; a logger must exist, as in Kafka.
Like Kafka's, a change lasts until the process stops: the levels a restart starts with
are those of `serve`'s logging options (trio_broker/serve_logging.py). Every broker of
one process shares Python's loggers, so an in-process test cluster shares its levels.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from trio_broker.apis.config_entries import ConfigEntry, ConfigSource
from trio_broker.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.protocol._generated.incremental_alter_configs_request import (
        AlterableConfig,
    )

__all__ = ["alter_broker_loggers", "broker_logger_entries"]

ROOT = "root"
# Kafka's LogLevelConfig.VALID_LOG_LEVELS, and Python's spellings of two of them.
_LEVELS = {
    "TRACE": 5,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
    "CRITICAL": logging.CRITICAL,
}
_KAFKA_NAMES = ((5, "TRACE"), (10, "DEBUG"), (20, "INFO"), (30, "WARN"), (40, "ERROR"))

# IncrementalAlterConfigs' config_operation values.
_SET, _DELETE, _APPEND, _SUBTRACT = 0, 1, 2, 3


def _kafka_level(level: int) -> str:
    for threshold, name in _KAFKA_NAMES:
        if level <= threshold:
            return name
    return "FATAL"


def check_broker_logger_resource(broker: Broker, name: str) -> None:
    """The resource must name this broker (Kafka's validateResourceNameIsCurrentNodeId)."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
    try:
        node_id = int(name)
    except ValueError:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}"
        ) from None
    if node_id != broker.node_id:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {broker.node_id} but received {name}",
        )


def _loggers() -> dict[str, logging.Logger]:
    manager = logging.Logger.manager
    found = {
        name: logger
        for name, logger in list(manager.loggerDict.items())
        if isinstance(logger, logging.Logger)
    }
    found[ROOT] = logging.getLogger()
    return found


def _exists(name: str) -> bool:
    # A placeholder (a parent of existing loggers, such as trio_broker.cluster) counts:
    # setting its level sets its children's.
    return name == ROOT or name in logging.Logger.manager.loggerDict


def _logger(name: str) -> logging.Logger:
    return logging.getLogger() if name == ROOT else logging.getLogger(name)


def broker_logger_entries(
    broker: Broker, name: str, keys: set[str] | None
) -> Iterator[ConfigEntry]:
    """Every logger (or those in `keys`) with its effective level, as Kafka describes them:
    source DYNAMIC_BROKER_LOGGER_CONFIG, not read-only, no synonyms."""
    check_broker_logger_resource(broker, name)
    for logger_name, logger in sorted(_loggers().items()):
        if keys is not None and logger_name not in keys:
            continue
        yield ConfigEntry(
            name=logger_name,
            value=_kafka_level(logger.getEffectiveLevel()),
            source=ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG,
            read_only=False,
            sensitive=False,
            type="",
            documentation=None,
            synonyms=(),
        )


def alter_broker_loggers(
    broker: Broker, name: str, configs: Iterable[AlterableConfig], validate_only: bool
) -> None:
    """Kafka's validateLogLevelConfigs, then alterLogLevelConfigs: every operation is
    checked before any level changes."""
    check_broker_logger_resource(broker, name)
    changes: list[tuple[str, int]] = []
    for c in configs:
        logger_name, op = c.name, c.config_operation
        if op in (_APPEND, _SUBTRACT):
            verb = "APPEND" if op == _APPEND else "SUBTRACT"
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                f"{verb} operation is not allowed for the BROKER_LOGGER resource",
            )
        if op not in (_SET, _DELETE):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op}")
        if not _exists(logger_name):
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Logger {logger_name} does not exist!")
        if op == _DELETE:
            if logger_name == ROOT:
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST,
                    f"Removing the log level of the {ROOT} logger is not allowed",
                )
            changes.append((logger_name, logging.NOTSET))
            continue
        level = _LEVELS.get((c.value or "").upper())
        if level is None:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"Cannot set the log level of {logger_name} to {c.value} as it is not a "
                "supported log level. Valid log levels are FATAL, ERROR, WARN, INFO, DEBUG, "
                "TRACE",
            )
        changes.append((logger_name, level))
    if validate_only:
        return
    log = logging.getLogger(__name__)
    for logger_name, level in changes:
        _logger(logger_name).setLevel(level)
        shown = "its parent's" if level == logging.NOTSET else _kafka_level(level)
        log.info("log level of %s set to %s (broker %d)", logger_name, shown, broker.node_id)
