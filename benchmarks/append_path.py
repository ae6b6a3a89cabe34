"""The produce append path in-process: validate_batches + PartitionLog.append_as_leader of
lone 100-byte batches, as (b) makes the broker do once per request.

    .venv/bin/python benchmarks/append_path.py [--appends 30000] [--idempotent]

Prints the thread CPU microseconds per append (validation alone, then both), on a fresh log
in a temporary directory. Thread CPU rather than wall time: other processes' load moves it
less. Compare two trees by running each from its own checkout, alternating.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from trio_broker.log.config import LogConfig
from trio_broker.log.loader import load_log
from trio_broker.protocol.record_codec import build_batch
from trio_broker.protocol.records import validate_batches

MAX_BATCH = 1_000_000


def measure(appends: int, idempotent: bool) -> dict:
    work = Path(tempfile.mkdtemp(prefix="append-path-"))
    try:
        log = load_log(work / "t-0", "t", 0, LogConfig())
        producer = {"producer_id": 7, "producer_epoch": 0} if idempotent else {}
        blobs = [
            bytearray(
                build_batch(
                    [(b"k", b"v" * 100, [], 1_700_000_000_000)],
                    base_sequence=i if idempotent else -1,
                    **producer,
                )
            )
            for i in range(appends)
        ]
        start = time.thread_time_ns()
        for blob in blobs:
            validate_batches(memoryview(blob), max_batch_size=MAX_BATCH, single_batch=True)
        validate_us = (time.thread_time_ns() - start) / appends / 1000
        start = time.thread_time_ns()
        for blob in blobs:
            view = memoryview(blob)
            headers = validate_batches(view, max_batch_size=MAX_BATCH, single_batch=True)
            log.append_as_leader(view, headers, leader_epoch=0)
        both_us = (time.thread_time_ns() - start) / appends / 1000
        log.close_handlers()
        return {
            "idempotent": idempotent,
            "validate_us": round(validate_us, 2),
            "validate_and_append_us": round(both_us, 2),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=30000)
    parser.add_argument("--idempotent", action="store_true")
    args = parser.parse_args()
    print(json.dumps(measure(args.appends, args.idempotent)))


if __name__ == "__main__":
    main()
