"""The systemd unit and the production server.properties in contrib/systemd/ are what the
README says: the unit's command line is one `trio-broker serve` accepts, systemd itself
finds nothing wrong in the unit, and the properties load."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trio_broker.cli import build_parser
from trio_broker.config import BrokerConfig, load_properties

CONTRIB = Path(__file__).resolve().parents[2] / "contrib" / "systemd"
UNIT = CONTRIB / "trio-broker.service"


def _settings(text: str) -> dict[str, list[str]]:
    """KEY=VALUE lines of a unit (continuation lines joined, comments left out)."""
    out: dict[str, list[str]] = {}
    joined = text.replace("\\\n", " ")
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        out.setdefault(key, []).append(value.strip())
    return out


def test_unit_runs_serve_as_notify_service():
    settings = _settings(UNIT.read_text())
    assert settings["Type"] == ["notify"]
    (command,) = settings["ExecStart"]
    argv = shlex.split(command)
    assert Path(argv[0]).name == "trio-broker"
    args = build_parser(admin=False).parse_args(argv[1:])
    assert args.command == "serve" and args.config == "/etc/trio-broker/server.properties"
    assert args.log_format == "json"
    assert settings["User"] == ["kafka"]
    assert int(settings["LimitNOFILE"][0]) >= 100_000
    # Longer than a controlled shutdown with the default retries (4 x 35 s).
    assert int(settings["TimeoutStopSec"][0]) > 140
    assert settings["RestartPreventExitStatus"] == ["2"]  # a bad config does not loop


def test_systemd_verifies_the_unit(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    script = Path(sys.executable).parent / "trio-broker"
    unit = tmp_path / "trio-broker.service"
    unit.write_text(UNIT.read_text().replace("/opt/trio-broker/bin/trio-broker", str(script)))
    out = subprocess.run(
        [analyze, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60
    )
    problems = [line for line in out.stderr.splitlines() if "trio-broker.service" in line]
    assert out.returncode == 0 and not problems, out.stderr


def test_production_properties_load():
    config = BrokerConfig.from_properties(load_properties(CONTRIB / "server.properties"))
    assert config.log_dirs == ("/var/lib/trio-broker/data",)
    assert config.metrics_listener == "http://0.0.0.0:9644"
    assert config.zookeeper_connect
    assert config.min_insync_replicas == 2 and config.default_replication_factor == 3
    assert config.auto_create_topics_enable is False
