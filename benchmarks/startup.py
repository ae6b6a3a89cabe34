"""Start-up figures: serve() to listening in-process, and process start to first answer.

    python benchmarks/startup.py

Prints medians over several runs. In-process figures are taken twice: the first start in
a fresh interpreter (imports included) and later starts (what a test fixture pays).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile

RUNS = 7

_IN_PROCESS = r"""
import tempfile, time, trio
t0 = time.perf_counter()
import trio_broker
async def main():
    out = []
    for i in range(6):
        d = tempfile.mkdtemp()
        start = time.perf_counter()
        async with trio.open_nursery() as n:
            await n.start(trio_broker.serve, {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": d})
            out.append(time.perf_counter() - (t0 if i == 0 else start))
            n.cancel_scope.cancel()
    print(" ".join(f"{x*1000:.2f}" for x in out))
trio.run(main)
"""

_FIRST_ANSWER = r"""
import re, socket, struct, subprocess, sys, tempfile, time
start = time.perf_counter()
p = subprocess.Popen([sys.executable, "-m", "trio_broker", "serve", "--override",
    "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tempfile.mkdtemp()}"],
    stderr=subprocess.PIPE, text=True)
for line in p.stderr:
    m = re.search(r"listening on PLAINTEXT://127.0.0.1:(\d+)", line)
    if m:
        break
s = socket.create_connection(("127.0.0.1", int(m.group(1))))
body = struct.pack(">hhih", 18, 0, 1, 1) + b"x"
s.sendall(struct.pack(">i", len(body)) + body)
size = struct.unpack(">i", s.recv(4))[0]
while size > 0:
    size -= len(s.recv(size))
print(f"{(time.perf_counter() - start) * 1000:.1f}")
p.terminate(); p.wait()
"""


def main() -> None:
    first, warm, answer = [], [], []
    for _ in range(RUNS):
        out = subprocess.run(
            [sys.executable, "-c", _IN_PROCESS], capture_output=True, text=True, check=True
        ).stdout.split()
        first.append(float(out[0]))
        warm.extend(float(x) for x in out[1:])
        answer.append(
            float(
                subprocess.run(
                    [sys.executable, "-c", _FIRST_ANSWER],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
        )
    print(f"import + first serve() to listening: median {statistics.median(first):.1f} ms")
    print(f"serve() to listening, later starts:  median {statistics.median(warm):.1f} ms")
    print(f"process start to first answer:       median {statistics.median(answer):.1f} ms")
    if not _bytecode_cached():
        # PYTHONDONTWRITEBYTECODE with an editable install: each start above compiled the
        # sources, which an installed wheel (compiled by pip) never does.
        print(
            "bytecode: not cached, so every start compiled the sources; run "
            "`python -m compileall -q trio_broker apis cluster log analytics` first"
        )


def _bytecode_cached() -> bool:
    import importlib.util
    import os

    import trio_broker.broker

    return os.path.exists(importlib.util.cache_from_source(trio_broker.broker.__file__))


if __name__ == "__main__":
    tempfile.gettempdir()
    main()
