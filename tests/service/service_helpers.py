"""What the service tests play: systemd's notify socket, a raw ApiVersions probe, an HTTP
GET, and a wheel built and installed into a venv of its own (imported by name: tests have
no packages)."""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

__all__ = [
    "NotifySocket",
    "ServiceProcess",
    "api_versions_answers",
    "build_wheel",
    "http_get",
    "install_wheel",
    "wait_for",
]

ROOT = Path(__file__).resolve().parents[2]

# The checkout's top-level folders and the import names the wheel installs them under.
FOLDERS = {
    "trio_broker": "trio_broker",
    "apis": "trio_broker/apis",
    "log": "trio_broker/log",
    "cluster": "trio_broker/cluster",
    "analytics": "trio_broker/analytics",
}


def wait_for(predicate, timeout_s: float = 60, what: str = "condition", step_s: float = 0.05):
    """Poll `predicate` until it returns something true; that value, or AssertionError."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(step_s)


class NotifySocket:
    """systemd's side of sd_notify: a datagram socket whose address goes in NOTIFY_SOCKET.

    `abstract=True` binds in Linux's abstract namespace (NOTIFY_SOCKET=@name), as systemd
    itself does; otherwise a socket file in a short temporary directory (sun_path holds
    107 bytes, more than pytest's tmp_path may leave). Every datagram is kept with the
    monotonic time it arrived, split into its KEY=VALUE lines."""

    def __init__(self, *, abstract: bool = False) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._dir: str | None = None
        if abstract:
            name = f"trio-broker-test-{os.getpid()}-{id(self)}"
            self.sock.bind("\0" + name)
            self.address = "@" + name
        else:
            self._dir = tempfile.mkdtemp(prefix="tbn-", dir="/tmp")
            path = os.path.join(self._dir, "notify")
            self.sock.bind(path)
            self.address = path
        self.messages: list[tuple[float, dict[str, str]]] = []
        self._lock = threading.Lock()
        self.sock.settimeout(0.2)
        self._closed = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._closed:
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            fields = {}
            for line in data.decode().split("\n"):
                key, _, value = line.partition("=")
                if key:
                    fields[key] = value
            with self._lock:
                self.messages.append((time.monotonic(), fields))

    def all(self) -> list[tuple[float, dict[str, str]]]:
        with self._lock:
            return list(self.messages)

    def first(self, key: str, value: str | None = None) -> tuple[float, dict[str, str]] | None:
        """The first message with `key` (equal to `value` if given), or None."""
        for at, fields in self.all():
            if key in fields and (value is None or fields[key] == value):
                return at, fields
        return None

    def values(self, key: str) -> list[str]:
        return [fields[key] for _, fields in self.all() if key in fields]

    def close(self) -> None:
        self._closed = True
        self._thread.join(5)
        self.sock.close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)


def api_versions_answers(host: str, port: int, timeout_s: float = 2) -> bool:
    """One ApiVersions v0 request on a new connection: True when an answer with error code
    0 comes back. Hand-encoded (18, v0, correlation 7, client id "probe"): the probe must
    not depend on the code it probes."""
    client_id = b"probe"
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            head = _recv_exact(s, 4)
            (size,) = struct.unpack(">i", head)
            frame = _recv_exact(s, size)
    except OSError:
        return False
    correlation, error = struct.unpack_from(">ih", frame)
    return correlation == 7 and error == 0


def _recv_exact(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def http_get(host: str, port: int, path: str, timeout_s: float = 10) -> tuple[int, bytes] | None:
    """(status, body) of GET `path`, or None when nothing answers."""
    try:
        conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()
    except OSError:
        return None


def _tracked() -> list[str]:
    # Tracked files and new ones git does not ignore: the checkout as it is now.
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    return [os.fsdecode(n) for n in out.stdout.split(b"\0") if n]


def build_wheel(dest: Path) -> Path:
    """The wheel of the checkout as it is now, its files copied first (those git tracks or
    would track): the build leaves nothing in the checkout (build/, *.egg-info) and sees
    nothing git ignores."""
    source = dest / "src"
    for name in _tracked():
        path = ROOT / name
        if path.is_file():  # a tracked file deleted in the working tree is not built
            target = source / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(dest)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    (wheel,) = dest.glob("trio_broker-*.whl")
    return wheel


def expected_wheel_modules() -> set[str]:
    """Every module of the checkout, as the path the wheel must hold it under."""
    found = set()
    for name in _tracked():
        folder, _, rest = name.partition("/")
        if folder in FOLDERS and name.endswith(".py") and (ROOT / name).is_file():
            found.add(f"{FOLDERS[folder]}/{rest}")
    return found


def install_wheel(wheel: Path, venv: Path, *extras: str) -> Path:
    """A new venv (no system site-packages) with `wheel` installed; returns its python.

    The wheel is installed from the file alone (--no-index --no-deps). Its dependencies are
    the ones this test run uses: a .pth file puts this interpreter's site-packages after
    the venv's own, as plain paths, so the editable install's finder there (a .pth of its
    own, which a plain path does not run) cannot bring the checkout back. The caller checks
    `trio_broker.__file__`. `extras` are checked to be declared and importable."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    Path(site, "_test_dependencies.pth").write_text("".join(f"{p}\n" for p in sorted(ours)))
    return python


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what would import the checkout (PYTHONPATH)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NOTIFY_SOCKET")}
    env.update(extra)
    return env


class ServiceProcess:
    """A `trio-broker serve` command as a service manager runs it: its own environment,
    stderr drained into `.lines` (so the child never blocks on a full pipe)."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path | None = None) -> None:
        self.args = args
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            args, env=env, cwd=cwd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
        )
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def log(self) -> str:
        return "".join(self.lines)

    def wait_line(self, text: str, timeout_s: float = 60) -> str:
        """The first log line containing `text` (AssertionError with the log otherwise)."""

        def found():
            if self.proc.poll() is not None:
                self._thread.join(10)  # its last lines may still be in the pipe
                if not any(text in x for x in self.lines):
                    raise AssertionError(f"exited ({self.proc.returncode}):\n{self.log()[-3000:]}")
            return next((x for x in self.lines if text in x), None)

        try:
            return wait_for(found, timeout_s, repr(text))
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.log()[-3000:]}") from None

    def terminate(self, timeout_s: float = 60) -> int:
        """SIGTERM, as `systemctl stop` sends; the exit code."""
        self.proc.terminate()
        code = self.proc.wait(timeout_s)
        self._thread.join(10)
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
