"""The `trio-broker` admin commands as a user runs them, for the tests: a subprocess
against a broker's bootstrap address (imported by name: tests have no packages)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

__all__ = ["cli_json", "run_cli"]


def run_cli(
    broker: Any,
    *args: str,
    stdin: str | None = None,
    check: bool = True,
    command_config: str | None = None,
) -> subprocess.CompletedProcess:
    """`trio-broker ARGS --bootstrap B [--command-config F]`; with `check`, exit code 0."""
    bootstrap = broker if isinstance(broker, str) else broker.bootstrap
    config = ["--command-config", command_config] if command_config else []
    out = subprocess.run(
        [sys.executable, "-m", "trio_broker", *args, "--bootstrap", bootstrap, *config],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=120,
    )
    if check:
        assert out.returncode == 0, (args, out.returncode, out.stdout, out.stderr)
    return out


def cli_json(broker: Any, *args: str, **kwargs: Any) -> Any:
    """The command's `--json` output, parsed."""
    return json.loads(run_cli(broker, *args, "--json", **kwargs).stdout)
