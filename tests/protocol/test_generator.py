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


def test_generated_classes_behave_as_the_attrs_classes_they_replace() -> None:
    """Keyword-only construction with the spec's defaults, a new list or struct for each
    instance, equality by value and class, unhashable, attrs' repr, and `replace`."""
    from trio_broker.protocol._generated.fetch_response import (
        FetchableTopicResponse,
        FetchResponse,
        PartitionData,
    )
    from trio_broker.protocol._generated.metadata_request import MetadataRequest

    a, b = PartitionData(), PartitionData()
    assert (a.high_watermark, a.preferred_read_replica, a.aborted_transactions) == (0, -1, [])
    assert a.aborted_transactions is not b.aborted_transactions
    assert a.current_leader is not b.current_leader  # a struct default is made per instance
    assert (a.current_leader.leader_id, a.current_leader.leader_epoch) == (-1, -1)
    t1, t2 = FetchableTopicResponse(), FetchableTopicResponse()
    t1.partitions.append(a)
    assert t2.partitions == []  # a list default too
    assert MetadataRequest(topics=None).topics is None  # a null array stays null
    with pytest.raises(TypeError):
        PartitionData(0)  # keyword-only
    with pytest.raises(TypeError):
        PartitionData(no_such_field=1)

    assert PartitionData(partition_index=3) == PartitionData(partition_index=3)
    assert PartitionData(partition_index=3) != PartitionData(partition_index=4)
    assert FetchResponse() != PartitionData()
    with pytest.raises(TypeError):
        hash(PartitionData())
    assert repr(FetchResponse(throttle_time_ms=5)).startswith(
        "FetchResponse(throttle_time_ms=5, error_code=0, session_id=0, responses=[]"
    )
    moved = a.replace(high_watermark=7)
    assert (moved.high_watermark, a.high_watermark, moved.current_leader) == (
        7,
        0,
        a.current_leader,
    )
    with pytest.raises(TypeError):
        a.replace(no_such_field=1)
