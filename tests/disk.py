"""Disks for the fault tests: a small tmpfs to fill up, and a filler file (imported by
name: tests have no packages)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

__all__ = ["fill_disk", "free_bytes", "small_tmpfs"]


@contextlib.contextmanager
def small_tmpfs(path, size: str = "4m"):
    """A tmpfs of `size` mounted at `path` (made if missing) for the block; skips the test
    with the reason when mounting is not permitted (not root, or in a container that
    forbids it). Always unmounted afterwards, lazily if a file is still open."""
    import pytest

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill_disk(mount, leave: int) -> Path:
    """A filler file that leaves about `leave` bytes free on `mount`; delete it to free."""
    filler = Path(mount) / "filler"
    st = os.statvfs(mount)
    free = st.f_bavail * st.f_frsize
    with open(filler, "ab") as f:
        f.write(b"\0" * max(free - leave, 0))
    return filler


def free_bytes(mount) -> int:
    st = os.statvfs(mount)
    return st.f_bavail * st.f_frsize
