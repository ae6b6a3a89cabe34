"""Debian's Go Kafka clients, built offline from /usr/share/gocode (sarama 1.22.1 and
kafka-go 0.2.1, installed by .ci/run): sarama's admin (ListTopics is DescribeConfigs v0),
producers of Kafka 0.9 (message format 0), 0.10 (format 1) and 0.11 (idempotent, format 2)
with every codec, its consumer and a consumer group whose commit it reads back; kafka-go's
writer and reader (Produce v2, Fetch v2: format 1) with every codec. The program is
tests/golang/oldclients/main.go; it prints one JSON line per step."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from trio_broker.testing import BrokerThread

GOCODE = Path("/usr/share/gocode/src")
PROGRAM = Path(__file__).resolve().parents[1] / "golang" / "oldclients"
VALUES = [f"{i} k{i} value {i}" for i in range(10)]


@pytest.fixture(scope="module")
def oldclients(tmp_path_factory) -> Path:
    go = shutil.which("go")
    needed = [GOCODE / "github.com/Shopify/sarama", GOCODE / "github.com/segmentio/kafka-go"]
    if go is None or not all(p.is_dir() for p in needed):
        pytest.skip(
            "Debian's Go clients are not installed (apt-get install golang-go "
            "golang-github-shopify-sarama-dev golang-github-segmentio-kafka-go-dev; .ci/run does)"
        )
    root = tmp_path_factory.mktemp("go")
    shutil.copytree(PROGRAM, root / "gopath" / "src" / "oldclients")
    env = {
        **os.environ,
        "GO111MODULE": "off",  # GOPATH mode: the packages Debian ships, nothing fetched
        "GOPATH": f"{root / 'gopath'}:{GOCODE.parent}",
        "GOCACHE": str(root / "cache"),
        "GOPROXY": "off",
        "GOFLAGS": "",
    }
    binary = root / "oldclients"
    subprocess.run(
        [go, "build", "-o", str(binary), "oldclients"],
        env=env,
        cwd=root,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return binary


def test_sarama_and_kafka_go_from_debian(oldclients, tmp_path):
    props = {
        "log.dirs": str(tmp_path / "data"),
        "num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    with BrokerThread(props) as broker:
        run = subprocess.run(
            [str(oldclients), broker.bootstrap], capture_output=True, text=True, timeout=240
        )
    assert run.returncode == 0, run.stderr[-2000:]
    steps = [json.loads(line) for line in run.stdout.splitlines()]
    by_topic = {s.get("topic"): s for s in steps}

    (admin,) = [s for s in steps if s["step"] == "sarama-admin"]
    assert (admin["create"], admin["list"], admin["partitions"]) == ("", "", 2)
    for codec in ("none", "gzip", "snappy", "lz4"):
        generations = ["0.10", "0.11-idempotent"] + (["0.9"] if codec != "lz4" else [])
        for generation in generations:
            step = by_topic[f"sarama-{generation}-{codec}"]
            assert (step["produce"], step["consume"]) == ("", ""), step
            assert step["offsets"] == list(range(10))
            assert step["values"] == VALUES
        step = by_topic[f"kafka-go-{codec}"]
        assert (step["write"], step["read"], step["values"]) == ("", "", VALUES), step
    (group,) = [s for s in steps if s["step"] == "sarama-group"]
    assert (group["consume"], group["error"]) == ("", "")
    assert group["values"] == [f"value {i}" for i in range(10)]
    assert group["committed"] == 10
