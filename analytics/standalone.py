"""A throwaway Spark standalone cluster on loopback, started with pyspark's own launcher.

    with StandaloneCluster(work_dir, cores=2, memory="1g") as cluster:
        subprocess.run([..., "report", "--master", cluster.master_url, ...])

Runs `spark-class org.apache.spark.deploy.master.Master` and one
`spark-class org.apache.spark.deploy.worker.Worker spark://127.0.0.1:PORT`, both bound to
127.0.0.1 on free ports, each in its own process group so that stopping kills the JVM and
everything it started (executors). For the report's tests and benchmarks: a real cluster
is set up by its operators, not by this.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["StandaloneCluster", "spark_class"]

_HOST = "127.0.0.1"


def spark_class() -> str:
    """The `spark-class` launcher installed with pyspark (beside this interpreter)."""
    beside = Path(sys.executable).parent / "spark-class"
    if beside.exists():
        return str(beside)
    found = shutil.which("spark-class")
    if found is None:
        raise FileNotFoundError("spark-class not found: is pyspark installed?")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((_HOST, 0))
        return s.getsockname()[1]


class StandaloneCluster:
    """A master and one worker; `master_url` once entered. Logs go to `work_dir`."""

    def __init__(
        self,
        work_dir: str | os.PathLike[str],
        *,
        cores: int = 2,
        memory: str = "1g",
        start_timeout: float = 180.0,
    ) -> None:
        self.work_dir = Path(work_dir)
        self.cores = cores
        self.memory = memory
        self.start_timeout = start_timeout
        self.port = 0
        self.master_url = ""
        self._procs: list[subprocess.Popen] = []
        self._logs: list[Path] = []

    def env(self) -> dict[str, str]:
        """The environment for the master, the worker and a driver talking to them."""
        env = dict(os.environ)
        env["SPARK_LOCAL_IP"] = _HOST
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        # A daemon's JVM heap; executors get the worker's --memory.
        env.setdefault("SPARK_DAEMON_MEMORY", "256m")
        env["SPARK_LOG_DIR"] = str(self.work_dir / "logs")
        env["SPARK_WORKER_DIR"] = str(self.work_dir / "work")
        return env

    def _start(self, name: str, *args: str) -> Path:
        log = self.work_dir / f"{name}.out"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [spark_class(), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env(),
                start_new_session=True,
            )
        self._procs.append(proc)
        self._logs.append(log)
        return log

    def _wait_for(self, log: Path, text: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if text in log.read_text(errors="replace"):
                return
            for proc in self._procs:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"spark process exited ({proc.returncode}):\n"
                        + log.read_text(errors="replace")[-3000:]
                    )
            time.sleep(0.2)
        raise TimeoutError(f"{text!r} not in {log}:\n" + log.read_text(errors="replace")[-3000:])

    def start(self) -> StandaloneCluster:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "work").mkdir(exist_ok=True)
        self.port = _free_port()
        self.master_url = f"spark://{_HOST}:{self.port}"
        master_log = self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            _HOST,
            "--port",
            str(self.port),
            "--webui-port",
            str(_free_port()),
        )
        # The worker retries its registration, so it may start before the master listens.
        worker_log = self._start(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            _HOST,
            "--port",
            str(_free_port()),
            "--webui-port",
            str(_free_port()),
            "--cores",
            str(self.cores),
            "--memory",
            self.memory,
            "--work-dir",
            str(self.work_dir / "work"),
            self.master_url,
        )
        try:
            self._wait_for(master_log, "I have been elected leader")
            self._wait_for(worker_log, "Successfully registered with master")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Kill the worker and the master with everything they started (idempotent)."""
        for proc in reversed(self._procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for proc in reversed(self._procs):
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(20)
        self._procs.clear()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
