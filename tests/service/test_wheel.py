"""The broker as an operator installs it: a wheel built from the checkout, installed into a
venv of its own outside the checkout, started by its `trio-broker` script, and its admin
CLI run against it.

This is the suite's slow packaging test (marked `slow`, about 30-60 s: a wheel build with
pip's build isolation, a venv, an install that compiles ~440 modules, a broker start).
"""

from __future__ import annotations

import email.parser
import json
import subprocess
import time
import zipfile

import pytest
from service_helpers import (
    NotifySocket,
    ServiceProcess,
    api_versions_answers,
    build_wheel,
    clean_env,
    expected_wheel_modules,
    install_wheel,
    wait_for,
)

from trio_broker.testing import free_port

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_wheel_holds_every_module_and_the_extras(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = email.parser.Parser().parsestr(
            z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        )
        entry_points = z.read(
            next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        ).decode()
    missing = expected_wheel_modules() - names
    assert not missing
    # The generated codec is committed code like any other: hundreds of modules.
    assert sum(n.startswith("trio_broker/protocol/_generated/") for n in names) > 150
    # Nothing is installed outside the trio_broker namespace (no top-level `log`, `apis`).
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"trio_broker"}
    assert "analytics" in metadata.get_all("Provides-Extra")
    requires = metadata.get_all("Requires-Dist")
    assert any(r.startswith("pyspark") and 'extra == "analytics"' in r for r in requires)
    assert "trio-broker = trio_broker.cli:main" in entry_points


def test_installed_wheel_serves_and_runs_the_cli(wheel, tmp_path):
    home = tmp_path / "outside"  # the service's working directory: not the checkout
    home.mkdir()
    python = install_wheel(wheel, tmp_path / "venv")
    script = python.parent / "trio-broker"
    env = clean_env()
    where = subprocess.run(
        [
            str(python),
            "-c",
            "import trio_broker, trio_broker.apis, trio_broker.analytics.job, pyspark; "
            "print(trio_broker.__file__); print(trio_broker.apis.__file__)",
        ],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert where.returncode == 0, where.stderr
    venv = str(tmp_path / "venv")
    assert all(line.startswith(venv) for line in where.stdout.split()), where.stdout

    port = free_port()
    notify = NotifySocket(abstract=True)  # started as systemd starts it (Type=notify)
    broker = ServiceProcess(
        [
            str(script),
            "serve",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override",
            f"log.dirs={tmp_path / 'data'}",
            "--override",
            "num.partitions=2",
        ],
        env=clean_env(NOTIFY_SOCKET=notify.address),
        cwd=home,
    )
    try:
        wait_for(lambda: api_versions_answers("127.0.0.1", port, 1), 60, "ApiVersions")
        answered = time.monotonic()
        ready_at, _ = wait_for(lambda: notify.first("READY", "1"), 60, "READY=1")
        # Issue 39's goal: READY=1 within 1 s of the first ApiVersions answer. Printed, not
        # asserted (a loaded machine stretches any interval).
        print(f"\nwheel: READY=1 {1000 * (ready_at - answered):+.0f} ms after the first answer")

        def cli(*args: str, bootstrap: bool = True) -> subprocess.CompletedProcess:
            where = ["--bootstrap", f"127.0.0.1:{port}"] if bootstrap else []
            out = subprocess.run(
                [str(script), *args, *where],
                cwd=home,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert out.returncode == 0, (args, out.stdout, out.stderr)
            return out

        cli("topics", "create", "orders", "-p", "3")
        cli("produce", "orders", "--partition", "1", "--value", "a", "--value", "b")
        topics = json.loads(cli("topics", "describe", "orders", "--json").stdout)
        assert "orders" in json.dumps(topics)
        # The report's command line comes with the wheel (pyspark from the analytics extra).
        assert "--master" in cli("report", "--help", bootstrap=False).stdout

        assert broker.terminate() == 0
        assert notify.first("STOPPING", "1") is not None
    finally:
        broker.close()
        notify.close()
