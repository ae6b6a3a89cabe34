"""`trio-broker serve`'s logging as an operator sets it up: a logging.config file (JSON,
INI) with per-logger levels, JSON lines, a log file rolled over by size, and log levels
changed at runtime through Kafka's BROKER_LOGGER resource (kafka-python's admin client:
confluent-kafka's ConfigResource has no BROKER_LOGGER type)."""

from __future__ import annotations

import json
import logging
import re
import socket
import sys
import time

import pytest
from cli_run import cli_json, run_cli
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
from service_helpers import ServiceProcess, api_versions_answers, clean_env, wait_for
from wire import request_of, roundtrip

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.incremental_alter_configs_request import (
    AlterableConfig as IncAlterableConfig,
)
from trio_broker.protocol._generated.incremental_alter_configs_request import (
    AlterConfigsResource as IncAlterConfigsResource,
)
from trio_broker.serve_logging import JsonFormatter
from trio_broker.testing import free_port


def _serve(tmp_path, *options: str, overrides: tuple[str, ...] = ()) -> tuple[ServiceProcess, int]:
    port = free_port()
    args = [sys.executable, "-m", "trio_broker", "serve", *options]
    for kv in (f"listeners=PLAINTEXT://127.0.0.1:{port}", f"log.dirs={tmp_path / 'data'}"):
        args += ["--override", kv]
    for kv in overrides:
        args += ["--override", kv]
    return ServiceProcess(args, env=clean_env()), port


def _started(path) -> bool:
    return path.exists() and "broker 1 started" in path.read_text()


def test_json_log_config_file_with_per_logger_levels(tmp_path):
    log_file = tmp_path / "broker.log"
    config = {
        "version": 1,
        "formatters": {"plain": {"format": "%(levelname)s|%(name)s|%(message)s"}},
        "handlers": {
            "file": {
                "class": "logging.FileHandler",
                "filename": str(log_file),
                "formatter": "plain",
            }
        },
        "root": {"level": "INFO", "handlers": ["file"]},
        # The socket server's lines off, the log manager's debug lines on.
        "loggers": {
            "trio_broker.server.socket_server": {"level": "WARNING"},
            "trio_broker.log.manager": {"level": "DEBUG"},
        },
    }
    path = tmp_path / "logging.json"
    path.write_text(json.dumps(config))
    broker, _ = _serve(tmp_path, "--log-config", str(path))
    try:
        wait_for(lambda: _started(log_file), 60, "the start line in the log file")
        assert broker.terminate() == 0
    finally:
        broker.close()
    lines = log_file.read_text().splitlines()
    assert any(re.fullmatch(r"INFO\|trio_broker\.broker\|broker 1 started .*", x) for x in lines)
    assert "INFO|trio_broker.log.manager|loaded 0 logs" in "\n".join(lines)
    assert not any("socket_server" in x for x in lines)
    assert "INFO|trio_broker.broker|broker 1 stopped" in lines
    # The file's handler is the only one: nothing on stderr.
    assert broker.log() == ""


def test_ini_log_config_file(tmp_path):
    log_file = tmp_path / "broker.log"
    path = tmp_path / "logging.ini"
    path.write_text(
        "[loggers]\nkeys=root,broker\n\n"
        "[handlers]\nkeys=file\n\n"
        "[formatters]\nkeys=plain\n\n"
        "[logger_root]\nlevel=WARNING\nhandlers=file\n\n"
        "[logger_broker]\nlevel=INFO\nhandlers=\nqualname=trio_broker.broker\n\n"
        f"[handler_file]\nclass=FileHandler\nformatter=plain\nargs=({str(log_file)!r},)\n\n"
        "[formatter_plain]\nformat=%(name)s: %(message)s\n"
    )
    broker, _ = _serve(tmp_path, "--log-config", str(path))
    try:
        wait_for(lambda: _started(log_file), 60, "the start line in the log file")
        assert broker.terminate() == 0
    finally:
        broker.close()
    text = log_file.read_text()
    assert "trio_broker.broker: broker 1 started" in text
    assert "loaded 0 logs" not in text  # the log manager is at the root's WARNING


def test_yaml_log_config_file(tmp_path):
    # YAML needs PyYAML, which the broker does not depend on: without it the broker says
    # so and exits 2 (a config error); with it the file is read.
    log_file = tmp_path / "broker.log"
    path = tmp_path / "logging.yaml"
    path.write_text(
        "version: 1\n"
        "handlers:\n"
        f"  file: {{class: logging.FileHandler, filename: '{log_file}'}}\n"
        "root: {level: INFO, handlers: [file]}\n"
    )
    broker, _ = _serve(tmp_path, "--log-config", str(path))
    try:
        import yaml  # noqa: F401
    except ImportError:
        assert broker.proc.wait(60) == 2
        broker.terminate()
        assert "PyYAML is not installed" in broker.log()
        return
    try:
        wait_for(lambda: _started(log_file), 60, "the start line in the log file")
        assert broker.terminate() == 0
    finally:
        broker.close()


def test_bad_log_config_is_a_config_error(tmp_path):
    path = tmp_path / "logging.json"
    path.write_text('{"version": 1, "handlers": {"h": {"class": "no.such.Handler"}}}')
    broker, _ = _serve(tmp_path, "--log-config", str(path))
    assert broker.proc.wait(60) == 2
    broker.terminate()
    assert "bad logging config" in broker.log()


def test_json_lines_in_a_file_rolled_over_by_size(tmp_path):
    log_file = tmp_path / "logs" / "server.log"
    broker, port = _serve(
        tmp_path,
        "--log-format=json",
        f"--log-file={log_file}",
        "--log-file-max-bytes=2000",
        "--log-file-backups=2",
        overrides=("request.log.enable=true",),
    )
    try:
        wait_for(lambda: api_versions_answers("127.0.0.1", port), 60, "ApiVersions")
        # Each answered request is one line of kafka.request.logger: ~500 bytes in JSON.
        for _ in range(30):
            assert api_versions_answers("127.0.0.1", port)
        wait_for(lambda: (log_file.parent / "server.log.2").exists(), 60, "a second rollover")
        assert broker.terminate() == 0
    finally:
        broker.close()
    assert broker.log() == ""  # the file instead of stderr
    files = sorted(p.name for p in log_file.parent.iterdir())
    assert files == ["server.log", "server.log.1", "server.log.2"]
    records = []
    for path in log_file.parent.iterdir():
        data = path.read_text()
        # A file is rolled over before the record that would pass the limit.
        assert len(data.encode()) <= 2000 or data.count("\n") == 1
        records += [json.loads(line) for line in data.splitlines()]
    assert all(set(r) == {"time", "level", "logger", "message"} for r in records)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r["time"]) for r in records)
    assert any(
        r["logger"] == "kafka.request.logger" and "ApiVersions" in r["message"] for r in records
    )
    # The newest file holds the last line.
    assert json.loads(log_file.read_text().splitlines()[-1])["message"] == "broker 1 stopped"


def test_json_formatter_keeps_an_exception_on_its_line():
    try:
        raise ZeroDivisionError("division by zero")
    except ZeroDivisionError:
        record = logging.LogRecord(
            "trio_broker.x", logging.ERROR, __file__, 1, "bad\nthing %s", ("here",), sys.exc_info()
        )
    line = JsonFormatter().format(record)
    assert "\n" not in line
    out = json.loads(line)
    assert out["level"] == "ERROR" and out["logger"] == "trio_broker.x"
    assert out["message"] == "bad\nthing here"
    assert out["exception"].startswith("Traceback") and "ZeroDivisionError" in out["exception"]


REQUEST_LOG = "kafka.request.logger"


def _levels(admin: KafkaAdminClient, *names: str) -> dict[str, str]:
    described = admin.describe_configs(
        [ConfigResource(ConfigResourceType.BROKER_LOGGER, "1", configs=list(names) or None)],
        config_filter="ALL",
    )
    return {k: v["value"] for k, v in described["broker_logger"]["1"].items()}


def _alter(admin: KafkaAdminClient, name: str = "1", **ops) -> str:
    out = admin.alter_configs(
        [ConfigResource(ConfigResourceType.BROKER_LOGGER, name, configs=ops)],
        raise_on_unknown=False,
        incremental=True,
    )
    return str(out["broker_logger"][name])


def test_log_levels_changed_at_runtime_through_broker_logger(tmp_path):
    # The request log is on, its logger at WARNING: nothing of it is logged yet.
    broker, port = _serve(
        tmp_path, "--logger", f"{REQUEST_LOG}=WARNING", overrides=("request.log.enable=true",)
    )
    admin = None
    try:
        broker.wait_line("broker 1 started")
        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}")
        every = _levels(admin)
        assert every[REQUEST_LOG] == "WARN" and every["root"] == "INFO"
        assert every["trio_broker.broker"] == "INFO"
        assert REQUEST_LOG not in broker.log()

        assert _alter(admin, **{REQUEST_LOG: ("SET", "DEBUG")}) == "OK"
        changed = time.monotonic()
        # Seen in the log: the next requests' lines (and the alter's own).
        wait_for(lambda: api_versions_answers("127.0.0.1", port) and REQUEST_LOG in broker.log())
        seen = time.monotonic()
        print(f"\nlevel change seen in the log {1000 * (seen - changed):.0f} ms after the answer")
        assert "log level of kafka.request.logger set to DEBUG (broker 1)" in broker.log()
        assert _levels(admin, REQUEST_LOG) == {REQUEST_LOG: "DEBUG"}

        # DELETE: the logger follows its parent (root, INFO) again.
        assert _alter(admin, **{REQUEST_LOG: ("DELETE", None)}) == "OK"
        assert _levels(admin, REQUEST_LOG) == {REQUEST_LOG: "INFO"}
        # A parent's level reaches the loggers below it.
        assert _alter(admin, **{"trio_broker": ("SET", "WARN")}) == "OK"
        assert _levels(admin, "trio_broker.broker")["trio_broker.broker"] == "WARN"

        # The same through trio-broker's own CLI (kafka-configs --entity-type broker-loggers).
        bootstrap = f"127.0.0.1:{port}"
        run_cli(bootstrap, "configs", "set", "broker-logger", "1", "trio_broker.log.cleaner=DEBUG")
        rows = cli_json(bootstrap, "configs", "describe", "broker-logger", "1")
        assert {"name": "trio_broker.log.cleaner", "value": "DEBUG"}.items() <= next(
            r for r in rows if r["name"] == "trio_broker.log.cleaner"
        ).items()
        run_cli(bootstrap, "configs", "delete", "broker-logger", "1", "trio_broker.log.cleaner")
        assert _levels(admin, "trio_broker.log.cleaner") == {"trio_broker.log.cleaner": "WARN"}

        # Kafka's refusals, each with its error code.
        assert "InvalidConfigurationError" in _alter(admin, **{"no.such": ("SET", "INFO")})
        assert "does not exist" in _alter(admin, **{"no.such": ("SET", "INFO")})
        assert "InvalidConfigurationError" in _alter(admin, **{REQUEST_LOG: ("SET", "LOUD")})
        assert "InvalidRequestError" in _alter(admin, **{"root": ("DELETE", None)})
        assert "InvalidRequestError" in _alter(admin, **{REQUEST_LOG: ("APPEND", "INFO")})
        # Another broker's id (kafka-python would send it to broker 7: sent by hand).
        assert _raw_alter(port, "7", REQUEST_LOG, "INFO") == (
            ErrorCode.INVALID_REQUEST,
            "Unexpected broker id, expected 1 but received 7",
        )
        assert _raw_alter(port, "", REQUEST_LOG, "INFO")[0] == ErrorCode.INVALID_REQUEST
        assert _levels(admin, REQUEST_LOG) == {REQUEST_LOG: "INFO"}  # none of them applied
        assert broker.terminate() == 0
    finally:
        if admin is not None:
            admin.close()
        broker.close()


def _raw_alter(port: int, name: str, logger: str, level: str) -> tuple[int, str | None]:
    config = IncAlterableConfig(name=logger, config_operation=0, value=level)
    request = request_of(
        44,
        resources=[IncAlterConfigsResource(resource_type=8, resource_name=name, configs=[config])],
        validate_only=False,
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        (result,) = roundtrip(sock, request, 1).responses
    return result.error_code, result.error_message


@pytest.mark.parametrize("option", ["--log-file-max-bytes=-1", "--logger=x=LOUD"])
def test_bad_logging_options_are_refused(tmp_path, option):
    broker, _ = _serve(tmp_path, option, f"--log-file={tmp_path / 'x.log'}")
    assert broker.proc.wait(60) == 2
    broker.terminate()
