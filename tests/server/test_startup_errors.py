"""Start-up errors name the file and the directory (issue 34): restarting on a full disk
said "cannot start: [Errno 28] No space left on device" and nothing more."""

import errno
import subprocess
import sys
from pathlib import Path

from confluent_kafka import Producer
from disk import fill_disk, small_tmpfs

from trio_broker.cli import _os_error_text
from trio_broker.testing import BrokerProcess, free_port


class _Index:
    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")  # as os.pwrite raises it


def test_the_error_names_the_file_its_writer_knows(tmp_path):
    index = _Index(tmp_path / "logs" / "t-0" / "00000000000000000000.timeindex")
    try:
        index.append()
    except OSError as exc:
        text = _os_error_text(exc, [tmp_path / "logs"])
    assert text == (
        f"[Errno 28] No space left on device: {index.path} (log dir {tmp_path / 'logs'})"
    )
    # Without a file to name, the log dirs are.
    assert _os_error_text(OSError(errno.EIO, "I/O error"), ["/a", "/b"]) == (
        "[Errno 5] I/O error (log dirs: /a, /b)"
    )


def test_restart_on_a_full_disk_names_the_file_and_its_log_dir(tmp_path):
    with small_tmpfs(tmp_path / "disk", "4m") as disk:
        logs = disk / "data"
        broker = BrokerProcess({"log.dirs": str(logs), "num.partitions": "1"})
        try:
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
            for i in range(200):
                producer.produce("full", b"v%05d" % i + b"x" * 1000)
            assert producer.flush(30) == 0
        finally:
            broker.kill()  # unclean: the restart recovers the log
        # Recovery rebuilds indexes in memory (their files are written on flush, roll and
        # close), so the start-up write that meets the full disk is meta.properties'.
        (logs / "meta.properties").unlink()
        fill_disk(disk, leave=0)
        done = subprocess.run(
            [sys.executable, "-m", "trio_broker", "serve"]
            + ["--override", f"log.dirs={logs}"]
            + ["--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1, done.stderr[-2000:]
    [line] = [x for x in done.stderr.splitlines() if "cannot start" in x]
    assert "[Errno 28] No space left on device" in line
    assert f": {logs}/" in line  # the file
    assert line.endswith(f"(log dir {logs})")
