"""The code generator: committed output is current, and its building blocks."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trio_broker.protocol import generator

SPEC_DIR = generator.default_spec_dir()
needs_spec = pytest.mark.skipif(
    not (SPEC_DIR / "messages").is_dir(),
    reason=f"Kafka's protocol definitions are not at {SPEC_DIR} "
    "(set TRIO_BROKER_KAFKA_PROTOCOL_DIR)",
)


@needs_spec
def test_committed_modules_are_current() -> None:
    files = generator.generate(SPEC_DIR)
    assert generator.stale_files(files) == [], "run: python -m trio_broker.protocol.generator"


@needs_spec
def test_check_mode_exit_codes(tmp_path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "trio_broker.protocol.generator", "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    # A stale or missing file makes --check fail and names it.
    files = generator.generate(SPEC_DIR)
    generator.write({"produce_request.py": files["produce_request.py"] + "# edited\n"}, tmp_path)
    stale = generator.stale_files(files, tmp_path)
    assert "produce_request.py" in stale
    assert "fetch_request.py" in stale


@needs_spec
def test_output_is_deterministic() -> None:
    assert generator.generate(SPEC_DIR) == generator.generate(SPEC_DIR)


@needs_spec
def test_selection_follows_listeners() -> None:
    names = {m.name for m in generator.select_specs(SPEC_DIR)}
    assert {"ProduceRequest", "ProduceResponse", "RequestHeader", "ResponseHeader"} <= names
    assert {"ConsumerProtocolAssignment", "OffsetCommitKey", "TransactionLogValue"} <= names
    # LeaderAndIsr is served by zkBroker only (a ZooKeeper-era cluster's brokers, as ours);
    # BrokerRegistration by a KRaft controller only.
    assert {"LeaderAndIsrRequest", "UpdateMetadataRequest", "StopReplicaRequest"} <= names
    assert "BrokerRegistrationRequest" not in names


def test_comment_lines_are_stripped(tmp_path) -> None:
    path = tmp_path / "X.json"
    path.write_text('// licence\n{\n  // why\n  "name": "X"\n}\n')
    assert generator.load_json(path) == {"name": "X"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0+", (0, generator.OPEN)), ("3-7", (3, 7)), ("5", (5, 5)), ("none", None), (None, None)],
)
def test_parse_versions(text, expected) -> None:
    assert generator.parse_versions(text) == expected


@pytest.mark.parametrize(
    ("name", "snake"),
    [
        ("ThrottleTimeMs", "throttle_time_ms"),
        ("TopicId", "topic_id"),
        ("ApiKey", "api_key"),
        ("Records", "records"),
        ("V3AndBelowTopics", "v3_and_below_topics"),
        ("protocolType", "protocol_type"),
        ("ProduceRequest", "produce_request"),
    ],
)
def test_snake_case(name: str, snake: str) -> None:
    assert generator.snake_case(name) == snake
