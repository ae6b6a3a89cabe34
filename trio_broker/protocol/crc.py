"""CRC-32C (Castagnoli), the checksum of record batches and producer snapshots.

From the `crc32c` package (C, SSE4.2 where the CPU has it), imported on first use: the
package's `__init__` reads its own version through `importlib.metadata`, which scans the
installed distributions. That was 30 ms of a broker process's start (and 35-60 ms in a
fresh interpreter) on this project's machine, and answering ApiVersions or Metadata needs
no checksum. The first call rebinds `crc32c` here to the C function, so callers that look
it up as `crc.crc32c` call C directly from then on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["crc32c"]


def _first_call(data: Any) -> int:
    global crc32c
    from crc32c import crc32c as c_crc32c

    crc32c = c_crc32c
    return c_crc32c(data)


# CRC-32C of a bytes-like object.
crc32c: Callable[[Any], int] = _first_call
