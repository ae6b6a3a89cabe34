"""Debian's Go Kafka clients, built offline from /usr/share/gocode (sarama 1.22.1 and
kafka-go 0.2.1, installed by .ci/run).

sarama: its admin (ListTopics is DescribeConfigs v0), producers of Kafka 0.9 (message
format 0), 0.10 (format 1) and 0.11 (idempotent, format 2) with every codec (zstd, which it
sends on Produce v3, refused as Kafka refuses it), its consumer and a consumer group whose
commit it reads back. The program is tests/golang/oldclients/main.go; it prints one JSON
line per step.

kafka-go: its own package tests (Debian ships them with the source), which expect a broker
at localhost:9092 with node id 1: a copy of them is pointed at a free port. They cover its
writer and reader (Produce v2, Fetch v2: format 1) with every codec, its Conn's admin and
group requests, and its consumer groups."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import attrs
import pytest

from trio_broker.testing import BrokerThread, free_port

GOCODE = Path("/usr/share/gocode/src")
KAFKA_GO = "github.com/segmentio/kafka-go"
PROGRAM = Path(__file__).resolve().parents[1] / "golang" / "oldclients"
VALUES = [f"{i} k{i} value {i}" for i in range(10)]
# The one package test that names a broker version it needs: "it currently only succeeds
# against kafka 0.10.1.0, so it will be skipped" (it calls t.Skip() itself).
KAFKA_GO_SKIPS = ["TestReadTruncatedMessages"]


@attrs.frozen
class GoBuilds:
    oldclients: Path  # the sarama program
    kafka_go_tests: Path  # kafka-go's package tests, compiled
    kafka_go_dir: Path  # their copy (the working directory they run in)
    port: int  # the one they were pointed at


def _go_cache(go: str, root: Path) -> str:
    """Go's own build cache (~/.cache/go-build), which outlives the run: sarama, kafka-go and
    their dependencies (DataDog/zstd through cgo) compile once per machine, not once per run
    (here, loaded: 80-100 s cold, 7 s warm). Its entries are keyed by the content and flags
    of what they hold, so a stale one is never used. A temporary one if Go has none."""
    found = subprocess.run([go, "env", "GOCACHE"], capture_output=True, text=True, timeout=60)
    cache = found.stdout.strip()
    if found.returncode != 0 or cache in ("", "off"):
        return str(root / "cache")
    return cache


@pytest.fixture(scope="module")
def go_builds(tmp_path_factory) -> GoBuilds:
    go = shutil.which("go")
    needed = [GOCODE / "github.com/Shopify/sarama", GOCODE / KAFKA_GO]
    if go is None or not all(p.is_dir() for p in needed):
        pytest.skip(
            "Debian's Go clients are not installed (apt-get install golang-go "
            "golang-github-shopify-sarama-dev golang-github-segmentio-kafka-go-dev; .ci/run does)"
        )
    root = tmp_path_factory.mktemp("go")
    gopath = root / "gopath" / "src"
    shutil.copytree(PROGRAM, gopath / "oldclients")
    # kafka-go's tests dial localhost:9092 and expect it advertised as such: the copy dials
    # a free port instead (Host "localhost" and node id 1 stay, the broker is given both).
    port = free_port()
    kafka_go = gopath / KAFKA_GO
    shutil.copytree(GOCODE / KAFKA_GO, kafka_go)
    for test_file in kafka_go.glob("*_test.go"):
        test_file.write_text(test_file.read_text().replace("9092", str(port)))
    env = {
        **os.environ,
        "GO111MODULE": "off",  # GOPATH mode: the packages Debian ships, nothing fetched
        "GOPATH": f"{root / 'gopath'}:{GOCODE.parent}",
        "GOCACHE": _go_cache(go, root),
        "GOPROXY": "off",
        "GOFLAGS": "",
    }
    builds = GoBuilds(root / "oldclients", root / "kafka-go.test", kafka_go, port)
    # -trimpath: the copies' paths (a new tmp dir each run) stay out of the cache's keys.
    commands = [
        [go, "build", "-trimpath", "-o", str(builds.oldclients), "oldclients"],
        [go, "test", "-c", "-trimpath", "-vet=off", "-o", str(builds.kafka_go_tests), KAFKA_GO],
    ]
    running = [
        subprocess.Popen(c, env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for c in commands
    ]
    for command, process in zip(commands, running, strict=True):
        output, _ = process.communicate(timeout=400)
        assert process.returncode == 0, (command, output.decode(errors="replace")[-3000:])
    return builds


def test_sarama_from_debian(go_builds, tmp_path):
    props = {
        "log.dirs": str(tmp_path / "data"),
        "num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    with BrokerThread(props) as broker:
        run = subprocess.run(
            [str(go_builds.oldclients), broker.bootstrap],
            capture_output=True,
            text=True,
            timeout=240,
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
    zstd = by_topic["sarama-0.11-zstd"]
    assert "compression type" in zstd["produce"], zstd  # UNSUPPORTED_COMPRESSION_TYPE
    assert (zstd["offsets"], zstd["values"]) == ([], [])
    (group,) = [s for s in steps if s["step"] == "sarama-group"]
    assert (group["consume"], group["error"]) == ("", "")
    assert group["values"] == [f"value {i}" for i in range(10)]
    assert group["committed"] == 10


# kafka-go's tests hold deadlines of their own (1 s around DeleteTopics and the Metadata
# after it, 5 s per writer batch, 100 ms fetch waits counted in Stats) and race the clock
# (the special offsets test writes its last message after a 1 s sleep, which must land after
# the reader's SetOffset(LastOffset); its concurrent writer and reader share a connection
# where a Fetch of the log end sent before the Produce that fills it waits 2^31 ms with the
# Produce behind it, one request in flight per connection as in Kafka). On a loaded machine
# these can fail against any broker: a test that fails or hangs is run once more, alone
# (its subtests still in parallel), and must pass then.
@attrs.frozen
class GoTestRun:
    results: dict[str, list[str]]  # PASS / FAIL / SKIP -> top-level test names
    hung: set[str]  # started, never finished (the binary's timeout ended it)
    output: str


def run_kafka_go_tests(builds: GoBuilds, *args: str) -> GoTestRun:
    run = subprocess.run(
        [str(builds.kafka_go_tests), "-test.v", "-test.timeout=90s", *args],
        cwd=builds.kafka_go_dir,
        capture_output=True,
        text=True,
        timeout=200,
    )
    results: dict[str, list[str]] = {"PASS": [], "FAIL": [], "SKIP": []}
    started = set()
    for line in run.stdout.splitlines():
        if line.startswith("--- "):  # a top-level test's result (subtests are indented)
            outcome, name = line.split()[1:3]
            results[outcome.rstrip(":")].append(name)
        elif line.startswith(("=== RUN", "=== CONT")):
            started.add(line.split()[2].split("/")[0])
    finished = {name for names in results.values() for name in names}
    timed_out = "panic: test timed out" in run.stderr + run.stdout
    hung = started - finished if timed_out else set()
    if not (results["FAIL"] or hung):
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return GoTestRun(results, hung, run.stdout + run.stderr)


def test_kafka_go_package_tests(go_builds, tmp_path):
    """All of kafka-go 0.2.1's package tests pass against a lone broker but the one that
    names a broker version of its own."""
    listener = f"PLAINTEXT://localhost:{go_builds.port}"
    props = {
        "listeners": listener,
        "advertised.listeners": listener,
        "node.id": "1",
        "log.dirs": str(tmp_path / "data"),
        "num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    with BrokerThread(props):
        # Most of its tests are parallel and wait on timers (its writer's 1 s batches):
        # all of them at once, not GOMAXPROCS at a time.
        first = run_kafka_go_tests(go_builds, "-test.parallel=32")
        again = set(first.results["FAIL"]) | first.hung
        passed = set(first.results["PASS"])
        if again:
            print(f"kafka-go tests run again: {sorted(again)}\n{first.output[-4000:]}")
            pattern = "|".join(sorted(again))
            second = run_kafka_go_tests(go_builds, f"-test.run=^({pattern})$")
            assert (second.results["FAIL"], second.hung) == ([], set()), second.output[-6000:]
            assert sorted(second.results["PASS"]) == sorted(again)
            passed |= again
    assert first.results["SKIP"] == KAFKA_GO_SKIPS
    assert len(passed) == 51, sorted(passed)
