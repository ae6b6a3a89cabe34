"""Producer id allocation: blocks of ids reserved on disk before any is handed out.

Kafka's controller hands brokers blocks of 1000 producer ids; here the block's end is
written (atomically) to `producer-id-block` in the first log dir before the block is
used, so a restart, clean or not, never reuses an id.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ProducerIdManager"]

BLOCK_SIZE = 1000


class ProducerIdManager:
    def __init__(self, path: Path) -> None:
        self.path = path
        reserved = 0
        if path.exists():
            text = path.read_text().strip()
            reserved = int(text) if text else 0
        self._next = reserved
        self._block_end = reserved

    def next_id(self) -> int:
        if self._next >= self._block_end:
            self._block_end = self._next + BLOCK_SIZE
            tmp = self.path.with_suffix(".tmp")
            with open(tmp, "w") as f:
                f.write(f"{self._block_end}\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        pid = self._next
        self._next += 1
        return pid
