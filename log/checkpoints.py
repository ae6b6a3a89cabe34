"""Kafka's small text files beside the segments, byte for byte.

- Offset checkpoints (`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
  `replication-offset-checkpoint`): a version line `0`, a count line, then one
  `topic partition offset` line per partition.
- `leader-epoch-checkpoint` per partition: `0`, count, `epoch startOffset` lines.
- `partition.metadata` per partition: `version: 0` / `topic_id: <base64 uuid>`.
- `meta.properties` per log dir, Java-properties style (KRaft, version=1).

Every write goes to `<name>.tmp`, is fsynced, renamed over the target, and the directory
is fsynced, as Kafka's CheckpointFile does, so a crash leaves either the old or the new file.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import logging
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePath
from typing import Any

__all__ = [
    "LOG_START_OFFSET_CHECKPOINT",
    "META_PROPERTIES",
    "PARTITION_METADATA",
    "RECOVERY_POINT_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
    "CorruptCheckpointError",
    "PendingSyncs",
    "StagedWrites",
    "atomic_write",
    "child",
    "fsync_dir",
    "read_epoch_checkpoint",
    "read_meta_properties",
    "read_offset_checkpoint",
    "read_partition_metadata",
    "topic_id_from_str",
    "topic_id_to_str",
    "write_epoch_checkpoint",
    "write_meta_properties",
    "write_offset_checkpoint",
    "write_partition_metadata",
]

logger = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
META_PROPERTIES = "meta.properties"
PARTITION_METADATA = "partition.metadata"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"

_VERSION = 0


class CorruptCheckpointError(Exception):
    """A checkpoint file that does not parse; the caller decides whether to ignore it."""


def _fsync_path(path: str | os.PathLike[str], flags: int = os.O_RDONLY) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def child(parent: Path, name: str) -> Path:
    """`parent / name` for a `name` of one part (no separator, not ".."), without parsing
    it again: a broker loading 20,000 logs joins about ten paths for each, and pathlib's
    parse was a sixth of the load's CPU. Python 3.11-3.13's Path has the shortcut
    (`_make_child_relpath`, what its own directory walks use); elsewhere the plain join.

    The joined path's string is set too where pathlib caches it (`_str`): each file
    operation on a path asks for it, and pathlib formats it from its parts the first time,
    six times per log loaded (a tenth of the load)."""
    path = _make_child(parent, name)
    if _CACHES_STR:
        head = str(parent)
        if head == ".":
            path._str = name  # type: ignore[attr-defined]
        elif head.endswith("/"):
            path._str = head + name  # type: ignore[attr-defined]
        else:
            path._str = head + "/" + name  # type: ignore[attr-defined]
    return path


_make_child = getattr(Path, "_make_child_relpath", None) or Path.__truediv__


def _caches_str() -> bool:
    """Whether this Python's pathlib keeps a path's string in `_str`, and `child`'s string
    is the one pathlib would make (checked once, on a few paths)."""
    if os.sep != "/" or "_str" not in getattr(PurePath, "__slots__", ()):
        return False
    for parent in (Path("/"), Path("."), Path("a"), Path("/a/b")):
        joined = _make_child(parent, "c.d")
        made = str(joined)
        head = str(parent)
        ours = "c.d" if head == "." else head + ("c.d" if head.endswith("/") else "/c.d")
        if made != ours:
            return False
    return True


_CACHES_STR = _caches_str()


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename or create inside `path` durable."""
    _fsync_path(path, os.O_RDONLY | os.O_DIRECTORY)


_syncfs: Any = None


def sync_filesystem(path: str | os.PathLike[str]) -> None:
    """Make everything written to the file system holding `path` durable, in one call
    (Linux syncfs(2); os.sync() elsewhere): a clean stop of thousands of partitions, each
    with files written since their last flush, would otherwise fsync them one by one."""
    global _syncfs
    if _syncfs is None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        _syncfs = getattr(libc, "syncfs", False)
    if not _syncfs:
        os.sync()
        return
    import ctypes

    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), str(path))
    finally:
        os.close(fd)


class PendingSyncs:
    """fsyncs put off until a batch of creations is written, then done in one pass.

    Creating a topic's partitions one after another, each file fsynced as it is written,
    makes the file system commit its journal once per file: fifty partitions of
    `__consumer_offsets` were a hundred commits. Written first and fsynced after, the first
    fsync commits what all of them wrote and the rest find little left to do. Nothing
    relies on the files until `sync()` returns (the topic is not in the metadata yet).
    """

    def __init__(self) -> None:
        self.files: list[Path] = []
        self.dirs: dict[Path, None] = {}  # ordered, without repeats

    def add_file(self, path: Path) -> None:
        """`path` was written and renamed into place: its data and its dir entry."""
        self.files.append(path)
        self.dirs[path.parent] = None

    def add_dir(self, path: Path) -> None:
        """An entry was created (or renamed) in the directory `path`."""
        self.dirs[path] = None

    def sync(self) -> None:
        """fsync every file, then every directory; an OSError names the path that failed."""
        try:
            for path in self.files:
                _fsync_path(path)
            for path in self.dirs:
                fsync_dir(path)
        except OSError as exc:
            if exc.filename is None:
                exc.filename = str(path)
            raise
        self.files.clear()
        self.dirs.clear()


def _write_beside(path: Path, data: bytes, *, sync: bool) -> Path:
    """Write `data` to `path`'s `.tmp` sibling (fsynced if `sync`) and return that path.
    On failure (a full disk) the partial file goes, and its space; `path` is untouched."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    return tmp


def atomic_write(path: str | os.PathLike[str], data: bytes, *, sync: bool = True) -> None:
    """Replace `path` with `data`: write a .tmp sibling, fsync, rename, fsync the dir."""
    path = path if isinstance(path, Path) else Path(path)
    os.replace(_write_beside(path, data, sync=sync), path)
    if sync:
        fsync_dir(path.parent)


class StagedWrites:
    """Files of one directory replaced together (a clean stop's checkpoints and marker):
    each is written beside its place (`.tmp`) without an fsync, the caller makes them
    durable with everything else in one sync of the file system, and `commit` renames
    them in order and syncs the directory once. Two journal commits instead of two per
    file, and each file is whole before its rename, as with atomic_write."""

    def __init__(self) -> None:
        self.renames: list[tuple[Path, Path]] = []

    def write(self, path: str | os.PathLike[str], data: bytes) -> None:
        path = path if isinstance(path, Path) else Path(path)
        self.renames.append((_write_beside(path, data, sync=False), path))

    def commit(self) -> None:
        """Rename every staged file into place, in the order written, then sync the
        directories (the caller synced their contents first)."""
        dirs: dict[Path, None] = {}
        renames, self.renames = self.renames, []
        for tmp, path in renames:
            os.replace(tmp, path)
            dirs[path.parent] = None
        for directory in dirs:
            fsync_dir(directory)

    def discard(self) -> None:
        """Remove the staged files: the old ones stay."""
        renames, self.renames = self.renames, []
        for tmp, _ in renames:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _read_text(path: Path) -> str | None:
    """The file's text, or None when it does not exist. Raw reads: a broker loading tens
    of thousands of partitions reads two small files of each, and a text-mode open (its
    buffered reader and decoder) cost more than the reads."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        chunks = [os.read(fd, 65536)]
        # A regular file's read comes back short only at its end: one read for a small file.
        while len(chunks[-1]) == 65536:
            chunks.append(os.read(fd, 65536))
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8")


def _lines(path: Path) -> list[str]:
    text = _read_text(path)
    if text is None:
        raise FileNotFoundError(2, "No such file or directory", str(path))
    return text.splitlines()


def _parse_versioned(path: Path, fields: int, text: str | None = None) -> list[list[str]]:
    lines = _lines(path) if text is None else text.splitlines()
    if len(lines) < 2:
        raise CorruptCheckpointError(f"{path}: missing version or count line")
    try:
        version = int(lines[0])
        count = int(lines[1])
    except ValueError as exc:
        raise CorruptCheckpointError(f"{path}: bad header: {lines[:2]!r}") from exc
    if version != _VERSION:
        raise CorruptCheckpointError(f"{path}: unrecognized version {version}")
    entries = [line.split(" ") for line in lines[2:] if line]
    if len(entries) != count or any(len(e) != fields for e in entries):
        raise CorruptCheckpointError(f"{path}: expected {count} entries of {fields} fields")
    return entries


def write_offset_checkpoint(
    path: str | os.PathLike[str],
    offsets: Mapping[tuple[str, int], int],
    *,
    sync: bool = True,
    staged: StagedWrites | None = None,
) -> None:
    """Write `{(topic, partition): offset}` in Kafka's OffsetCheckpointFile format
    (`staged`: only staged there, see StagedWrites)."""
    lines = [str(_VERSION), str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in offsets.items()]
    data = ("\n".join(lines) + "\n").encode()
    if staged is not None:
        staged.write(path, data)
    else:
        atomic_write(path, data, sync=sync)


def read_offset_checkpoint(path: str | os.PathLike[str]) -> dict[tuple[str, int], int]:
    """Parse an offset checkpoint; a missing file reads as empty."""
    path = path if isinstance(path, Path) else Path(path)
    text = _read_text(path)
    if text is None:
        return {}
    try:
        return {(t, int(p)): int(o) for t, p, o in _parse_versioned(path, 3, text)}
    except ValueError as exc:
        raise CorruptCheckpointError(f"{path}: {exc}") from exc


def write_epoch_checkpoint(
    path: str | os.PathLike[str], entries: Iterable[tuple[int, int]], *, sync: bool = True
) -> None:
    """Write `(epoch, start_offset)` pairs in Kafka's LeaderEpochCheckpointFile format."""
    entries = list(entries)
    lines = [str(_VERSION), str(len(entries))] + [f"{e} {o}" for e, o in entries]
    atomic_write(path, ("\n".join(lines) + "\n").encode(), sync=sync)


def read_epoch_checkpoint(path: str | os.PathLike[str]) -> list[tuple[int, int]]:
    path = path if isinstance(path, Path) else Path(path)
    text = _read_text(path)
    if text is None:
        return []
    try:
        return [(int(e), int(o)) for e, o in _parse_versioned(path, 2, text)]
    except ValueError as exc:
        raise CorruptCheckpointError(f"{path}: {exc}") from exc


def topic_id_to_str(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


def topic_id_from_str(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def write_partition_metadata(
    partition_dir: str | os.PathLike[str], topic_id: uuid.UUID, *, sync: bool = True
) -> Path:
    """Write the partition's `partition.metadata`; with `sync=False` the caller fsyncs the
    file and its directory (returned) before anyone relies on them."""
    text = f"version: 0\ntopic_id: {topic_id_to_str(topic_id)}"
    path = child(
        partition_dir if isinstance(partition_dir, Path) else Path(partition_dir),
        PARTITION_METADATA,
    )
    atomic_write(path, text.encode(), sync=sync)
    return path


def read_partition_metadata(partition_dir: str | os.PathLike[str]) -> uuid.UUID | None:
    path = child(
        partition_dir if isinstance(partition_dir, Path) else Path(partition_dir),
        PARTITION_METADATA,
    )
    text = _read_text(path)
    if text is None:
        return None
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    if fields.get("version") != "0" or "topic_id" not in fields:
        raise CorruptCheckpointError(f"{path}: unrecognized content")
    return _partition_topic_id(fields["topic_id"])


# A topic's partitions share its id: parsed once per topic when thousands of logs load.
_partition_topic_id = functools.lru_cache(maxsize=1024)(topic_id_from_str)


def write_meta_properties(log_dir: str | os.PathLike[str], props: Mapping[str, str]) -> None:
    """Write meta.properties the way java.util.Properties.store does (comment, date, k=v)."""
    stamp = time.strftime("%a %b %d %H:%M:%S %Z %Y")
    lines = ["#", f"#{stamp}"] + [f"{k}={v}" for k, v in sorted(props.items())]
    atomic_write(Path(log_dir) / META_PROPERTIES, ("\n".join(lines) + "\n").encode())


def read_meta_properties(log_dir: str | os.PathLike[str]) -> dict[str, str] | None:
    path = Path(log_dir) / META_PROPERTIES
    if not path.exists():
        return None
    props = {}
    for line in _lines(path):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, _, value = line.partition("=")
        props[key.strip()] = value.strip()
    return props
