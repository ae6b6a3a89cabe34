from __future__ import annotations

import uuid

import pytest

from trio_broker.log.checkpoints import (
    CorruptCheckpointError,
    read_epoch_checkpoint,
    read_meta_properties,
    read_offset_checkpoint,
    read_partition_metadata,
    topic_id_from_str,
    topic_id_to_str,
    write_offset_checkpoint,
    write_partition_metadata,
)


def test_offset_checkpoint_exact_format(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_offset_checkpoint(path, {("orders", 0): 42, ("my-topic", 11): 7})
    assert path.read_bytes() == b"0\n2\norders 0 42\nmy-topic 11 7\n"
    assert read_offset_checkpoint(path) == {("orders", 0): 42, ("my-topic", 11): 7}
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()
    write_offset_checkpoint(path, {})
    assert path.read_bytes() == b"0\n0\n"
    assert read_offset_checkpoint(tmp_path / "missing") == {}


@pytest.mark.parametrize("text", ["1\n0\n", "0\n2\na 0 1\n", "0\n1\na b c\n", ""])
def test_corrupt_offset_checkpoint(tmp_path, text):
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError):
        read_offset_checkpoint(path)


def test_epoch_checkpoint_reads_kafka_text(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n3\n0 0\n2 150\n5 900\n")
    assert read_epoch_checkpoint(path) == [(0, 0), (2, 150), (5, 900)]


def test_partition_metadata_and_topic_id(tmp_path):
    topic_id = uuid.UUID("6f2c8a3e-1b4d-4e5f-9a7b-0c1d2e3f4a5b")
    text = topic_id_to_str(topic_id)
    assert len(text) == 22 and "=" not in text
    assert topic_id_from_str(text) == topic_id
    write_partition_metadata(tmp_path, topic_id)
    assert (tmp_path / "partition.metadata").read_text() == f"version: 0\ntopic_id: {text}"
    assert read_partition_metadata(tmp_path) == topic_id
    # Kafka's own example id parses.
    assert topic_id_from_str("MkU3OEVBNTcwNTJENDM2Qg").bytes == b"2E78EA57052D436B"
    assert read_meta_properties(tmp_path) is None
