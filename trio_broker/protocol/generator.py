"""Generate the Kafka protocol codec from Kafka's message definition files.

    python -m trio_broker.protocol.generator [--spec-dir PATH] [--check]

Reads `../shared/kafka-protocol` beside the checkout (or `--spec-dir`, or the
`TRIO_BROKER_KAFKA_PROTOCOL_DIR` environment variable) and writes one module per
message file into `trio_broker/protocol/_generated/`: slotted classes (their `__init__`
and `__eq__` written out, not made by attrs at import time) plus one straight-line
encoder and decoder per distinct wire layout. `--check` regenerates
into memory and exits 1, naming the stale files, if the committed ones differ.

The output depends only on the spec files, so it is byte-for-byte reproducible
without running a formatter over it.

This module is the entry point and writes the files; the work is done by
`gen_schema` (the spec model), `gen_codec` (wire layouts, encoders and decoders)
and `gen_render` (the text of each file).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from trio_broker.protocol.gen_render import (
    BANNER_PREFIX,
    render_error_codes,
    render_index,
    render_message,
)
from trio_broker.protocol.gen_schema import (
    OPEN,
    MessageSpec,
    load_json,
    load_message,
    parse_versions,
    select_specs,
    snake_case,
)

# The spec model's entry points are re-exported: tests and tools reach them from here.
__all__ = [
    "OPEN",
    "OUT_DIR",
    "MessageSpec",
    "default_spec_dir",
    "generate",
    "load_json",
    "load_message",
    "main",
    "parse_versions",
    "select_specs",
    "snake_case",
    "stale_files",
    "write",
]

logger = logging.getLogger(__name__)

OUT_DIR = Path(__file__).parent / "_generated"


def default_spec_dir() -> Path:
    env = os.environ.get("TRIO_BROKER_KAFKA_PROTOCOL_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2].parent / "shared" / "kafka-protocol"


def generate(spec_dir: Path) -> dict[str, str]:
    """Every generated file: name inside `_generated/` -> text."""
    specs = select_specs(spec_dir)
    files = {f"{m.module}.py": render_message(m) for m in specs}
    files["__init__.py"] = render_index(specs)
    files["error_codes.py"] = render_error_codes(spec_dir)
    return files


def stale_files(files: dict[str, str], out_dir: Path = OUT_DIR) -> list[str]:
    stale = []
    for name, text in sorted(files.items()):
        path = out_dir / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            stale.append(name)
    for path in sorted(out_dir.glob("*.py")):
        if path.name not in files and _is_generated(path):
            stale.append(path.name)
    return stale


def _is_generated(path: Path) -> bool:
    with path.open(encoding="utf-8") as f:
        return f.readline().startswith(BANNER_PREFIX)


def write(files: dict[str, str], out_dir: Path = OUT_DIR) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in sorted(out_dir.glob("*.py")):
        if path.name not in files and _is_generated(path):
            path.unlink()
    for name, text in files.items():
        path = out_dir / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trio_broker.protocol.generator", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--spec-dir", type=Path, default=None, help="Kafka's protocol definitions")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the committed files are stale"
    )
    args = parser.parse_args(argv)
    spec_dir = args.spec_dir or default_spec_dir()
    if not (spec_dir / "messages").is_dir():
        print(f"no Kafka protocol definitions in {spec_dir}", file=sys.stderr)
        return 2
    files = generate(spec_dir)
    if args.check:
        stale = stale_files(files)
        if stale:
            print(
                "stale generated files (run python -m trio_broker.protocol.generator):",
                file=sys.stderr,
            )
            for name in stale:
                print(f"  {OUT_DIR / name}", file=sys.stderr)
            return 1
        return 0
    write(files)
    print(f"wrote {len(files)} files to {OUT_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
